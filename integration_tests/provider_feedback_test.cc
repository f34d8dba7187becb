// Feedback from every provider, end to end: a real collector with every provider's feedback
// path on, a real sender delivering through the http transport to a receiver
// (sender/transport/testing/webhook_receiver.py) that answers each email with a message id of
// its own. For each provider a hard bounce of one of those emails, in that provider's published
// webhook form and signed as that provider signs, is posted to its path: the address is
// suppressed within 1 s, and its next token (a password recovery) is never handed out.
#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "collector/feedback/testing/provider_samples.h"
#include "collector/feedback/testing/provider_signer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/stack.h"

namespace mailroom {
namespace {

constexpr char kSenderSecret[] = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
constexpr char kPostmarkCredentials[] = "postmark:9b3e1c0f7a6d4e25";
constexpr char kMailgunKey[] = "key-3ax6xnjp29jd6fds4gc373sgvjxteol0";
constexpr char kResendSecret[] = "whsec_cmVzZW5kcmVzZW5kcmVzZW5kcmVzZW5kcmVzZW5k";
constexpr char kReportSecret[] = "whsec_cmVwb3J0cmVwb3J0cmVwb3J0cmVwb3J0cmVwb3J0";

// One provider's hard bounce of the email with provider id `id` to `to`, as that provider posts
// it: the path's name, the body and the headers.
struct Bounce {
  std::string provider, body;
  std::vector<std::string> headers;
};

Bounce ProviderBounce(const std::string& provider, const std::string& id, const std::string& to,
                      const testing::SendgridSigner& sendgrid) {
  const absl::Time now = absl::Now();
  std::string body;
  if (provider == "postmark") {
    body = absl::StrReplaceAll(testing::kPostmarkBounce,
                               {{"883953f4-6105-42a2-a16a-77a8eac79483", id},
                                {"john@example.com", to},
                                {"2019-11-05T16:33:54.9070259Z", absl::FormatTime(now)}});
    return {provider, body, testing::PostmarkHeaders(kPostmarkCredentials)};
  }
  if (provider == "sendgrid") {
    body = absl::StrReplaceAll(testing::kSendgridEvents,
                               {{"14c5d75ce93.dfd.64b469.filter", id + ".filter"},
                                {"example@test.com", to},
                                {"\"event\": \"spamreport\"", "\"event\": \"open\""}});
    return {provider, body, sendgrid.Headers(body, now)};
  }
  if (provider == "mailgun") {
    body = absl::StrReplaceAll(testing::kMailgunPermanentFailure,
                               {{"20130503182626.18666.16540@sandbox.mailgun.org", id},
                                {"\"alice@example.com\"", absl::StrCat("\"", to, "\"")}});
    return {provider, testing::MailgunSigned(body, kMailgunKey, now, "tok-" + id), {}};
  }
  if (provider == "resend") {
    body = absl::StrReplaceAll(testing::kResendBounced,
                               {{"56761188-7520-42d8-8898-ff6fc54ce618", id},
                                {"delivered@resend.dev", to}});
    return {provider, body,
            testing::StandardWebhookHeaders("svix-", kResendSecret, "msg_" + id, body, now)};
  }
  body = absl::StrReplaceAll(testing::kHttpReportBounced, {{"msg_mailroom_4711", id},
                                                           {"\"job_id\": \"4711\",", ""},
                                                           {"bob@example.com", to}});
  return {provider, body,
          testing::StandardWebhookHeaders("webhook-", kReportSecret, "evt_" + id, body, now)};
}

class ProviderFeedbackTest : public testing::StackTest {};

TEST_F(ProviderFeedbackTest, AHardBounceOnAnyProvidersPathSuppressesWithinASecond) {
  const int receiver_port = testing::FreePort();
  auto receiver = testing::Process::Spawn(
      {"/usr/bin/python3",
       testing::Runfile("mailroom/sender/transport/testing/webhook_receiver.py"), "serve", "--port",
       absl::StrCat(receiver_port), "--secret", kSenderSecret},
      {}, dir_ + "/receiver.log");
  ASSERT_TRUE(receiver.ok());
  ASSERT_TRUE((*receiver)->WaitForLog("ready", absl::Seconds(20))) << (*receiver)->Log();

  testing::SendgridSigner sendgrid;
  const int collector_port = testing::FreePort();
  const int feedback_port = testing::FreePort();
  auto collector = StartCollector({{"MAILROOM_FEEDBACK_ADDRESS",
                                    absl::StrCat("127.0.0.1:", feedback_port)},
                                   {"MAILROOM_FEEDBACK_POSTMARK_CREDENTIALS", kPostmarkCredentials},
                                   {"MAILROOM_FEEDBACK_SENDGRID_PUBLIC_KEY", sendgrid.PublicKey()},
                                   {"MAILROOM_FEEDBACK_MAILGUN_SIGNING_KEY", kMailgunKey},
                                   {"MAILROOM_FEEDBACK_RESEND_SECRET", kResendSecret},
                                   {"MAILROOM_FEEDBACK_HTTP_SECRET", kReportSecret}},
                                  "feedback-collector", collector_port);
  ASSERT_NE(collector, nullptr);
  ASSERT_TRUE(collector->WaitForLog("feedback_paths=postmark,sendgrid,mailgun,resend,http",
                                    absl::Seconds(10)))
      << collector->Log();
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "http"},
                             {"MAILROOM_HTTP_URL",
                              absl::StrCat("http://127.0.0.1:", receiver_port, "/mail")},
                             {"MAILROOM_HTTP_SECRET", kSenderSecret}},
                            "sender", collector_port);

  const std::vector<std::string> providers = {"postmark", "sendgrid", "mailgun", "resend", "http"};
  for (const std::string& p : providers) {
    Exec(absl::StrCat("INSERT INTO accounts (email, login) VALUES ('", p, "@example.test', '", p,
                      "')"));
  }
  Exec("INSERT INTO accounts (email, login) VALUES ('fine@example.test', 'fine')");
  ASSERT_EQ(WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'"
                    " AND provider_message_id LIKE 'rcv-%'",
                    6, absl::Seconds(30)),
            6)
      << sender->Log();

  // A provider's path reaches only what that provider sent: every email went through the
  // `http` transport, so Postmark's bounce naming one changes nothing.
  const auto rcv_of = [&](const std::string& to) {
    return Scalar("SELECT substr(d.provider_message_id, 5)::bigint FROM delivery_states d"
                  " JOIN tokens t ON t.id = d.token_id JOIN accounts a ON a.id = t.account"
                  " WHERE a.email = '" +
                  to + "'");
  };
  {
    Bounce b = ProviderBounce("postmark", absl::StrCat("rcv-", rcv_of("http@example.test")),
                              "http@example.test", sendgrid);
    // An event id of its own, so that the loop's Postmark bounce is not its duplicate.
    b.body = absl::StrReplaceAll(b.body, {{"4323372036854775807", "4323372036854775806"}});
    auto [status, answer] = testing::PostWebhook(
        absl::StrCat("http://127.0.0.1:", feedback_port, "/feedback/postmark"), b.body, b.headers);
    EXPECT_EQ(status, 200) << answer;
    EXPECT_EQ(answer, "unmatched");
    EXPECT_EQ(Scalar("SELECT count(*) FROM suppressions"), 0);
  }
  // Then each account's email as if its provider's transport had sent it.
  for (const std::string& p : providers) {
    Exec("UPDATE deliveries d SET provider = '" + p +
         "' FROM tokens t JOIN accounts a ON a.id = t.account"
         " WHERE t.id = d.token_id AND a.email = '" +
         p + "@example.test'");
  }
  for (const std::string& p : providers) {
    SCOPED_TRACE(p);
    const std::string to = p + "@example.test";
    const Bounce b = ProviderBounce(p, absl::StrCat("rcv-", rcv_of(to)), to, sendgrid);
    const absl::Time start = absl::Now();
    auto [status, answer] = testing::PostWebhook(
        absl::StrCat("http://127.0.0.1:", feedback_port, "/feedback/", p), b.body, b.headers);
    EXPECT_EQ(status, 200) << answer << collector->Log();
    EXPECT_EQ(answer, "recorded");
    // Suppressed within 1 s of the provider's post (in fact before its answer: the same
    // transaction).
    EXPECT_EQ(WaitFor("SELECT count(*) FROM suppressions WHERE address = '" + to +
                          "' AND reason = 'hard_bounce' AND source LIKE '" + p + " bounce: %'",
                      1, absl::Seconds(1)),
              1);
    const absl::Duration took = absl::Now() - start;
    EXPECT_LE(took, absl::Seconds(1));
    std::cout << p << ": suppressed " << absl::FormatDuration(took) << " after the post began\n";
    EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
                     " JOIN accounts a ON a.id = t.account WHERE a.email = '" +
                     to + "' AND d.bounced_at IS NOT NULL"),
              1);
    EXPECT_EQ(Scalar("SELECT coalesce(sum(bounced), 0) FROM reputation_hourly WHERE provider = '" +
                     p + "'"),
              1);
  }

  // Every address's next token: the bounced ones are never handed out, the other is sent.
  Exec("UPDATE accounts SET status = 'active'");
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts");
  ASSERT_EQ(WaitFor("SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
                    " WHERE t.action = 'password_recovery' AND d.state IN ('sent', 'suppressed')",
                    6, absl::Seconds(30)),
            6)
      << sender->Log();
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
                   " WHERE t.action = 'password_recovery' AND d.state = 'suppressed'"
                   " AND d.attempts = 0 AND d.reason LIKE 'address suppressed: hard_bounce%'"),
            5);
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
                   " JOIN accounts a ON a.id = t.account WHERE t.action = 'password_recovery'"
                   " AND d.state = 'sent' AND a.email = 'fine@example.test'"),
            1);
  // The receiver got the 6 activations and the one recovery, nothing else.
  std::system(absl::StrCat("curl -s http://127.0.0.1:", receiver_port, "/_control/state > ", dir_,
                           "/state.json")
                  .c_str());
  std::ifstream in(dir_ + "/state.json");
  auto state = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(state.is_object());
  EXPECT_EQ(state["messages"].size(), 7u);
  EXPECT_EQ(state["refused"], 0);
}

}  // namespace
}  // namespace mailroom
