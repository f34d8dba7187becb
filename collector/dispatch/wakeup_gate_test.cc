#include "collector/dispatch/wakeup_gate.h"

#include "gtest/gtest.h"

namespace mailroom {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

TEST(WakeupGateTest, IdleIsNeverReady) {
  WakeupGate b(10, absl::Seconds(5));
  EXPECT_FALSE(b.Ready(kT0));
  EXPECT_EQ(b.Deadline(), absl::InfiniteFuture());
}

TEST(WakeupGateTest, LimitReachedDispatchesAtOnce) {
  WakeupGate b(3, absl::Seconds(5));
  b.OnNotify(kT0);
  b.OnNotify(kT0 + absl::Milliseconds(1));
  EXPECT_FALSE(b.Ready(kT0 + absl::Milliseconds(2)));
  b.OnNotify(kT0 + absl::Milliseconds(2));
  EXPECT_TRUE(b.Ready(kT0 + absl::Milliseconds(2)));
  EXPECT_EQ(b.Deadline(), kT0);
}

TEST(WakeupGateTest, TimeoutCountsFromTheFirstWakeUp) {
  // Seed 001's example: 5 inserts with limit 3 -> 3 at once, the other 2 after the timeout.
  WakeupGate b(3, absl::Seconds(5));
  b.OnNotify(kT0, 2);
  EXPECT_EQ(b.Deadline(), kT0 + absl::Seconds(5));
  b.OnNotify(kT0 + absl::Seconds(4), 0);  // nothing new: no effect
  EXPECT_FALSE(b.Ready(kT0 + absl::Seconds(4)));
  EXPECT_TRUE(b.Ready(kT0 + absl::Seconds(5)));
  b.Reset();
  EXPECT_FALSE(b.Ready(kT0 + absl::Seconds(6)));
  // The next wake-up starts a new timer, not the old one.
  b.OnNotify(kT0 + absl::Seconds(7));
  EXPECT_FALSE(b.Ready(kT0 + absl::Seconds(11)));
  EXPECT_TRUE(b.Ready(kT0 + absl::Seconds(12)));
}

TEST(WakeupGateTest, ZeroTimeoutDispatchesOnEveryWakeUp) {
  WakeupGate b(1000, absl::ZeroDuration());
  b.OnNotify(kT0);
  EXPECT_TRUE(b.Ready(kT0));
}

TEST(WakeupGateTest, FoldedNotificationStillWakesUp) {
  // 10,000 inserts in one transaction arrive as one notification: the dispatch is due after the
  // timeout and the dispatcher then drains while dequeues come back full.
  WakeupGate b(1000, absl::Milliseconds(50));
  b.OnNotify(kT0, 1);
  EXPECT_EQ(b.pending(), 1);
  EXPECT_TRUE(b.Ready(kT0 + absl::Milliseconds(50)));
}

}  // namespace
}  // namespace mailroom
