// SES feedback through SNS, end to end: a real collector with its feedback
// endpoint and metrics on loopback, a real sender delivering through the SES v2 emulator
// behind sender/transport/testing/ses_front.py, which also plays SNS (its own test CA, signing
// certificate served over HTTPS, SubscribeURL). A hard bounce delivered as a signed SNS
// notification suppresses the address for good; a forged notification changes nothing; the
// reputation figures appear in /metrics.
#include <curl/curl.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/stack.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;

size_t Collect(char* p, size_t s, size_t n, void* out) {
  static_cast<std::string*>(out)->append(p, s * n);
  return s * n;
}

// GET (empty body) or POST `body` to `url`; the answer's body ("" on a transport error).
std::string Http(const std::string& url, const std::string& body = "", bool post = false) {
  std::string out;
  CURL* c = curl_easy_init();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  if (post) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &out);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
  if (curl_easy_perform(c) != CURLE_OK) out.clear();
  curl_easy_cleanup(c);
  return out;
}

class FeedbackTest : public testing::StackTest {
 protected:
  // Asks the SNS player to POST an SES event about the last message to `to`; returns the
  // endpoint's HTTP status.
  int Event(const std::string& event, const std::string& to, int version, bool forge,
            const std::string& topic = "") {
    nlohmann::json req = {{"endpoint", endpoint_}, {"recipient", to},
                          {"event", event},        {"bounce_type", "Permanent"},
                          {"version", version},    {"forge", forge},
                          {"topic", topic}};
    auto answer = nlohmann::json::parse(Http(front_ + "/_sns/event", req.dump(), true), nullptr,
                                        false);
    return answer.is_object() && answer.contains("status") ? answer["status"].get<int>() : -1;
  }
  // Waits until /metrics shows `line` (a series and its value), or the timeout.
  bool MetricsShow(const std::string& line, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    do {
      if (Http(metrics_).find("\n" + line + "\n") != std::string::npos) return true;
      absl::SleepFor(absl::Milliseconds(100));
    } while (absl::Now() < deadline);
    return false;
  }

  // The SES front playing SNS, a collector with its feedback endpoint and metrics (plus
  // `extra` settings) and a sender using SES through it; false when the npm peers are missing.
  bool StartFeedbackStack(std::map<std::string, std::string> extra) {
    const std::string sns_dir = dir_ + "/sns";
    const int sns_port = testing::FreePort();
    front_ = StartSes(0, "", {"--sns-dir", sns_dir, "--sns-port", absl::StrCat(sns_port)});
    if (front_.empty()) return false;
    const int collector_port = testing::FreePort();
    const int feedback_port = testing::FreePort();
    const int metrics_port = testing::FreePort();
    std::map<std::string, std::string> env = {
        {"MAILROOM_FEEDBACK_ADDRESS", absl::StrCat("127.0.0.1:", feedback_port)},
        {"MAILROOM_FEEDBACK_SNS_HOSTS", absl::StrCat("127.0.0.1:", sns_port)},
        {"MAILROOM_FEEDBACK_CA_FILE", sns_dir + "/ca.pem"},
        {"MAILROOM_FEEDBACK_TOPIC_ARNS", "arn:aws:sns:us-east-1:123456789012:mailroom-feedback"},
        {"MAILROOM_METRICS_ADDRESS", absl::StrCat("127.0.0.1:", metrics_port)},
        {"MAILROOM_REPUTATION_REFRESH", "200"}};
    for (auto& [k, v] : extra) env[k] = v;
    feedback_collector_ = StartCollector(env, "feedback-collector", collector_port);
    EXPECT_NE(feedback_collector_, nullptr);
    endpoint_ = absl::StrCat("http://127.0.0.1:", feedback_port, "/sns");
    metrics_ = absl::StrCat("http://127.0.0.1:", metrics_port, "/metrics");
    sender_ = StartSender(SesEnv(front_), "sender", collector_port);
    return true;
  }

  std::string front_, endpoint_, metrics_;
  std::unique_ptr<testing::Process> feedback_collector_, sender_;
};

TEST_F(FeedbackTest, AHardBounceThroughSignedSnsSuppressesAForgedOneChangesNothing) {
  if (!StartFeedbackStack({})) GTEST_SKIP() << "MAILROOM_NODE_MODULES not set (run .ci/test)";

  Exec("INSERT INTO accounts (email, login) VALUES ('gone@example.test', 'gone'),"
       " ('fine@example.test', 'fine')");
  ASSERT_EQ(WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'"
                    " AND provider_message_id IS NOT NULL",
                    2, absl::Seconds(30)),
            2);
  EXPECT_EQ(ReceivedBySes().emails, 2);
  // Each message carried its job in EmailTags, and SES's MessageId reached the delivery.
  auto sent = nlohmann::json::parse(Http(front_ + "/_sns/sent"))["sent"];
  ASSERT_EQ(sent.size(), 2u);
  for (const auto& m : sent) {
    const std::string to = m["to"];
    EXPECT_EQ(m["tags"]["mailroom_group"][0], "mailroom");
    EXPECT_EQ(m["tags"]["mailroom_action"][0], "activation");
    EXPECT_EQ(m["tags"]["mailroom_job"][0],
              absl::StrCat(Scalar("SELECT t.id FROM tokens t JOIN accounts a ON a.id = t.account"
                                  " WHERE a.email = '" +
                                  to + "'")));
    EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE provider_message_id = '" +
                     m["id"].get<std::string>() + "'"),
              1);
  }

  // The subscription: the endpoint fetches the SubscribeURL (on the allow-listed host).
  auto confirm = nlohmann::json::parse(
      Http(front_ + "/_sns/subscribe", nlohmann::json{{"endpoint", endpoint_}}.dump(), true));
  EXPECT_EQ(confirm["status"], 200);
  EXPECT_THAT(Http(front_ + "/_sns/confirmed"), HasSubstr("\"confirmed\": 1"));

  // A forged bounce (Message changed after signing): 403, nothing recorded.
  EXPECT_EQ(Event("Bounce", "gone@example.test", 2, /*forge=*/true), 403);
  EXPECT_EQ(Scalar("SELECT count(*) FROM suppressions"), 0);
  EXPECT_EQ(Scalar("SELECT count(*) FROM sns_messages"), 0);
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE bounced_at IS NOT NULL"), 0);

  // A correctly signed bounce from another AWS account's topic (anyone can create one), carrying
  // the real job's tags and message id: 403, nothing recorded, nothing for the guard to count.
  EXPECT_EQ(Event("Bounce", "gone@example.test", 2, false,
                  "arn:aws:sns:us-east-1:666666666666:attackers-own-topic"),
            403);
  EXPECT_EQ(Scalar("SELECT count(*) FROM suppressions"), 0);
  EXPECT_EQ(Scalar("SELECT count(*) FROM sns_messages"), 0);
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE bounced_at IS NOT NULL"), 0);
  EXPECT_EQ(Scalar("SELECT coalesce(sum(bounced), 0) FROM reputation_hourly"), 0);

  // A signed permanent bounce (SignatureVersion 1) and a delivery (version 2).
  EXPECT_EQ(Event("Bounce", "gone@example.test", 1, false), 200);
  EXPECT_EQ(Event("Delivery", "fine@example.test", 2, false), 200);
  EXPECT_EQ(Scalar("SELECT count(*) FROM suppressions WHERE address = 'gone@example.test'"
                   " AND reason = 'hard_bounce'"),
            1);
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
                   " JOIN accounts a ON a.id = t.account WHERE a.email = 'gone@example.test'"
                   " AND d.bounced_at IS NOT NULL AND d.bounce_type = 'Permanent'"),
            1);
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
                   " JOIN accounts a ON a.id = t.account WHERE a.email = 'fine@example.test'"
                   " AND d.delivered_at IS NOT NULL"),
            1);

  // The address is never sent to again: its next token ends suppressed, the other's is sent.
  Exec("UPDATE accounts SET status = 'active'");
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts");
  ASSERT_EQ(WaitFor("SELECT count(*) FROM delivery_states WHERE state IN ('sent', 'suppressed')", 4,
                    absl::Seconds(30)),
            4);
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
                   " JOIN accounts a ON a.id = t.account WHERE a.email = 'gone@example.test'"
                   " AND t.action = 'password_recovery' AND d.state = 'suppressed'"
                   " AND d.attempts = 0 AND d.reason LIKE 'address suppressed: hard_bounce%'"),
            1);
  EXPECT_EQ(ReceivedBySes().emails, 3);

  // The rates, in /metrics: 3 sent, 1 delivered, 1 bounced.
  EXPECT_TRUE(MetricsShow("mailroom_reputation_sent{group=\"mailroom\"} 3", absl::Seconds(10)))
      << Http(metrics_);
  EXPECT_TRUE(MetricsShow("mailroom_reputation_bounced{group=\"mailroom\"} 1", absl::Seconds(10)));
  EXPECT_TRUE(
      MetricsShow("mailroom_reputation_delivered{group=\"mailroom\"} 1", absl::Seconds(10)));
  EXPECT_TRUE(MetricsShow("mailroom_reputation_bounce_rate{group=\"mailroom\"} 0.3333333333333333",
                          absl::Seconds(10)))
      << Http(metrics_);
  EXPECT_TRUE(
      MetricsShow("mailroom_reputation_complaint_rate{group=\"mailroom\"} 0", absl::Seconds(10)));
  EXPECT_TRUE(
      MetricsShow("mailroom_collector_feedback_total{result=\"forbidden\",type=\"Notification\"} 2",
                  absl::Seconds(10)))
      << Http(metrics_);
}

// The reputation guard: once the group's bounce rate reaches the maximum, the collector stops
// handing its jobs out (they wait in PostgreSQL, nothing fails); under it again, they go out.
TEST_F(FeedbackTest, TheGuardPausesAGroupOverItsBounceRateAndResumesUnderIt) {
  if (!StartFeedbackStack(
          {{"MAILROOM_GUARD_MAX_BOUNCE_RATE", "0.5"}, {"MAILROOM_GUARD_MIN_SENT", "2"}})) {
    GTEST_SKIP() << "MAILROOM_NODE_MODULES not set (run .ci/test)";
  }
  Exec("INSERT INTO accounts (email, login) VALUES ('gone@example.test', 'gone'),"
       " ('fine@example.test', 'fine')");
  ASSERT_EQ(WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 2,
                    absl::Seconds(30)),
            2);
  EXPECT_TRUE(MetricsShow("mailroom_reputation_paused{group=\"mailroom\"} 0", absl::Seconds(10)));
  EXPECT_EQ(Event("Bounce", "gone@example.test", 2, false), 200);  // 1 of 2: 50 %
  ASSERT_TRUE(feedback_collector_->WaitForLog("msg=\"sending paused", absl::Seconds(10)))
      << feedback_collector_->Log();
  EXPECT_TRUE(MetricsShow("mailroom_reputation_paused{group=\"mailroom\"} 1", absl::Seconds(10)));

  // A recovery for the good address waits in PostgreSQL: queued, not handed out, not failed.
  Exec("UPDATE accounts SET status = 'active'");
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts"
       " WHERE email = 'fine@example.test'");
  EXPECT_TRUE(MetricsShow("mailroom_queue_depth{group=\"mailroom\"} 1", absl::Seconds(10)))
      << Http(metrics_);
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state <> 'sent'"), 0);

  // The operator fixes the cause and clears the counters: the guard lets the group go again.
  Exec("DELETE FROM reputation_hourly");
  ASSERT_EQ(WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 3,
                    absl::Seconds(30)),
            3);
  EXPECT_TRUE(feedback_collector_->WaitForLog("msg=\"sending resumed", absl::Seconds(10)));
  EXPECT_TRUE(MetricsShow("mailroom_reputation_paused{group=\"mailroom\"} 0", absl::Seconds(10)));
  EXPECT_EQ(ReceivedBySes().emails, 3);
}

}  // namespace
}  // namespace mailroom
