// Failover with real processes: PostgreSQL, the collector, a sender whose primary SMTP provider
// is blackholed (a port that accepts connections and never answers) and a secondary SMTP
// provider. Every password recovery queued during the outage is delivered by the secondary
// within 5 s of the primary's breaker opening, none is lost or failed, and each is
// acknowledged at the secondary's price; activations wait for the primary. When the primary
// answers again, it takes over: new emails and the held activations go to it, at its price.
// With both providers blackholed every job is held as without a secondary until one answers.
// Prints "FAILOVER ..." lines with the figures. No fixed sleeps: every wait is a bounded
// poll for an event (a log line, a row count).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/grpc/health/v1/health.pb.h"
#include "testing/pg_server.h"
#include "testing/process.h"
#include "testing/stack.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;

constexpr int kRecoveries = 20;
constexpr int kActivations = 3;
constexpr int kAfter = 5;
constexpr int64_t kPrimaryMicros = 100;    // MAILROOM_PRICE_PER_1000=0.10
constexpr int64_t kSecondaryMicros = 800;  // MAILROOM_FAILOVER_PRICE_PER_1000=0.80
constexpr char kSendTimeoutMs[] = "2000";

// A provider that hangs: a port that accepts every connection and never says a word. Closing
// it stops the accepting but keeps the connections it took open (without a reset, a client
// waiting on one times out as it would on a real hung provider), so the port is free for a
// real server while the old connections still hang.
class Blackhole {
 public:
  Blackhole() {
    // Close-on-exec: a copy inherited by the processes the test starts would keep the port.
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    // The connections it accepts inherit SO_REUSEADDR: without it they would keep the port
    // from a new server's bind after Close().
    const int one = 1;
    if (fd_ < 0 || setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd_, 128) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      if (fd_ >= 0) close(fd_);
      fd_ = -1;
      return;
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        poll(&p, 1, 50);
        TakePending();
      }
    });
  }
  ~Blackhole() {
    Close();
    for (int c : held_) close(c);
  }
  // Stops accepting and frees the port; the connections taken stay open (and silent).
  void Close() {
    if (fd_ < 0) return;
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    TakePending();
    close(fd_);
    fd_ = -1;
  }
  int port() const { return port_; }

 private:
  void TakePending() {
    for (int c; (c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC)) >= 0;) held_.push_back(c);
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<int> held_;  // the thread's until it has ended
};

// The timestamps (ts=...) of the log lines containing every one of `needles`.
std::vector<absl::Time> LineTimes(const std::string& log, const std::vector<std::string>& needles) {
  std::vector<absl::Time> out;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    bool all = absl::StartsWith(line, "ts=");
    for (const std::string& n : needles) all = all && absl::StrContains(line, n);
    if (!all) continue;
    absl::Time t;
    std::string err;
    std::string ts(line.substr(3, line.find(' ') - 3));
    if (absl::ParseTime("%Y-%m-%dT%H:%M:%E*SZ", ts, absl::UTCTimeZone(), &t, &err)) {
      out.push_back(t);
    }
  }
  return out;
}

class FailoverTest : public testing::StackTest {
 protected:
  int64_t Sent(const std::string& action) {
    return Scalar(absl::StrCat("SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = "
                               "d.token_id WHERE d.state = 'sent' AND t.action = '",
                               action, "'"));
  }
  int64_t Failed() { return Scalar("SELECT count(*) FROM delivery_states WHERE state = 'failed'"); }
  int64_t Spent() { return Scalar("SELECT coalesce(sum(cost_micros), 0) FROM group_usage"); }
  // Waits (bounded) until `pred` holds; false on timeout.
  bool Eventually(const std::function<bool()>& pred, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!pred()) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return true;
  }
};

TEST_F(FailoverTest, RecoveriesGoThroughTheSecondaryWhileThePrimaryIsBlackholed) {
  Blackhole hole;
  ASSERT_GT(hole.port(), 0);
  const int secondary_port = testing::FreePort();
  auto secondary = StartSmtpPeerAt(secondary_port, "secondary");
  ASSERT_NE(secondary, nullptr);
  const int health_port = testing::FreePort(), metrics_port = testing::FreePort();
  auto sender = StartSender({
      {"MAILROOM_TRANSPORT", "smtp"},
      {"MAILROOM_SMTP_URL", absl::StrCat("smtp://127.0.0.1:", hole.port())},
      {"MAILROOM_SMTP_ALLOW_PLAIN", "true"},
      {"MAILROOM_PRICE_PER_1000", "0.10"},
      {"MAILROOM_SEND_TIMEOUT_MS", kSendTimeoutMs},
      {"MAILROOM_BREAKER_MAX_BACKOFF", "2000"},
      {"MAILROOM_FAILOVER_TRANSPORT", "smtp"},
      {"MAILROOM_FAILOVER_SMTP_URL", absl::StrCat("smtp://127.0.0.1:", secondary_port)},
      {"MAILROOM_FAILOVER_SMTP_ALLOW_PLAIN", "true"},
      {"MAILROOM_FAILOVER_PRICE_PER_1000", "0.80"},
      {"MAILROOM_HEALTH_ADDRESS", absl::StrCat("127.0.0.1:", health_port)},
      {"MAILROOM_METRICS_ADDRESS", absl::StrCat("127.0.0.1:", metrics_port)},
  });
  ASSERT_NE(sender, nullptr);
  ASSERT_THAT(sender->Log(), HasSubstr("secondary transport ready"));

  // Password recoveries for active accounts (no activation), and activations for new ones,
  // while the primary hangs.
  Exec(absl::StrCat("INSERT INTO accounts (email, login, status) SELECT 'r' || i || "
                    "'@example.test', 'r' || i, 'active' FROM generate_series(1, ",
                    kRecoveries, ") i"));
  const absl::Time queued = absl::Now();
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts");
  Exec(absl::StrCat("INSERT INTO accounts (email, login) SELECT 'a' || i || '@example.test', "
                    "'a' || i FROM generate_series(1, ",
                    kActivations, ") i"));

  // The first sends to the blackhole time out, the primary's breaker opens, the secondary
  // takes over.
  ASSERT_TRUE(sender->WaitForLog("failing over to the secondary", absl::Seconds(30)))
      << sender->Log();
  ASSERT_EQ(WaitFor("SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id "
                    "WHERE d.state = 'sent' AND t.action = 'password_recovery'",
                    kRecoveries, absl::Seconds(30)),
            kRecoveries)
      << sender->Log();
  const absl::Time all_sent_seen = absl::Now();
  const std::string log = sender->Log();
  const auto opened = LineTimes(log, {"provider unavailable; holding jobs", "transport=primary"});
  const auto by_secondary = LineTimes(log,
                                      {"msg=sent", "action=password_recovery", "route=secondary",
                                       absl::StrCat("cost_micros=", kSecondaryMicros)});
  ASSERT_EQ(opened.size(), 1u) << log;
  ASSERT_EQ(by_secondary.size(), static_cast<size_t>(kRecoveries)) << log;
  const absl::Time last = *std::max_element(by_secondary.begin(), by_secondary.end());
  const absl::Duration after_open = last - opened[0];
  std::printf("FAILOVER blackholed_primary: recoveries=%d by_secondary=%zu failed=%lld "
              "breaker_opened_after_ms=%lld last_recovery_after_open_ms=%lld "
              "queued_to_all_sent_ms=%lld\n",
              kRecoveries, by_secondary.size(), (long long)Failed(),
              (long long)absl::ToInt64Milliseconds(opened[0] - queued),
              (long long)absl::ToInt64Milliseconds(after_open),
              (long long)absl::ToInt64Milliseconds(all_sent_seen - queued));
  EXPECT_LE(after_open, absl::Seconds(5));
  // Nothing lost or failed, every recovery received once by the secondary, charged at its price.
  EXPECT_EQ(Failed(), 0);
  EXPECT_EQ(ReceivedIn(dir_ + "/secondary").distinct, kRecoveries);
  EXPECT_EQ(ReceivedIn(dir_ + "/secondary").emails, kRecoveries);
  EXPECT_EQ(Spent(), kRecoveries * kSecondaryMicros);
  // Activations do not fail over: none sent, none failed, none reached the secondary.
  EXPECT_EQ(Sent("activation"), 0);
  // Health stays SERVING (the secondary sends); the metrics say which transport is in use.
  EXPECT_EQ(SenderHealth(health_port), grpc::health::v1::HealthCheckResponse::SERVING);
  std::string metrics = Scrape(metrics_port);
  EXPECT_THAT(metrics, HasSubstr("mailroom_sender_transport_active{transport=\"secondary\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("mailroom_sender_transport_active{transport=\"primary\"} 0"));
  EXPECT_THAT(metrics, HasSubstr("mailroom_sender_breaker_open 1"));
  EXPECT_THAT(metrics,
              HasSubstr(absl::StrCat(
                  "mailroom_sender_transport_sent_total{transport=\"secondary\"} ", kRecoveries)));

  // The primary comes back on the same port: its next probe gets through and it takes over.
  hole.Close();
  auto primary = StartSmtpPeerAt(hole.port(), "primary");
  ASSERT_NE(primary, nullptr);
  ASSERT_TRUE(sender->WaitForLog("failing back", absl::Seconds(30))) << sender->Log();
  // The held activations go out through the primary, and so do new recoveries.
  Exec(absl::StrCat("INSERT INTO accounts (email, login, status) SELECT 'n' || i || "
                    "'@example.test', 'n' || i, 'active' FROM generate_series(1, ",
                    kAfter, ") i"));
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts "
       "WHERE login LIKE 'n%'");
  ASSERT_TRUE(Eventually(
      [&] {
        return Sent("password_recovery") == kRecoveries + kAfter &&
               Sent("activation") == kActivations;
      },
      absl::Seconds(30)))
      << sender->Log();
  EXPECT_EQ(Failed(), 0);
  EXPECT_EQ(ReceivedIn(dir_ + "/primary").distinct, kAfter + kActivations);
  EXPECT_EQ(ReceivedIn(dir_ + "/secondary").emails, kRecoveries);  // nothing more
  EXPECT_EQ(Spent(), kRecoveries * kSecondaryMicros + (kAfter + kActivations) * kPrimaryMicros);
  EXPECT_EQ(SenderHealth(health_port), grpc::health::v1::HealthCheckResponse::SERVING);
  metrics = Scrape(metrics_port);
  EXPECT_THAT(metrics, HasSubstr("mailroom_sender_transport_active{transport=\"primary\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("mailroom_sender_breaker_open 0"));
  std::printf("FAILOVER failback: primary=%lld secondary=%lld spent_micros=%lld\n",
              (long long)ReceivedIn(dir_ + "/primary").emails,
              (long long)ReceivedIn(dir_ + "/secondary").emails, (long long)Spent());
}

// Both providers down: every job is held as without a secondary (nothing failed, counted or
// charged, health NOT_SERVING); when the secondary answers again it sends the recoveries
// while the primary is still down.
TEST_F(FailoverTest, BothProvidersDownHoldEverythingUntilTheSecondaryAnswers) {
  Blackhole primary_hole, secondary_hole;
  ASSERT_GT(primary_hole.port(), 0);
  ASSERT_GT(secondary_hole.port(), 0);
  const int health_port = testing::FreePort();
  auto sender = StartSender({
      {"MAILROOM_TRANSPORT", "smtp"},
      {"MAILROOM_SMTP_URL", absl::StrCat("smtp://127.0.0.1:", primary_hole.port())},
      {"MAILROOM_SMTP_ALLOW_PLAIN", "true"},
      {"MAILROOM_SEND_TIMEOUT_MS", "1000"},
      {"MAILROOM_BREAKER_MAX_BACKOFF", "2000"},
      {"MAILROOM_FAILOVER_TRANSPORT", "smtp"},
      {"MAILROOM_FAILOVER_SMTP_URL", absl::StrCat("smtp://127.0.0.1:", secondary_hole.port())},
      {"MAILROOM_FAILOVER_SMTP_ALLOW_PLAIN", "true"},
      {"MAILROOM_FAILOVER_PRICE_PER_1000", "0.80"},
      {"MAILROOM_HEALTH_ADDRESS", absl::StrCat("127.0.0.1:", health_port)},
  });
  ASSERT_NE(sender, nullptr);
  constexpr int kJobs = 10;
  Exec(absl::StrCat("INSERT INTO accounts (email, login, status) SELECT 'b' || i || "
                    "'@example.test', 'b' || i, 'active' FROM generate_series(1, ",
                    kJobs, ") i"));
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts");
  ASSERT_TRUE(sender->WaitForLog("primary and secondary transports unavailable; holding jobs",
                                 absl::Seconds(30)))
      << sender->Log();
  EXPECT_TRUE(WaitSenderHealth(health_port, grpc::health::v1::HealthCheckResponse::NOT_SERVING,
                               absl::Seconds(5)));
  // Every job has been handed back at least once, none failed, counted or charged.
  EXPECT_EQ(WaitFor("SELECT count(*) FROM delivery_states WHERE reason LIKE 'held: provider%'",
                    kJobs, absl::Seconds(30)),
            kJobs);
  EXPECT_EQ(Failed(), 0);
  EXPECT_EQ(Sent("password_recovery"), 0);
  EXPECT_EQ(Scalar("SELECT coalesce(sum(failures), 0) FROM delivery_states"), 0);
  EXPECT_EQ(Spent(), 0);

  // The secondary comes back; the primary stays down.
  secondary_hole.Close();
  auto secondary = StartSmtpPeerAt(secondary_hole.port(), "secondary");
  ASSERT_NE(secondary, nullptr);
  EXPECT_EQ(WaitFor("SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id "
                    "WHERE d.state = 'sent' AND t.action = 'password_recovery'",
                    kJobs, absl::Seconds(30)),
            kJobs)
      << sender->Log();
  EXPECT_EQ(Failed(), 0);
  EXPECT_EQ(Scalar("SELECT coalesce(sum(failures), 0) FROM delivery_states"), 0);
  EXPECT_EQ(ReceivedIn(dir_ + "/secondary").distinct, kJobs);
  EXPECT_EQ(Spent(), kJobs * kSecondaryMicros);
  EXPECT_TRUE(WaitSenderHealth(health_port, grpc::health::v1::HealthCheckResponse::SERVING,
                               absl::Seconds(5)));
  EXPECT_THAT(sender->Log(), HasSubstr("failing over to the secondary"));
}

}  // namespace
}  // namespace mailroom
