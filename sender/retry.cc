#include "sender/retry.h"

#include <algorithm>

#include "absl/random/distributions.h"

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
  absl::Duration d = base_;
  for (int i = 1; i < failures && d < cap_; ++i) d *= 2;
  d = std::min(d, cap_);
  absl::MutexLock lock(&mu_);
  double jitter = absl::Uniform(gen_, 0.0, 1.0);
  return d / 2 + d / 2 * jitter;
}

}  // namespace mailroom
