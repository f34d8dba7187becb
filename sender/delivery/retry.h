#pragma once

#include <optional>

#include "absl/random/bit_gen_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace mailroom {

// Exponential backoff with "equal jitter": after the n-th failure wait d/2 + U[0, d/2] with
// d = min(cap, base * 2^(n-1)); give up after `max_attempts` failures. Errors that no retry can
// fix (anything but kUnavailable, kDeadlineExceeded, kResourceExhausted, kAborted, kInternal,
// kUnknown) are never retried. When the provider said how long to wait (ProviderRetryAfter:
// its Retry-After or X-RateLimit-Reset) and that is longer, that wait, up to `cap`. Thread-safe
// (the random source is guarded).
class RetryPolicy {
 public:
  RetryPolicy(absl::Duration base, absl::Duration cap, int max_attempts, absl::BitGenRef gen)
      : base_(base), cap_(cap), max_attempts_(max_attempts), gen_(gen) {}

  // The delay before the next attempt after `failures` failures (this one included), or
  // nullopt to give up.
  std::optional<absl::Duration> Next(const absl::Status& error, int failures);

  static bool Retryable(const absl::Status& error);

 private:
  const absl::Duration base_, cap_;
  const int max_attempts_;
  absl::Mutex mu_;
  absl::BitGenRef gen_;
};

}  // namespace mailroom
