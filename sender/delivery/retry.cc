#include "sender/delivery/retry.h"

#include "common/backoff.h"
#include "sender/transport/transport.h"

namespace mailroom {

bool RetryPolicy::Retryable(const absl::Status& e) {
  switch (e.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown: return true;
    default: return false;
  }
}

std::optional<absl::Duration> RetryPolicy::Next(const absl::Status& error, int failures) {
  if (!Retryable(error) || failures >= max_attempts_) return std::nullopt;
  const absl::Duration d = ExponentialDelay(base_, cap_, failures);
  absl::Duration ours;
  {
    absl::MutexLock lock(&mu_);
    ours = Jittered(d, /*jitter=*/0.5, gen_);
  }
  return WaitAfter(error, ours, cap_);
}

}  // namespace mailroom
