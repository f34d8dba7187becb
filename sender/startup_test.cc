// Start-up on simulated time: retries until the collector answers, slow retries on refusals,
// and a stop at any moment.
#include "sender/startup.h"

#include <deque>
#include <functional>

#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

class StartupTest : public ::testing::Test {
 protected:
  StartupTest() : clock_(absl::FromUnixSeconds(1768478400)) {}

  // Answers with the scripted statuses (then a usage) and counts calls.
  void Make(std::vector<absl::Status> script) {
    {
      absl::MutexLock lock(&mu_);
      script_.assign(script.begin(), script.end());
    }
    startup_ = std::make_unique<Startup>(
        [this](absl::Duration) -> absl::StatusOr<v1::GetUsageResponse> {
          absl::MutexLock lock(&mu_);
          ++calls_;
          if (!script_.empty()) {
            absl::Status st = script_.front();
            script_.pop_front();
            return st;
          }
          v1::GetUsageResponse r;
          r.set_month("2026-01");
          r.set_sent(3);
          return r;
        },
        [this](const v1::GetUsageResponse& r) {
          absl::MutexLock lock(&mu_);
          restored_ = r.sent();
        },
        [this] {
          absl::MutexLock lock(&mu_);
          ++starts_;
        },
        &clock_);
    startup_->Begin();
  }
  bool Eventually(const std::function<bool()>& pred) {
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    while (!pred()) {
      if (absl::Now() > give_up) return false;
      absl::SleepFor(absl::Microseconds(200));
    }
    return true;
  }
  // Waits until the start-up thread waits for simulated time.
  void Settle() {
    ASSERT_TRUE(Eventually([&] { return clock_.waiting() == 1; }));
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  int starts() {
    absl::MutexLock lock(&mu_);
    return starts_;
  }

  FakeClock clock_;
  absl::Mutex mu_;
  std::deque<absl::Status> script_ ABSL_GUARDED_BY(mu_);
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  int starts_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t restored_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<Startup> startup_;
};

TEST_F(StartupTest, RestoresTheUsageThenStartsOnce) {
  Make({});
  ASSERT_TRUE(Eventually([&] { return startup_->started(); }));
  EXPECT_TRUE(startup_->Stop());
  EXPECT_EQ(starts(), 1);
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(restored_, 3u);
}

TEST_F(StartupTest, RetriesWithGrowingBackoffUntilTheCollectorAnswers) {
  Make({absl::UnavailableError("connection refused"), absl::UnavailableError("still down")});
  Settle();
  EXPECT_EQ(calls(), 1);
  clock_.Advance(absl::Milliseconds(200));
  ASSERT_TRUE(Eventually([&] { return calls() == 2; }));
  Settle();
  clock_.Advance(absl::Milliseconds(399));  // the second wait is 400 ms
  Settle();
  EXPECT_EQ(calls(), 2);
  clock_.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(Eventually([&] { return startup_->started(); }));
  EXPECT_EQ(calls(), 3);
  EXPECT_EQ(starts(), 1);
}

TEST_F(StartupTest, ARefusalIsRetriedEveryThirtySeconds) {
  Make({absl::PermissionDeniedError("GetUsage: not your group")});
  Settle();
  clock_.Advance(absl::Seconds(29));
  Settle();
  EXPECT_EQ(calls(), 1);
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(Eventually([&] { return startup_->started(); }));
}

TEST_F(StartupTest, AStopDuringTheWaitNeverStarts) {
  Make({absl::UnavailableError("down")});
  Settle();
  EXPECT_FALSE(startup_->Stop());  // returns without simulated time passing
  EXPECT_EQ(starts(), 0);
}

TEST_F(StartupTest, CancelledEndsWithoutStarting) {
  Make({absl::CancelledError("shutting down")});
  ASSERT_TRUE(Eventually([&] { return calls() == 1; }));
  EXPECT_FALSE(startup_->Stop());
  EXPECT_EQ(starts(), 0);
}

}  // namespace
}  // namespace mailroom
