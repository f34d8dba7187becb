#pragma once

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace mailroom {

// One background thread with one stop protocol, for the components that wait between rounds
// of work (a pacer's grants, a provider's account reading, a health check). The thread runs
// `body` once; the body loops on WaitFor()/WaitUntil(), which return false once Stop() was
// called, and returns then:
//
//   WorkerThread worker_{[this] { while (worker_.WaitFor(kPeriod)) Tick(); }, clock};
//
// Waits are on `clock`, so a component's tests drive them with a FakeClock
// (common/testing/fake_clock.h), which also counts them as waiting. Stop() ends a wait at once
// (not when the clock reaches its deadline) and waits for the body to return; what the body
// is doing when Stop() comes (a call of its own) finishes first. Stopping is for good: once
// Stop() was called, Start() does nothing, and a Stop() before any Start() means the body never
// runs. Declare it as the owner's last member, so that it is destroyed (stopped) before the
// members its body uses. Thread-safe; Stop() must not be called from the body's own thread.
class WorkerThread {
 public:
  explicit WorkerThread(std::function<void()> body, Clock* clock = RealClock::Get());
  ~WorkerThread();  // Stop()
  WorkerThread(const WorkerThread&) = delete;
  WorkerThread& operator=(const WorkerThread&) = delete;

  // Starts the thread. Idempotent; nothing after Stop().
  void Start() ABSL_LOCKS_EXCLUDED(join_mu_, mu_);
  // RequestStop(), then returns when the body has returned (at once if it never started).
  // Idempotent; safe from any thread but the body's own.
  void Stop() ABSL_LOCKS_EXCLUDED(join_mu_, mu_);
  // Stopping without waiting for the body: its wait ends at once, every later one returns
  // false at once and Start() does nothing. From any thread, the body's own included; an owner
  // may call it under a lock of its own that the body also takes, so that what the body does
  // under that lock either happened before or sees stopping().
  void RequestStop() ABSL_LOCKS_EXCLUDED(mu_);
  // Cuts the body's current wait short (WaitFor returns true before its time), or, when the
  // body is not waiting, the next one: a Wake() is never lost, and several before one wait
  // count as one.
  void Wake() ABSL_LOCKS_EXCLUDED(mu_);

  // For the body: waits until `deadline` on the clock, a Wake() or Stop(). Returns false when
  // stopping (at once if Stop() came before), true otherwise.
  bool WaitUntil(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  bool WaitFor(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether Stop() was called.
  bool stopping() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::function<void()> body_;
  Clock* const clock_;
  // Held by Start() and Stop() throughout, so that every Stop() returns after the join.
  absl::Mutex join_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::thread thread_ ABSL_GUARDED_BY(join_mu_);
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mailroom
