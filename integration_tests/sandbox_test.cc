// The sandbox transport end to end: a real collector with its /feedback/sandbox path on, a real
// sender delivering through the sandbox, whose events travel the feedback path a provider's
// take. A signup to bounce@ ends with the recipient suppressed and the delivery's bounce
// recorded, complaint@ with the complaint counted, softbounce@ with a soft bounce counted,
// delivered@ and delayed@ with their delivery recorded, suppressed@ with the job failed and the
// address suppressed by the refusal itself. Every wait is on rows, with a deadline.
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/stack.h"

namespace mailroom {
namespace {

constexpr char kSandboxSecret[] = "whsec_c2FuZGJveHNhbmRib3hzYW5kYm94c2FuZGJveA==";

class SandboxTest : public testing::StackTest {};

std::string At(const std::string& local) { return local + "@sandbox.mailroom.test"; }

TEST_F(SandboxTest, EachSimulatorAddressEndsAsAProvidersFeedbackWouldMakeIt) {
  const int collector_port = testing::FreePort();
  const int feedback_port = testing::FreePort();
  auto collector = StartCollector({{"MAILROOM_FEEDBACK_ADDRESS",
                                    absl::StrCat("127.0.0.1:", feedback_port)},
                                   {"MAILROOM_FEEDBACK_SANDBOX_SECRET", kSandboxSecret}},
                                  "sandbox-collector", collector_port);
  ASSERT_NE(collector, nullptr);
  ASSERT_TRUE(collector->WaitForLog("feedback_paths=sandbox", absl::Seconds(10)))
      << collector->Log();
  auto sender = StartSender(
      {{"MAILROOM_TRANSPORT", "sandbox"},
       {"MAILROOM_SANDBOX_FEEDBACK_URL",
        absl::StrCat("http://127.0.0.1:", feedback_port, "/feedback/sandbox")},
       {"MAILROOM_SANDBOX_FEEDBACK_SECRET", kSandboxSecret},
       {"MAILROOM_SANDBOX_EVENT_DELAY_MS", "200"},
       {"MAILROOM_SANDBOX_DIR", dir_ + "/sandbox"}},
      "sender", collector_port);
  ASSERT_NE(sender, nullptr);

  for (const char* local :
       {"bounce", "complaint", "softbounce", "delivered", "delayed", "suppressed"}) {
    Exec(absl::StrCat("INSERT INTO accounts (email, login) VALUES ('", At(local), "', '", local,
                      "')"));
  }
  const absl::Duration deadline = absl::Seconds(30);
  // What the sandbox answered: five accepted with its message ids, one refused.
  EXPECT_EQ(WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'"
                    " AND provider_message_id LIKE 'sbx-%'",
                    5, deadline),
            5)
      << sender->Log();
  EXPECT_EQ(WaitFor("SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
                    " JOIN accounts a ON a.id = t.account WHERE d.state = 'failed'"
                    " AND a.email = '" +
                        At("suppressed") + "'",
                    1, deadline),
            1)
      << sender->Log();
  EXPECT_EQ(Scalar("SELECT count(*) FROM suppressions WHERE address = '" + At("suppressed") +
                   "' AND reason = 'smtp_rejected'"),
            1);

  // The events, through /feedback/sandbox.
  EXPECT_EQ(WaitFor("SELECT count(*) FROM suppressions WHERE address = '" + At("bounce") +
                        "' AND reason = 'hard_bounce'"
                        " AND source LIKE 'sandbox bounce: Permanent %'",
                    1, deadline),
            1)
      << collector->Log() << sender->Log();
  auto bounced_of = [&](const std::string& local) {
    return "SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
           " JOIN accounts a ON a.id = t.account WHERE a.email = '" +
           At(local) + "'";
  };
  EXPECT_EQ(Scalar(bounced_of("bounce") +
                   " AND d.bounced_at IS NOT NULL AND d.bounce_type = 'Permanent'"),
            1);
  EXPECT_EQ(WaitFor("SELECT coalesce(sum(complained), 0) FROM reputation_hourly"
                    " WHERE provider = 'sandbox'",
                    1, deadline),
            1);
  EXPECT_EQ(WaitFor(bounced_of("complaint") + " AND d.complained_at IS NOT NULL", 1, deadline), 1);
  EXPECT_EQ(WaitFor("SELECT count(*) FROM suppressions WHERE address = '" + At("complaint") +
                        "' AND reason = 'complaint'",
                    1, deadline),
            1);
  EXPECT_EQ(WaitFor("SELECT count(*) FROM soft_bounces WHERE address = '" + At("softbounce") + "'",
                    1, deadline),
            1);
  EXPECT_EQ(Scalar(bounced_of("softbounce") + " AND d.bounce_type = 'Transient'"), 1);
  // delivered@, complaint@ (delivered, then a complaint) and delayed@ (delayed, then delivered).
  EXPECT_EQ(WaitFor("SELECT count(*) FROM delivery_states WHERE delivered_at IS NOT NULL", 3,
                    deadline),
            3);
  EXPECT_EQ(Scalar(bounced_of("delivered") + " AND d.delivered_at IS NOT NULL"), 1);
  EXPECT_EQ(Scalar(bounced_of("delayed") + " AND d.delivered_at IS NOT NULL"), 1);
  EXPECT_EQ(WaitFor("SELECT coalesce(sum(delivered), 0) FROM reputation_hourly"
                    " WHERE provider = 'sandbox'",
                    3, deadline),
            3);
  EXPECT_EQ(Scalar("SELECT coalesce(sum(bounced), 0) FROM reputation_hourly"
                   " WHERE provider = 'sandbox'"),
            1);
  // Only the hard bounce, the complaint and the refusal suppress; a single soft bounce does not.
  EXPECT_EQ(Scalar("SELECT count(*) FROM suppressions"), 3);
  // The accepted messages were also written out; the refused one was not.
  EXPECT_EQ(testing::Files(dir_ + "/sandbox", ".eml").size(), 5u);
  // Every event was answered (the delay "ignored"): none was dropped.
  EXPECT_THAT(sender->Log(), ::testing::Not(::testing::HasSubstr("sandbox event dropped")));
  EXPECT_THAT(sender->Log(), ::testing::Not(::testing::HasSubstr(kSandboxSecret + 6)));
}

}  // namespace
}  // namespace mailroom
