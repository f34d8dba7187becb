#include "common/backoff.h"

#include <algorithm>

#include "absl/random/distributions.h"

namespace mailroom {

absl::Duration ExponentialDelay(absl::Duration base, absl::Duration max, int n) {
  absl::Duration d = base;
  for (int i = 1; i < n && d < max; ++i) d *= 2;
  return std::min(d, max);
}

absl::Duration Jittered(absl::Duration d, double jitter, absl::BitGenRef random) {
  if (jitter <= 0) return d;
  const absl::Duration fixed = d * (1 - std::min(jitter, 1.0));
  return fixed + (d - fixed) * absl::Uniform(random, 0.0, 1.0);
}

JitteredExponentialBackOffStrategy::JitteredExponentialBackOffStrategy(absl::Duration base,
                                                                       absl::Duration max)
    : base_(base), max_(max), next_(base) {}

JitteredExponentialBackOffStrategy::JitteredExponentialBackOffStrategy(absl::Duration base,
                                                                       absl::Duration max,
                                                                       double jitter,
                                                                       absl::BitGenRef random)
    : base_(base), max_(max), jitter_(jitter), random_(random), next_(base) {}

absl::Duration JitteredExponentialBackOffStrategy::NextBackOff() {
  const absl::Duration d = std::min(next_, max_);
  // Stops doubling at the cap, so it never overflows.
  if (next_ < max_) next_ *= 2;
  return random_ ? Jittered(d, jitter_, *random_) : d;
}

}  // namespace mailroom
