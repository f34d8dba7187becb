#pragma once

#include <functional>

#include "absl/time/time.h"
#include "common/worker_thread.h"

namespace mailroom {

// Keeps a health status in step with the conditions it depends on: every `period`, on its own
// thread, asks `healthy()` and calls `publish(bool)` when the answer differs from the last one
// published (the first answer is always published). The sender's gRPC health is SERVING only
// while started, subscribed to a collector and its circuit breaker is closed.
// `healthy` and `publish` must be thread-safe and cheap; Stop() (or the destructor) returns
// after the thread has ended, so neither is called afterwards.
class HealthWatcher {
 public:
  HealthWatcher(std::function<bool()> healthy, std::function<void(bool)> publish,
                absl::Duration period = absl::Milliseconds(100));
  ~HealthWatcher();
  void Stop();

 private:
  void Loop();

  const std::function<bool()> healthy_;
  const std::function<void(bool)> publish_;
  const absl::Duration period_;
  WorkerThread worker_;  // last: stopped before the functions it calls go
};

}  // namespace mailroom
