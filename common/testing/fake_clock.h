#pragma once

#include <set>

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
    auto reached = [this, deadline]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return now_ >= deadline; };
    mu_.Await(absl::Condition(&reached));
    --sleepers_;
  }
  // Waits until `cond` holds or simulated time reaches `deadline`. `cond` is re-checked
  // whenever `mu` is released by whoever changes it; simulated time is polled every
  // millisecond of real time (waiters of one test are few).
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) override {
    if (cond.Eval()) return true;
    std::multiset<absl::Time>::iterator registered;
    {
      absl::MutexLock lock(&mu_);
      registered = deadlines_.insert(deadline);
    }
    bool met = false;
    while (true) {
      if (cond.Eval()) {
        met = true;
        break;
      }
      if (Now() >= deadline) break;
      mu->AwaitWithTimeout(cond, absl::Milliseconds(1));
    }
    absl::MutexLock lock(&mu_);
    deadlines_.erase(registered);
    return met;
  }
  // Threads blocked in AwaitWithDeadline whose deadline is still ahead of simulated time: once
  // it equals the number of a component's threads, that component has settled and waits for
  // time to move (or for its condition). A waiter whose deadline has passed is not counted,
  // so right after Advance() the count only grows back once the woken threads wait again.
  int waiting() {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (auto it = deadlines_.upper_bound(now_); it != deadlines_.end(); ++it) ++n;
    return n;
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
  std::multiset<absl::Time> deadlines_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mailroom
