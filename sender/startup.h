#pragma once

#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/worker_thread.h"
#include "proto/mailroom/v1/mailroom.pb.h"

namespace mailroom {

// The sender's start-up: nothing starts before the collector answers, so a background thread
// asks it for the group's usage (Subscription::Usage) until it does, hands the answer to
// `restore` (the sender logs it; the group's budget itself is the collector's), then calls
// `start` (grant pacer, engine and stream) once. A refusal
// (UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT) is a configuration problem: logged as
// an error and retried every 30 s; other failures are retried from 200 ms, doubling to 30 s.
// A CANCELLED answer (the subscription is stopping) ends the attempt without starting.
// Stop() may come at any moment (a signal during start-up): `start` then either ran already or
// never runs. Waits are on `clock`. Thread-safe.
class Startup {
 public:
  using UsageFunction = std::function<absl::StatusOr<v1::GetUsageResponse>(absl::Duration timeout)>;

  Startup(UsageFunction usage, std::function<void(const v1::GetUsageResponse&)> restore,
          std::function<void()> start, Clock* clock = RealClock::Get());
  ~Startup();

  // Starts the background thread (once).
  void Begin();
  // Ends start-up: waits for the thread; returns whether `start` ran. Call the usage source's
  // own stop first (Subscription::StopReceiving) so a call in progress returns early.
  bool Stop();
  bool started() const;

 private:
  void Run();

  const UsageFunction usage_;
  const std::function<void(const v1::GetUsageResponse&)> restore_;
  const std::function<void()> start_;
  mutable absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // Runs the attempts; its waits (the retries') end at once on Stop(). Last: stopped first.
  WorkerThread worker_;
};

}  // namespace mailroom
