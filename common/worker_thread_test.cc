#include "common/worker_thread.h"

#include <atomic>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/civil_time.h"
#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

const absl::Time kStart = absl::FromCivil(absl::CivilSecond(2026, 11, 10, 12, 0, 0),
                                          absl::UTCTimeZone());

// A worker on simulated time whose body counts its runs, loops on WaitFor(period) counting
// each wait that returned true (a round), and notes when it returned. Time only moves when a
// test says so, so a wait that ends without it was ended by Wake() or Stop().
class WorkerThreadTest : public testing::Test {
 protected:
  void Make(absl::Duration period) {
    worker_ = std::make_unique<WorkerThread>(
        [this, period] {
          ++runs_;
          while (worker_->WaitFor(period)) {
            absl::MutexLock lock(&mu_);
            ++rounds_;
          }
          returned_ = true;
        },
        &clock_);
  }

  // Blocks (in real time, bounded) until the body waits: it has settled in its wait, which
  // only Stop(), Wake() or the simulated time can end.
  bool AwaitWaiting() {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (clock_.waiting() != 1) {
      if (absl::Now() > give_up) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return true;
  }

  // Blocks (bounded) until the body has done `n` rounds; returns how many it did.
  int AwaitRounds(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return rounds_ >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
    return rounds_;
  }

  FakeClock clock_{kStart};
  std::atomic<int> runs_{0};
  std::atomic<bool> returned_{false};
  absl::Mutex mu_;
  int rounds_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<WorkerThread> worker_;
};

TEST_F(WorkerThreadTest, StartAndStopAreIdempotent) {
  Make(absl::Hours(1));
  worker_->Start();
  worker_->Start();
  ASSERT_TRUE(AwaitWaiting());
  worker_->Start();
  worker_->Stop();
  worker_->Stop();
  EXPECT_EQ(runs_.load(), 1);
  EXPECT_TRUE(worker_->stopping());
  worker_->Start();  // stopped for good
  EXPECT_EQ(runs_.load(), 1);
}

TEST_F(WorkerThreadTest, StopEndsALongWaitAtOnce) {
  Make(absl::Hours(24));
  worker_->Start();
  ASSERT_TRUE(AwaitWaiting());
  EXPECT_FALSE(worker_->stopping());
  worker_->Stop();
  // Stop() returned after the body did, with no simulated time passed: Stop ended the wait.
  EXPECT_TRUE(returned_.load());
  EXPECT_EQ(AwaitRounds(0), 0);
  EXPECT_EQ(clock_.Now(), kStart);
  // A wait after Stop() returns at once.
  EXPECT_FALSE(worker_->WaitFor(absl::Hours(24)));
}

TEST_F(WorkerThreadTest, WakeCutsTheCurrentWaitShort) {
  Make(absl::Hours(1));
  worker_->Start();
  ASSERT_TRUE(AwaitWaiting());
  worker_->Wake();
  EXPECT_EQ(AwaitRounds(1), 1);
  ASSERT_TRUE(AwaitWaiting());  // waiting again: the wake was used once
  EXPECT_EQ(AwaitRounds(1), 1);
  worker_->Wake();
  EXPECT_EQ(AwaitRounds(2), 2);
  EXPECT_EQ(clock_.Now(), kStart);
  worker_->Stop();
}

TEST_F(WorkerThreadTest, AWakeBeforeTheWaitIsKept) {
  Make(absl::Hours(1));
  worker_->Wake();
  worker_->Wake();  // several count as one
  worker_->Start();
  EXPECT_EQ(AwaitRounds(1), 1);
  // The second wait blocks: the first used the wakes up.
  ASSERT_TRUE(AwaitWaiting());
  EXPECT_EQ(AwaitRounds(1), 1);
  EXPECT_EQ(clock_.Now(), kStart);
  worker_->Stop();
}

TEST_F(WorkerThreadTest, TheWaitEndsWhenTheClockReachesItsDeadline) {
  Make(absl::Seconds(5));
  worker_->Start();
  ASSERT_TRUE(AwaitWaiting());
  clock_.Advance(absl::Seconds(4));
  ASSERT_TRUE(AwaitWaiting());  // still the first wait (its deadline is ahead)
  EXPECT_EQ(AwaitRounds(0), 0);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(AwaitRounds(1), 1);
  worker_->Stop();
}

TEST_F(WorkerThreadTest, StopBeforeStartMeansTheBodyNeverRuns) {
  Make(absl::Hours(1));
  worker_->Stop();
  worker_->Start();
  worker_->Stop();
  EXPECT_EQ(runs_.load(), 0);
  EXPECT_FALSE(worker_->WaitFor(absl::Hours(1)));
}

TEST_F(WorkerThreadTest, TheDestructorStopsAndJoins) {
  Make(absl::Hours(1));
  worker_->Start();
  ASSERT_TRUE(AwaitWaiting());
  worker_.reset();
  EXPECT_TRUE(returned_.load());
  // Never started: nothing to join.
  Make(absl::Hours(1));
  worker_.reset();
  EXPECT_EQ(runs_.load(), 1);
}

TEST_F(WorkerThreadTest, StopsFromSeveralThreadsAllReturnAfterTheBody) {
  Make(absl::Hours(1));
  worker_->Start();
  ASSERT_TRUE(AwaitWaiting());
  std::atomic<int> after{0};
  auto stop = [&] {
    worker_->Stop();
    if (returned_) ++after;
  };
  std::thread a(stop), b(stop);
  a.join();
  b.join();
  EXPECT_EQ(after.load(), 2);
}

TEST_F(WorkerThreadTest, RequestStopEndsTheWaitWithoutJoining) {
  Make(absl::Hours(1));
  worker_->Start();
  ASSERT_TRUE(AwaitWaiting());
  worker_->RequestStop();
  EXPECT_TRUE(worker_->stopping());
  // The body returns by itself (the wait ended with no time passed); Stop() then joins it.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!returned_ && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_TRUE(returned_.load());
  EXPECT_EQ(clock_.Now(), kStart);
  worker_->Stop();
}

TEST_F(WorkerThreadTest, TheBodyMayRequestItsOwnStop) {
  absl::Notification returned;
  worker_ = std::make_unique<WorkerThread>(
      [this, &returned] {
        while (worker_->WaitFor(absl::Hours(1))) worker_->RequestStop();
        returned.Notify();
      },
      &clock_);
  worker_->Start();
  ASSERT_TRUE(AwaitWaiting());
  worker_->Wake();
  EXPECT_TRUE(returned.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(worker_->stopping());
  worker_->Stop();
}

// A body that never waits still ends: it asks stopping() between its rounds of work.
TEST(WorkerThreadBodyTest, ABodyThatPollsStoppingEnds) {
  absl::Notification running;
  std::unique_ptr<WorkerThread> w;
  w = std::make_unique<WorkerThread>([&] {
    running.Notify();
    while (!w->stopping()) std::this_thread::yield();
  });
  w->Start();
  running.WaitForNotification();
  w->Stop();
  EXPECT_TRUE(w->stopping());
}

}  // namespace
}  // namespace mailroom
