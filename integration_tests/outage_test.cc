// Provider outages with real peers: a wrong SMTP password, a paused SES account, an untrusted
// certificate. While the provider cannot take mail no job may fail or be counted as an attempt
// (the sender's circuit breaker holds them) and the sender's health is NOT_SERVING; once the
// provider is fixed every job is sent. Each test prints one "OUTAGE ..." line with its figures.
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "testing/process.h"
#include "testing/stack.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::Process;

constexpr int kJobs = 30;
constexpr char kRightPassword[] = "right-horse-battery-staple";
constexpr char kWrongPassword[] = "wrong-password-do-not-log";

class OutageTest : public testing::StackTest {
 protected:
  void Accounts(int n) {
    Exec(absl::StrCat("INSERT INTO accounts (email, login) SELECT 'o' || i || '@example.test', "
                      "'o' || i FROM generate_series(1, ",
                      n, ") i"));
  }
  int64_t Count(const std::string& state) {
    return Scalar(absl::StrCat("SELECT count(*) FROM delivery_states WHERE state = '", state, "'"));
  }
  void MakeCert() {
    std::string cmd = absl::StrCat(
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
        "-addext subjectAltName=IP:127.0.0.1 -keyout ",
        dir_, "/key.pem -out ", dir_, "/cert.pem >/dev/null 2>&1");
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  // Holds the outage for `d` while checking that nothing fails meanwhile.
  void HoldOutage(absl::Duration d, int health_port) {
    absl::Time end = absl::Now() + d;
    while (absl::Now() < end) {
      ASSERT_EQ(Count("failed"), 0);
      ASSERT_EQ(Count("sent"), 0);
      ASSERT_EQ(SenderHealth(health_port), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
      absl::SleepFor(absl::Milliseconds(250));
    }
  }
  std::map<std::string, std::string> Observed(int health_port, int metrics_port) {
    return {{"MAILROOM_HEALTH_ADDRESS", absl::StrCat("127.0.0.1:", health_port)},
            {"MAILROOM_METRICS_ADDRESS", absl::StrCat("127.0.0.1:", metrics_port)},
            {"MAILROOM_BREAKER_MAX_BACKOFF", "4000"}};
  }
  void Print(const char* scenario, absl::Duration recovery) {
    std::printf("OUTAGE %s: jobs=%d sent=%lld failed=%lld counted_attempts=%lld "
                "recovered_in_ms=%lld\n",
                scenario, kJobs, (long long)Count("sent"), (long long)Count("failed"),
                (long long)Scalar("SELECT coalesce(sum(failures), 0) FROM delivery_states"),
                (long long)absl::ToInt64Milliseconds(recovery));
  }
};

TEST_F(OutageTest, WrongSmtpPasswordHoldsJobsUntilItIsFixed) {
  MakeCert();
  const std::string auth_file = dir_ + "/smtp-auth";
  std::ofstream(auth_file) << "mailer:" << kRightPassword;
  int smtp_port;
  auto smtp = StartSmtpPeer({"--tls-cert", dir_ + "/cert.pem", "--tls-key", dir_ + "/key.pem",
                             "--require-tls", "--auth-file", auth_file},
                            &smtp_port);
  int health_port = testing::FreePort(), metrics_port = testing::FreePort();
  auto env = Observed(health_port, metrics_port);
  env.insert({{"MAILROOM_TRANSPORT", "smtp"},
              {"MAILROOM_SMTP_URL", absl::StrCat("smtp://127.0.0.1:", smtp_port)},
              {"MAILROOM_SMTP_CA_FILE", dir_ + "/cert.pem"},
              {"MAILROOM_SMTP_USERNAME", "mailer"},
              {"MAILROOM_SMTP_PASSWORD", kWrongPassword}});
  auto sender = StartSender(env);
  ASSERT_TRUE(WaitSenderHealth(health_port, grpc::health::v1::HealthCheckResponse::SERVING,
                               absl::Seconds(10)));
  Accounts(kJobs);
  ASSERT_TRUE(sender->WaitForLog("provider unavailable; holding jobs", absl::Seconds(30)))
      << sender->Log();
  ASSERT_TRUE(WaitSenderHealth(health_port, grpc::health::v1::HealthCheckResponse::NOT_SERVING,
                               absl::Seconds(5)));
  // The operator notices after 20 s and changes the server's password to the sender's.
  HoldOutage(absl::Seconds(20), health_port);
  std::ofstream(auth_file, std::ios::trunc) << "mailer:" << kWrongPassword;
  absl::Time fixed = absl::Now();
  EXPECT_EQ(WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", kJobs,
                    absl::Seconds(60)),
            kJobs)
      << sender->Log();
  Print("smtp_wrong_password_20s", absl::Now() - fixed);
  EXPECT_EQ(Count("failed"), 0);
  EXPECT_EQ(Scalar("SELECT coalesce(sum(failures), 0) FROM delivery_states"), 0);
  EXPECT_EQ(ReceivedIn(dir_ + "/smtp").distinct, kJobs);
  EXPECT_TRUE(WaitSenderHealth(health_port, grpc::health::v1::HealthCheckResponse::SERVING,
                               absl::Seconds(5)));
  std::string log = sender->Log();
  EXPECT_THAT(log, HasSubstr("reason=\"smtp AUTH: 535"));
  EXPECT_THAT(log, HasSubstr("provider available again"));
  EXPECT_THAT(log, Not(HasSubstr(kWrongPassword)));
  EXPECT_THAT(log, Not(HasSubstr(kRightPassword)));
  std::string metrics = Scrape(metrics_port);
  EXPECT_THAT(metrics, HasSubstr("mailroom_sender_breaker_open 0"));
  EXPECT_THAT(metrics, HasSubstr("mailroom_sender_breaker_trips_total 1"));
}

TEST_F(OutageTest, SesSendingPausedHoldsJobsUntilResumed) {
  const std::string paused = dir_ + "/ses-paused";
  std::ofstream(paused) << "paused";
  std::string endpoint = StartSes(0, paused);
  if (endpoint.empty()) GTEST_SKIP() << "MAILROOM_NODE_MODULES not set (run .ci/test)";
  int health_port = testing::FreePort(), metrics_port = testing::FreePort();
  auto env = Observed(health_port, metrics_port);
  for (auto& [k, v] : SesEnv(endpoint)) env[k] = v;
  auto sender = StartSender(env);
  Accounts(kJobs);
  ASSERT_TRUE(sender->WaitForLog("provider unavailable; holding jobs", absl::Seconds(30)))
      << sender->Log();
  ASSERT_TRUE(WaitSenderHealth(health_port, grpc::health::v1::HealthCheckResponse::NOT_SERVING,
                               absl::Seconds(5)));
  HoldOutage(absl::Seconds(6), health_port);
  std::remove(paused.c_str());
  absl::Time fixed = absl::Now();
  EXPECT_EQ(WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", kJobs,
                    absl::Seconds(60)),
            kJobs)
      << sender->Log();
  Print("ses_sending_paused_6s", absl::Now() - fixed);
  EXPECT_EQ(Count("failed"), 0);
  EXPECT_EQ(Scalar("SELECT coalesce(sum(failures), 0) FROM delivery_states"), 0);
  EXPECT_EQ(ReceivedBySes().distinct, kJobs);
  EXPECT_THAT(sender->Log(), HasSubstr("SendingPausedException"));
  EXPECT_THAT(sender->Log(), Not(HasSubstr(testing::kStackAwsSecret)));
  EXPECT_TRUE(WaitSenderHealth(health_port, grpc::health::v1::HealthCheckResponse::SERVING,
                               absl::Seconds(5)));
}

TEST_F(OutageTest, UntrustedCertificateFailsNothingAndIsNotServing) {
  MakeCert();
  int smtp_port;
  auto smtp = StartSmtpPeer({"--tls-cert", dir_ + "/cert.pem", "--tls-key", dir_ + "/key.pem",
                             "--require-tls"},
                            &smtp_port);
  int health_port = testing::FreePort(), metrics_port = testing::FreePort();
  auto env = Observed(health_port, metrics_port);
  env.insert({{"MAILROOM_TRANSPORT", "smtp"},
              {"MAILROOM_SMTP_URL", absl::StrCat("smtp://127.0.0.1:", smtp_port)}});
  auto sender = StartSender(env);  // no MAILROOM_SMTP_CA_FILE: the certificate is not trusted
  Accounts(kJobs);
  ASSERT_TRUE(sender->WaitForLog("provider unavailable; holding jobs", absl::Seconds(30)))
      << sender->Log();
  ASSERT_TRUE(WaitSenderHealth(health_port, grpc::health::v1::HealthCheckResponse::NOT_SERVING,
                               absl::Seconds(5)));
  // Every job has been handed out and held back at least once.
  EXPECT_EQ(WaitFor("SELECT count(*) FROM delivery_states WHERE reason LIKE 'held: provider%'",
                    kJobs, absl::Seconds(30)),
            kJobs);
  HoldOutage(absl::Seconds(3), health_port);
  std::printf("OUTAGE untrusted_certificate: jobs=%d sent=%lld failed=%lld held=%lld\n", kJobs,
              (long long)Count("sent"), (long long)Count("failed"),
              (long long)Scalar("SELECT count(*) FROM delivery_states WHERE reason LIKE 'held:%'"));
  EXPECT_EQ(Count("failed"), 0);
  EXPECT_EQ(Scalar("SELECT coalesce(sum(failures), 0) FROM delivery_states"), 0);
  EXPECT_EQ(SenderHealth(health_port), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_THAT(Scrape(metrics_port), HasSubstr("mailroom_sender_breaker_open 1"));
}

TEST_F(OutageTest, HealthFollowsTheCollectorConnection) {
  int health_port = testing::FreePort();
  auto sender = StartSender({{"MAILROOM_FILE_DIR", dir_ + "/out"},
                             {"MAILROOM_HEALTH_ADDRESS", absl::StrCat("127.0.0.1:", health_port)}});
  ASSERT_TRUE(WaitSenderHealth(health_port, grpc::health::v1::HealthCheckResponse::SERVING,
                               absl::Seconds(10)));
  absl::Time killed = absl::Now();
  collector_.reset();  // SIGKILL
  ASSERT_TRUE(WaitSenderHealth(health_port, grpc::health::v1::HealthCheckResponse::NOT_SERVING,
                               absl::Seconds(5)))
      << sender->Log();
  std::printf("OUTAGE collector_killed: not_serving_after_ms=%lld\n",
              (long long)absl::ToInt64Milliseconds(absl::Now() - killed));
  collector_ = StartCollector({}, "collector2", collector_port_);
  ASSERT_NE(collector_, nullptr);
  EXPECT_TRUE(WaitSenderHealth(health_port, grpc::health::v1::HealthCheckResponse::SERVING,
                               absl::Seconds(20)))
      << sender->Log();
}

}  // namespace
}  // namespace mailroom
