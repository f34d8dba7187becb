// SesAccount: GetAccount parsing, the limits it sets on simulated time, pause/resume through
// the breaker, warnings; and FetchSesAccount against the real SES test front
// (sender/transport/testing/ses_front.py, which checks the SigV4 signature).
#include "sender/ses/ses_account.h"

#include <cstdlib>
#include <deque>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"
#include "sender/transport/ses_transport.h"
#include "testing/pg_server.h"
#include "testing/process.h"

namespace mailroom {
namespace {

const absl::Time kStart = absl::FromCivil(absl::CivilSecond(2026, 11, 10, 12, 0, 0),
                                          absl::UTCTimeZone());
constexpr char kBody[] = R"({"DedicatedIpAutoWarmupEnabled":false,"EnforcementStatus":"HEALTHY",
  "ProductionAccessEnabled":true,"SendQuota":{"Max24HourSend":50000.0,"MaxSendRate":14.0,
  "SentLast24Hours":120.0},"SendingEnabled":true})";

TEST(ParseSesAccountTest, ReadsTheQuotaAndTheFlags) {
  auto info = ParseSesAccount(kBody);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->sending_enabled);
  EXPECT_EQ(info->enforcement_status, "HEALTHY");
  EXPECT_TRUE(info->production_access);
  EXPECT_EQ(info->max_send_rate, 14);
  EXPECT_EQ(info->max_24_hour_send, 50000);
  EXPECT_EQ(info->sent_last_24_hours, 120);
  EXPECT_FALSE(info->paused());
  auto bare = ParseSesAccount("{}");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->max_24_hour_send, -1);  // no quota given: no cap
  EXPECT_TRUE(ParseSesAccount(R"({"EnforcementStatus":"SHUTDOWN"})")->paused());
  EXPECT_TRUE(ParseSesAccount(R"({"SendingEnabled":false})")->paused());
  EXPECT_TRUE(absl::IsInvalidArgument(ParseSesAccount("[1]").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseSesAccount("not json").status()));
}

class SesAccountTest : public ::testing::Test {
 protected:
  SesAccountTest() : clock_(kStart), breaker_({absl::Seconds(1), absl::Seconds(8)}, &clock_) {}
  std::unique_ptr<SesAccount> Make() {
    return std::make_unique<SesAccount>(
        [this]() -> absl::StatusOr<SesAccountInfo> {
          if (readings_.empty()) return absl::UnavailableError("ses unreachable");
          auto r = readings_.front();
          readings_.pop_front();
          return r;
        },
        absl::Minutes(5), &breaker_, &metrics_, &clock_);
  }
  SesAccountInfo Info(double rate, double max24, double sent24) {
    SesAccountInfo i;
    i.enforcement_status = "HEALTHY";
    i.max_send_rate = rate;
    i.max_24_hour_send = max24;
    i.sent_last_24_hours = sent24;
    return i;
  }
  FakeClock clock_;
  Breaker breaker_;
  Metrics metrics_;
  std::deque<SesAccountInfo> readings_;
};

TEST_F(SesAccountTest, NoLimitsBeforeTheFirstReading) {
  auto a = Make();
  EXPECT_EQ(a->NextSendTime(SendClass::kStandard), kStart);
  EXPECT_EQ(a->TryAcquire(SendClass::kStandard), 0);
  EXPECT_TRUE(absl::IsUnavailable(a->Refresh()));  // a failed reading changes nothing
  EXPECT_EQ(a->TryAcquire(SendClass::kStandard), 0);
}

TEST_F(SesAccountTest, MaxSendRateCapsTheRate) {
  readings_.push_back(Info(2, -1, 0));
  auto a = Make();
  ASSERT_TRUE(a->Refresh().ok());
  EXPECT_EQ(a->TryAcquire(SendClass::kStandard), 0);
  EXPECT_EQ(a->TryAcquire(SendClass::kStandard), 0);
  EXPECT_EQ(a->TryAcquire(SendClass::kStandard), -1);
  EXPECT_EQ(a->NextSendTime(SendClass::kStandard),
            kStart + absl::Milliseconds(500) + absl::Nanoseconds(1));
  clock_.Advance(absl::Milliseconds(501));
  EXPECT_EQ(a->TryAcquire(SendClass::kStandard), 0);
  EXPECT_EQ(metrics_.Value("mailroom_sender_ses_max_send_rate"), 2);
}

TEST_F(SesAccountTest, TheDailyQuotaLeftCapsUntilTheNextReading) {
  readings_.push_back(Info(100, 10, 8));
  readings_.push_back(Info(100, 10, 3));
  auto a = Make();
  ASSERT_TRUE(a->Refresh().ok());
  EXPECT_EQ(metrics_.Value("mailroom_sender_ses_quota_remaining"), 2);
  EXPECT_EQ(a->TryAcquire(SendClass::kStandard), 0);
  EXPECT_EQ(a->TryAcquire(SendClass::kRecovery), 0);
  EXPECT_EQ(a->TryAcquire(SendClass::kRecovery), -1);
  EXPECT_EQ(a->NextSendTime(SendClass::kStandard), kStart + absl::Minutes(5));
  a->Refund(SendClass::kStandard);  // a send that did not happen
  EXPECT_EQ(a->TryAcquire(SendClass::kStandard), 0);
  clock_.Advance(absl::Minutes(5));
  ASSERT_TRUE(a->Refresh().ok());  // the 24-hour window moved on: 7 left
  for (int i = 0; i < 7; ++i) EXPECT_EQ(a->TryAcquire(SendClass::kStandard), 0) << i;
  EXPECT_EQ(a->TryAcquire(SendClass::kStandard), -1);
}

TEST_F(SesAccountTest, AnExhaustedQuotaWaitsForTheReadingNotForItsTime) {
  // No reading yet at the time it was due (the fetch is slow), then a failed one: every send
  // would be refused by SES, so none is allowed until a reading shows room.
  readings_.push_back(Info(100, 10, 10));
  auto a = Make();
  ASSERT_TRUE(a->Refresh().ok());
  EXPECT_EQ(a->TryAcquire(SendClass::kStandard), -1);
  for (absl::Duration late : {absl::Minutes(5), absl::Milliseconds(50), absl::Minutes(10)}) {
    clock_.Advance(late);
    EXPECT_GT(a->NextSendTime(SendClass::kRecovery), clock_.Now());
    EXPECT_EQ(a->TryAcquire(SendClass::kRecovery), -1);
  }
  EXPECT_TRUE(absl::IsUnavailable(a->Refresh()));  // a failed reading shows no room either
  EXPECT_EQ(a->TryAcquire(SendClass::kStandard), -1);
  readings_.push_back(Info(100, 10, 9));
  ASSERT_TRUE(a->Refresh().ok());
  EXPECT_EQ(a->NextSendTime(SendClass::kStandard), clock_.Now());
  EXPECT_EQ(a->TryAcquire(SendClass::kStandard), 0);
  EXPECT_EQ(a->TryAcquire(SendClass::kStandard), -1);
}

TEST_F(SesAccountTest, SendingDisabledOrShutdownPausesThroughTheBreakerAndResumes) {
  SesAccountInfo off = Info(14, -1, 0);
  off.sending_enabled = false;
  SesAccountInfo shutdown = Info(14, -1, 0);
  shutdown.enforcement_status = "SHUTDOWN";
  readings_ = {off, shutdown, Info(14, -1, 0)};
  auto a = Make();
  ASSERT_TRUE(a->Refresh().ok());
  EXPECT_TRUE(a->paused());
  EXPECT_TRUE(breaker_.open());
  EXPECT_NE(breaker_.reason().find("SendingEnabled=false"), std::string::npos);
  EXPECT_EQ(metrics_.Value("mailroom_sender_ses_sending_paused"), 1);
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(a->Refresh().ok());
  EXPECT_TRUE(breaker_.open());
  EXPECT_NE(breaker_.reason().find("SHUTDOWN"), std::string::npos);
  clock_.Advance(absl::Seconds(5));  // past the breaker's next probe
  ASSERT_TRUE(a->Refresh().ok());
  EXPECT_FALSE(a->paused());
  EXPECT_FALSE(breaker_.open());
  EXPECT_EQ(metrics_.Value("mailroom_sender_ses_sending_paused"), 0);
}

TEST_F(SesAccountTest, ProbationAndSandboxAreWarnedInAMetric) {
  SesAccountInfo probation = Info(1, 200, 0);
  probation.enforcement_status = "PROBATION";
  probation.production_access = false;
  readings_ = {probation, Info(14, -1, 0)};
  auto a = Make();
  ASSERT_TRUE(a->Refresh().ok());
  EXPECT_EQ(metrics_.Value("mailroom_sender_ses_account_warning", {{"kind", "probation"}}), 1);
  EXPECT_EQ(metrics_.Value("mailroom_sender_ses_account_warning", {{"kind", "sandbox"}}), 1);
  EXPECT_FALSE(a->paused());  // a warning, not a pause
  EXPECT_FALSE(breaker_.open());
  ASSERT_TRUE(a->Refresh().ok());
  EXPECT_EQ(metrics_.Value("mailroom_sender_ses_account_warning", {{"kind", "probation"}}), 0);
  EXPECT_EQ(metrics_.Value("mailroom_sender_ses_account_warning", {{"kind", "sandbox"}}), 0);
}

// FetchSesAccount against the SES test front: signed GET, values the test sets.
class FetchSesAccountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp",
                        "/ses_account");
    std::system(absl::StrCat("mkdir -p ", dir_).c_str());
    port_ = testing::FreePort();
    auto f = testing::Process::Spawn(
        {"/usr/bin/python3", testing::Runfile("mailroom/sender/transport/testing/ses_front.py"),
         "--port", absl::StrCat(port_), "--upstream", "http://127.0.0.1:9", "--access-key",
         "AKIDEXAMPLE", "--secret-key", kSecret, "--account-file", dir_ + "/account.json",
         "--paused-file", dir_ + "/paused"},
        {}, dir_ + "/front.log");
    ASSERT_TRUE(f.ok()) << f.status();
    front_ = *std::move(f);
    ASSERT_TRUE(front_->WaitForLog("ready", absl::Seconds(20))) << front_->Log();
  }
  TransportConfig Config(const std::string& secret = kSecret) {
    TransportConfig c;
    c.kind = "ses";
    c.Mutable<SesSettings>().endpoint = absl::StrCat("http://127.0.0.1:", port_);
    c.Mutable<SesSettings>().region = "us-east-1";
    c.Mutable<SesSettings>().access_key_id = "AKIDEXAMPLE";
    c.Mutable<SesSettings>().secret_access_key = secret;
    return c;
  }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
  }
  static constexpr char kSecret[] = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
  std::string dir_;
  int port_ = 0;
  std::unique_ptr<testing::Process> front_;
};

TEST_F(FetchSesAccountTest, ReadsWhatTheFrontSays) {
  auto info = FetchSesAccount(Config());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->max_send_rate, 14);
  EXPECT_EQ(info->max_24_hour_send, 50000);
  EXPECT_FALSE(info->paused());
  Write("account.json", R"({"EnforcementStatus":"PROBATION","ProductionAccessEnabled":false,
                            "SendQuota":{"MaxSendRate":1,"Max24HourSend":200,"SentLast24Hours":7}})");
  info = FetchSesAccount(Config());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->enforcement_status, "PROBATION");
  EXPECT_FALSE(info->production_access);
  EXPECT_EQ(info->max_send_rate, 1);
  EXPECT_EQ(info->max_24_hour_send, 200);
  EXPECT_EQ(info->sent_last_24_hours, 7);
  Write("paused", "");
  info = FetchSesAccount(Config());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->sending_enabled);
  EXPECT_TRUE(info->paused());
}

TEST_F(FetchSesAccountTest, AWrongSecretIsAProviderErrorThatNeverShowsTheSecret) {
  auto info = FetchSesAccount(Config("wrong-secret-value-0123456789"));
  ASSERT_FALSE(info.ok());
  EXPECT_TRUE(IsProviderError(info.status())) << info.status();
  EXPECT_EQ(std::string(info.status().message()).find("wrong-secret"), std::string::npos);
}

}  // namespace
}  // namespace mailroom
