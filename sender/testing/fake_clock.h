#pragma once

#include "absl/synchronization/mutex.h"
#include "sender/clock.h"

namespace mailroom {

// A clock that only moves when told to. Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start) : now_(start) {}
  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  void Set(absl::Time t) {
    absl::MutexLock lock(&mu_);
    now_ = t;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mailroom
