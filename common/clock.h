#pragma once

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace mailroom {

// The time source of anything that paces, waits or times out, so tests can run on simulated
// time (common/testing/fake_clock.h) with no real sleeps, as envoy's simulated time does.
// Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
  // Returns once Now() >= deadline.
  virtual void SleepUntil(absl::Time deadline) = 0;
  // With `mu` held: waits (releasing `mu`) until `cond` holds or Now() >= deadline. Returns
  // whether `cond` holds; `mu` is held again on return.
  virtual bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                 absl::Time deadline) = 0;

  void SleepFor(absl::Duration d) { SleepUntil(Now() + d); }
};

// The wall clock.
class RealClock : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  void SleepUntil(absl::Time deadline) override { absl::SleepFor(deadline - absl::Now()); }
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) override {
    return mu->AwaitWithDeadline(cond, deadline);
  }
  static RealClock* Get() {
    static RealClock* clock = new RealClock;
    return clock;
  }
};

}  // namespace mailroom
