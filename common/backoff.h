#pragma once

#include <optional>

#include "absl/random/bit_gen_ref.h"
#include "absl/time/time.h"

namespace mailroom {

// How long to wait before the next attempt of something that failed, in the manner of envoy's
// BackOffStrategy. The caller waits on its Clock (common/clock.h), so tests run on simulated
// time. Implementations are not thread-safe: the caller guards one with its own lock.
class BackOffStrategy {
 public:
  virtual ~BackOffStrategy() = default;
  // The delay before the next attempt; each call moves on to the next delay.
  virtual absl::Duration NextBackOff() = 0;
  // Back to the first delay (after a success).
  virtual void Reset() = 0;
};

// The n-th delay (n >= 1) of a capped exponential backoff: min(max, base * 2^(n-1)). Never
// overflows (the doubling stops at the cap).
absl::Duration ExponentialDelay(absl::Duration base, absl::Duration max, int n);

// `d` with a `jitter` fraction of it drawn from `random`: uniform in [d * (1 - jitter), d), so
// never longer than `d`. `jitter` is in [0, 1]: 0 returns `d` without drawing, 0.5 is "equal
// jitter", 1 "full jitter".
absl::Duration Jittered(absl::Duration d, double jitter, absl::BitGenRef random);

// Capped exponential backoff with jitter: the n-th delay since construction or Reset() is
// Jittered(ExponentialDelay(base, max, n), jitter, random). Without jitter (the two-argument
// constructor) exactly base, 2 * base, 4 * base, ... up to max, then max forever.
class JitteredExponentialBackOffStrategy : public BackOffStrategy {
 public:
  // No jitter: the delays are exact (and no random source is needed).
  JitteredExponentialBackOffStrategy(absl::Duration base, absl::Duration max);
  // `jitter` in [0, 1]; `random` is borrowed and must outlive this (tests pass a seeded one).
  JitteredExponentialBackOffStrategy(absl::Duration base, absl::Duration max, double jitter,
                                     absl::BitGenRef random);

  absl::Duration NextBackOff() override;
  void Reset() override { next_ = base_; }

 private:
  absl::Duration base_, max_;
  double jitter_ = 0;
  std::optional<absl::BitGenRef> random_;
  absl::Duration next_;  // the next delay before jitter (before the cap)
};

}  // namespace mailroom
