#include "sender/delivery/retry.h"

#include <random>

#include "absl/random/random.h"
#include "gtest/gtest.h"
#include "sender/transport/transport.h"

namespace mailroom {
namespace {

TEST(RetryPolicyTest, PermanentErrorsAreNeverRetried) {
  absl::BitGen gen;
  RetryPolicy p(absl::Seconds(1), absl::Minutes(5), 8, gen);
  EXPECT_FALSE(p.Next(absl::InvalidArgumentError("550"), 1).has_value());
  EXPECT_FALSE(p.Next(absl::PermissionDeniedError("535"), 1).has_value());
  EXPECT_FALSE(p.Next(absl::FailedPreconditionError("no STARTTLS"), 1).has_value());
  EXPECT_TRUE(p.Next(absl::UnavailableError("451"), 1).has_value());
}

TEST(RetryPolicyTest, BackoffGrowsIsCappedJitteredAndGivesUp) {
  std::mt19937 seeded(42);
  RetryPolicy p(absl::Seconds(1), absl::Seconds(60), 8, seeded);
  const absl::Status e = absl::UnavailableError("451");
  for (int n = 1; n < 8; ++n) {
    absl::Duration d = std::min(absl::Seconds(1) * (1 << (n - 1)), absl::Seconds(60));
    for (int k = 0; k < 50; ++k) {
      auto delay = p.Next(e, n);
      ASSERT_TRUE(delay.has_value());
      EXPECT_GE(*delay, d / 2);
      EXPECT_LE(*delay, d);
    }
  }
  EXPECT_FALSE(p.Next(e, 8).has_value());
}

TEST(RetryPolicyTest, TheProvidersRetryAfterIsWaitedForWhenLongerUpToTheCap) {
  std::mt19937 seeded(7);
  RetryPolicy p(absl::Seconds(1), absl::Seconds(60), 8, seeded);
  const absl::Status e = absl::UnavailableError("429");
  EXPECT_EQ(p.Next(WithRetryAfter(e, absl::Seconds(30)), 1), absl::Seconds(30));
  EXPECT_EQ(p.Next(WithRetryAfter(e, absl::Hours(2)), 1), absl::Seconds(60));  // the cap
  auto ours = p.Next(WithRetryAfter(e, absl::ZeroDuration()), 3);  // ours is longer: 2-4 s
  ASSERT_TRUE(ours.has_value());
  EXPECT_GE(*ours, absl::Seconds(2));
  // Never a reason to retry what cannot be retried.
  EXPECT_FALSE(
      p.Next(WithRetryAfter(absl::InvalidArgumentError("550"), absl::Seconds(5)), 1).has_value());
}

}  // namespace
}  // namespace mailroom
