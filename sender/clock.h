#pragma once

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace mailroom {

// The time source of anything that paces or waits, so tests can move time by hand.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
};

// The wall clock. Thread-safe.
class RealClock : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  static RealClock* Get() {
    static RealClock* clock = new RealClock;
    return clock;
  }
};

}  // namespace mailroom
