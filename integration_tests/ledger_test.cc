// "I never got my email", end to end: a real collector with its /feedback/sandbox path on and a
// real sender delivering through the sandbox transport. A signup to bounce@ is sent and bounced
// by the sandbox's report; the ledger (mailroom.email_history) shows the try and the bounce;
// the application is told (a NOTIFY on mailroom_email_events and the feed); FindEmails shows the
// operator the email, its ledger and the suppression; a resend while suppressed is refused;
// RemoveSuppression (with a reason) lets the next resend through, which is sent (and bounced
// again, as bounce@ always is); the audit holds both operator calls. Every wait is on rows or
// notifications, with a deadline.
#include <pqxx/pqxx>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/mailroom/v1/mailroom.grpc.pb.h"
#include "testing/collector_client.h"
#include "testing/stack.h"

namespace mailroom {
namespace {

constexpr char kSandboxSecret[] = "whsec_c2FuZGJveHNhbmRib3hzYW5kYm94c2FuZGJveA==";
constexpr char kBounce[] = "bounce@sandbox.mailroom.test";

class LedgerTest : public testing::StackTest {};

// Receives mailroom_email_events notifications on a connection of its own.
class Listener : public pqxx::notification_receiver {
 public:
  explicit Listener(pqxx::connection_base& c)
      : pqxx::notification_receiver(c, "mailroom_email_events") {}
  void operator()(const std::string& payload, int) override { payloads.push_back(payload); }
  std::vector<std::string> payloads;
};

TEST_F(LedgerTest, ABounceReachesTheLedgerTheApplicationAndTheOperatorWhoLetsTheResendThrough) {
  const int collector_port = testing::FreePort();
  const int feedback_port = testing::FreePort();
  auto collector = StartCollector({{"MAILROOM_FEEDBACK_ADDRESS",
                                    absl::StrCat("127.0.0.1:", feedback_port)},
                                   {"MAILROOM_FEEDBACK_SANDBOX_SECRET", kSandboxSecret}},
                                  "ledger-collector", collector_port);
  ASSERT_NE(collector, nullptr);
  auto sender = StartSender(
      {{"MAILROOM_TRANSPORT", "sandbox"},
       {"MAILROOM_SANDBOX_FEEDBACK_URL",
        absl::StrCat("http://127.0.0.1:", feedback_port, "/feedback/sandbox")},
       {"MAILROOM_SANDBOX_FEEDBACK_SECRET", kSandboxSecret},
       {"MAILROOM_SANDBOX_EVENT_DELAY_MS", "200"}},
      "sender", collector_port);
  ASSERT_NE(sender, nullptr);
  pqxx::connection listening(url_);
  Listener listener(listening);

  Exec(absl::StrCat("INSERT INTO accounts (email, login) VALUES ('", kBounce, "', 'bounce')"));
  const int64_t account = Scalar(
      absl::StrCat("SELECT id FROM accounts WHERE email = '", kBounce, "'"));
  const absl::Duration deadline = absl::Seconds(30);
  // The feed: sent, then bounced.
  const std::string feed_bounced =
      "SELECT count(*) FROM mailroom.email_events(0, 1000) WHERE event = 'bounced'"
      " AND account = " +
      absl::StrCat(account);
  ASSERT_EQ(WaitFor(feed_bounced, 1, deadline), 1) << collector->Log() << sender->Log();
  const int64_t bounced_id = Scalar(
      "SELECT event_id FROM mailroom.email_events(0, 1000) WHERE event = 'bounced'");
  // The NOTIFY for it (or a later publish).
  const absl::Time until = absl::Now() + deadline;
  auto notified_up_to = [&] {
    int64_t last = 0;
    for (const std::string& p : listener.payloads) last = std::max<int64_t>(last, std::stoll(p));
    return last;
  };
  while (notified_up_to() < bounced_id && absl::Now() < until) {
    listening.await_notification(1, 0);
  }
  EXPECT_GE(notified_up_to(), bounced_id);
  // The ledger: the try (its hand-out, the sandbox and its message id) and the bounce.
  std::vector<std::string> ledger;
  pqxx::connection c(url_);
  for (const auto& r : pqxx::nontransaction(c).exec(
           absl::StrCat("SELECT event, coalesce(handout, 0), coalesce(provider, '-'),"
                        " coalesce(provider_message_id LIKE 'sbx-%', false), coalesce(detail, '-')"
                        " FROM mailroom.email_history(",
                        account, ") WHERE event_id IS NOT NULL"))) {
    ledger.push_back(absl::StrCat(r[0].as<std::string>(), " ", r[1].as<int>(), " ",
                                  r[2].as<std::string>(), " ", r[3].as<bool>() ? "sbx" : "-", " ",
                                  r[4].as<std::string>()));
  }
  EXPECT_THAT(ledger, ::testing::ElementsAre("sent 1 sandbox sbx sandbox",
                                             "bounced 0 sandbox - Permanent"));

  // The operator looks the address up.
  auto stub = v1::Collector::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", collector_port),
                                                         grpc::InsecureChannelCredentials()));
  v1::FindEmailsRequest find;
  find.set_consumer_group("mailroom");
  find.set_address("Bounce@Sandbox.Mailroom.Test");
  v1::FindEmailsResponse found;
  {
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, testing::kStackBearer);
    ASSERT_TRUE(stub->FindEmails(&ctx, find, &found).ok());
  }
  ASSERT_EQ(found.emails_size(), 1);
  EXPECT_EQ(found.emails(0).action_name(), "activation");
  EXPECT_EQ(found.emails(0).state(), "bounced");
  EXPECT_EQ(found.emails(0).provider(), "sandbox");
  ASSERT_GE(found.emails(0).ledger_size(), 2);
  EXPECT_EQ(found.emails(0).ledger(0).event(), "sent");
  EXPECT_EQ(found.emails(0).ledger(1).event(), "bounced");
  EXPECT_TRUE(found.suppressed());
  EXPECT_EQ(found.suppression().reason(), v1::SUPPRESSION_REASON_HARD_BOUNCE);

  // While suppressed a resend is refused; once the operator removes it, the resend goes out.
  EXPECT_EQ(Scalar(absl::StrCat("SELECT count(*) FROM mailroom.request(", account,
                                ", 'activation') WHERE decision = 'suppressed'")),
            1);
  v1::RemoveSuppressionRequest remove;
  remove.set_address(kBounce);
  remove.set_reason("user fixed the mailbox");
  v1::RemoveSuppressionResponse removed;
  {
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, testing::kStackBearer);
    ASSERT_TRUE(stub->RemoveSuppression(&ctx, remove, &removed).ok());
  }
  EXPECT_EQ(Scalar(absl::StrCat("SELECT count(*) FROM mailroom.request(", account,
                                ", 'activation') WHERE decision = 'queued'")),
            1);
  EXPECT_EQ(WaitFor(absl::StrCat("SELECT count(*) FROM mailroom.email_history(", account,
                                 ") WHERE event = 'sent'"),
                    2, deadline),
            2)
      << sender->Log();
  // bounce@ bounces every time: the resend is bounced and suppressed again, by the same path.
  EXPECT_EQ(WaitFor(feed_bounced, 2, deadline), 2) << collector->Log();
  EXPECT_EQ(WaitFor(absl::StrCat("SELECT count(*) FROM suppressions WHERE address = '", kBounce,
                                 "'"),
                    1, deadline),
            1);

  // The audit: who looked the address up and who removed its suppression, and why.
  v1::ListAuditResponse audit;
  {
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, testing::kStackBearer);
    ASSERT_TRUE(stub->ListAudit(&ctx, v1::ListAuditRequest(), &audit).ok());
  }
  // Newest first: this very ListAudit (still running as it reads), then the two calls.
  ASSERT_EQ(audit.entries_size(), 3);
  EXPECT_EQ(audit.entries(0).method(), "ListAudit");
  EXPECT_EQ(audit.entries(0).outcome(), "started");
  EXPECT_EQ(audit.entries(1).method(), "RemoveSuppression");
  EXPECT_EQ(audit.entries(1).target(), absl::StrCat(kBounce, " reason user fixed the mailbox"));
  EXPECT_EQ(audit.entries(1).outcome(), "OK: removed hard_bounce");
  EXPECT_EQ(audit.entries(2).method(), "FindEmails");
  EXPECT_EQ(audit.entries(2).target(), kBounce);
  EXPECT_EQ(audit.entries(2).outcome(), "OK: 1 emails");
  EXPECT_EQ(audit.entries(2).consumer_group(), "mailroom");
  EXPECT_FALSE(audit.entries(2).credential().empty());
  EXPECT_THAT(collector->Log(), ::testing::Not(::testing::HasSubstr(testing::kStackBearer)));
}

}  // namespace
}  // namespace mailroom
