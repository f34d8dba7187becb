#pragma once

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"

namespace mailroom {

// Simulated time: only moves when told to (Advance/Set). Sleepers and deadline waits return
// when the test moves time past their deadline (or, for waits, when their condition holds);
// a test never sleeps in real time. Thread-safe.
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
  // Blocks (in real time) until simulated time reaches `deadline`.
  void SleepUntil(absl::Time deadline) override {
    absl::MutexLock lock(&mu_);
    ++sleepers_;
    auto reached = [this, deadline]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return now_ >= deadline;
    };
    mu_.Await(absl::Condition(&reached));
    --sleepers_;
  }
  // Waits until `cond` holds or simulated time reaches `deadline`. `cond` is re-checked
  // whenever `mu` is released by whoever changes it; simulated time is polled every
  // millisecond of real time (waiters of one test are few).
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) override {
    while (true) {
      if (cond.Eval()) return true;
      if (Now() >= deadline) return false;
      mu->AwaitWithTimeout(cond, absl::Milliseconds(1));
    }
  }
  // Threads currently blocked in SleepUntil (lets a test wait until a worker is asleep).
  int sleepers() {
    absl::MutexLock lock(&mu_);
    return sleepers_;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  int sleepers_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mailroom
