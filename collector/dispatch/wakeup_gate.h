#pragma once

#include "absl/time/time.h"

namespace mailroom {

// When to dequeue, following seed 001: counts NOTIFY wake-ups (not jobs) and opens once `limit`
// of them have arrived (MAILROOM_BATCH_LIMIT), or `timeout` after the first one since the last
// dispatch (MAILROOM_BATCH_TIMEOUT), whichever comes first. Notifications are only wake-up
// signals (PostgreSQL folds identical ones in a transaction), so the dispatcher keeps dequeuing
// while dequeues come back full; this class only decides when to start. Pure state with time
// passed in: not thread-safe, no clock of its own.
class WakeupGate {
 public:
  WakeupGate(int limit, absl::Duration timeout) : limit_(limit), timeout_(timeout) {}

  // `count` notifications arrived at `now`. The first one after a dispatch starts the timer.
  void OnNotify(absl::Time now, int count = 1) {
    if (count <= 0) return;
    if (seen_ == 0) first_ = now;
    seen_ += count;
  }

  // True when a dispatch is due at `now`.
  bool Ready(absl::Time now) const {
    return seen_ > 0 && (seen_ >= limit_ || now >= first_ + timeout_);
  }

  // When Ready() becomes true without further notifications (InfiniteFuture when idle).
  absl::Time Deadline() const {
    if (seen_ == 0) return absl::InfiniteFuture();
    if (seen_ >= limit_) return first_;
    return first_ + timeout_;
  }

  // Notifications seen since the last dispatch.
  int pending() const { return seen_; }

  // A dispatch happened: start over.
  void Reset() { seen_ = 0; }

 private:
  const int limit_;
  const absl::Duration timeout_;
  int seen_ = 0;
  absl::Time first_ = absl::InfinitePast();
};

}  // namespace mailroom
