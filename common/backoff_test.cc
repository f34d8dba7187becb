#include "common/backoff.h"

#include <random>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

TEST(ExponentialDelayTest, DoublesFromTheBaseUpToTheCap) {
  EXPECT_EQ(ExponentialDelay(absl::Seconds(1), absl::Seconds(60), 1), absl::Seconds(1));
  EXPECT_EQ(ExponentialDelay(absl::Seconds(1), absl::Seconds(60), 2), absl::Seconds(2));
  EXPECT_EQ(ExponentialDelay(absl::Seconds(1), absl::Seconds(60), 6), absl::Seconds(32));
  EXPECT_EQ(ExponentialDelay(absl::Seconds(1), absl::Seconds(60), 7), absl::Seconds(60));
  // A count far past the cap neither overflows nor takes long.
  EXPECT_EQ(ExponentialDelay(absl::Seconds(1), absl::Seconds(60), 1 << 30), absl::Seconds(60));
  // A base above the cap is the cap.
  EXPECT_EQ(ExponentialDelay(absl::Seconds(5), absl::Seconds(2), 1), absl::Seconds(2));
}

TEST(JitteredTest, StaysWithinTheJitteredShareOfTheDelay) {
  std::mt19937 seeded(7);
  for (double jitter : {0.25, 0.5, 1.0}) {
    absl::Duration lowest = absl::InfiniteDuration(), highest = absl::ZeroDuration();
    for (int i = 0; i < 1000; ++i) {
      const absl::Duration d = Jittered(absl::Seconds(10), jitter, seeded);
      EXPECT_GE(d, absl::Seconds(10) * (1 - jitter)) << jitter;
      EXPECT_LT(d, absl::Seconds(10)) << jitter;
      lowest = std::min(lowest, d);
      highest = std::max(highest, d);
    }
    // The draws spread over the range, not one value.
    EXPECT_LT(lowest, absl::Seconds(10) * (1 - jitter * 0.9)) << jitter;
    EXPECT_GT(highest, absl::Seconds(10) * (1 - jitter * 0.1)) << jitter;
  }
}

TEST(JitteredTest, NoJitterIsTheDelayAndDrawsNothing) {
  std::mt19937 seeded(7), untouched(7);
  EXPECT_EQ(Jittered(absl::Seconds(3), 0, seeded), absl::Seconds(3));
  EXPECT_EQ(seeded(), untouched());
}

TEST(JitteredExponentialBackOffStrategyTest, WithoutJitterDoublesUpToTheCapAndResets) {
  JitteredExponentialBackOffStrategy b(absl::Milliseconds(100), absl::Milliseconds(500));
  EXPECT_EQ(b.NextBackOff(), absl::Milliseconds(100));
  EXPECT_EQ(b.NextBackOff(), absl::Milliseconds(200));
  EXPECT_EQ(b.NextBackOff(), absl::Milliseconds(400));
  EXPECT_EQ(b.NextBackOff(), absl::Milliseconds(500));
  EXPECT_EQ(b.NextBackOff(), absl::Milliseconds(500));
  b.Reset();
  EXPECT_EQ(b.NextBackOff(), absl::Milliseconds(100));
}

TEST(JitteredExponentialBackOffStrategyTest, AFirstDelayAboveTheCapIsTheCap) {
  JitteredExponentialBackOffStrategy b(absl::Seconds(2), absl::Seconds(1));
  EXPECT_EQ(b.NextBackOff(), absl::Seconds(1));
  EXPECT_EQ(b.NextBackOff(), absl::Seconds(1));
}

TEST(JitteredExponentialBackOffStrategyTest, StaysAtTheCapForever) {
  JitteredExponentialBackOffStrategy b(absl::Milliseconds(1), absl::Hours(1));
  absl::Duration last;
  for (int i = 0; i < 10000; ++i) last = b.NextBackOff();
  EXPECT_EQ(last, absl::Hours(1));
}

TEST(JitteredExponentialBackOffStrategyTest, JitterKeepsEachDelayWithinItsStepsBounds) {
  std::mt19937 seeded(42);
  JitteredExponentialBackOffStrategy b(absl::Seconds(1), absl::Seconds(8), 0.5, seeded);
  for (int round = 0; round < 20; ++round) {
    for (absl::Duration step : {absl::Seconds(1), absl::Seconds(2), absl::Seconds(4),
                                absl::Seconds(8), absl::Seconds(8)}) {
      const absl::Duration d = b.NextBackOff();
      EXPECT_GE(d, step / 2);
      EXPECT_LT(d, step);
    }
    b.Reset();  // back to the first step's bounds
  }
}

TEST(JitteredExponentialBackOffStrategyTest, OneSeedGivesOneSequence) {
  std::mt19937 a(3), b(3);
  JitteredExponentialBackOffStrategy x(absl::Seconds(1), absl::Seconds(30), 1.0, a);
  JitteredExponentialBackOffStrategy y(absl::Seconds(1), absl::Seconds(30), 1.0, b);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(x.NextBackOff(), y.NextBackOff());
}

}  // namespace
}  // namespace mailroom
