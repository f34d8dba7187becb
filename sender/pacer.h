#pragma once

#include <cstdint>

#include "absl/time/time.h"

namespace mailroom {

// What the engine needs from the budget (sender/budget.h): when the next email may go, and
// taking/returning the money for one. It says *when* rather than sleeping, so the caller
// decides how to wait (and tests need no real time). Thread-safe implementations only.
class Pacer {
 public:
  virtual ~Pacer() = default;
  // Earliest time the next email may be sent (InfiniteFuture: not this month).
  virtual absl::Time NextSendTime() = 0;
  // Takes one email's worth of budget if allowed now; returns its cost in micros, or -1.
  virtual int64_t TryAcquire() = 0;
  // Gives back one email's worth (the send did not happen).
  virtual void Refund() = 0;
};

}  // namespace mailroom
