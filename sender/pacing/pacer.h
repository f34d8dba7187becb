#pragma once

#include <cstdint>

#include "absl/time/time.h"

namespace mailroom {

// What an email's slot is for. A share of the group's budget may be kept for password
// recoveries (a signup spike must not starve them), so a pacer may open a slot for a recovery
// that it refuses to an activation.
enum class SendClass { kRecovery, kStandard };

// What the engine needs from the budget (sender/pacing/budget.h): when the next email may go, and
// taking/returning the money for one. It says *when* rather than sleeping, so the caller
// decides how to wait (and tests need no real time). Thread-safe implementations only.
class Pacer {
 public:
  virtual ~Pacer() = default;
  // Earliest time the next email of class `c` may be sent (InfiniteFuture: not this month).
  virtual absl::Time NextSendTime(SendClass c) = 0;
  // Takes one email's worth of budget for class `c` if allowed now; returns its cost in
  // micros, or -1.
  virtual int64_t TryAcquire(SendClass c) = 0;
  // Gives back one email's worth taken for class `c` (the send did not happen).
  virtual void Refund(SendClass c) = 0;
  // The same for a slot TryAcquire answered with `cost`: a pacer whose slots have different
  // prices (GrantPacer, while failing over) gives it back where a slot of that price came from.
  virtual void Refund(SendClass c, int64_t cost) {
    (void)cost;
    Refund(c);
  }
};

}  // namespace mailroom
