#include "sender/startup.h"

#include "absl/strings/str_cat.h"
#include "common/backoff.h"
#include "common/log.h"

namespace mailroom {

Startup::Startup(UsageFunction usage, std::function<void(const v1::GetUsageResponse&)> restore,
                 std::function<void()> start, Clock* clock)
    : usage_(std::move(usage)), restore_(std::move(restore)), start_(std::move(start)),
      worker_([this] { Run(); }, clock) {}

Startup::~Startup() { Stop(); }

void Startup::Begin() { worker_.Start(); }

bool Startup::Stop() {
  {
    absl::MutexLock lock(&mu_);
    worker_.RequestStop();
  }
  worker_.Stop();
  return started();
}

bool Startup::started() const {
  absl::MutexLock lock(&mu_);
  return started_;
}

void Startup::Run() {
  constexpr absl::Duration kSlow = absl::Seconds(30);
  // Exact delays (no jitter): one sender waiting for its collector.
  JitteredExponentialBackOffStrategy backoff(absl::Milliseconds(200), kSlow);
  bool refused_before = false;
  while (true) {
    if (worker_.stopping()) return;
    auto usage = usage_(absl::Seconds(5));
    if (usage.ok()) {
      restore_(*usage);
      break;
    }
    if (absl::IsCancelled(usage.status())) return;
    const bool refused = absl::IsUnauthenticated(usage.status()) ||
                         absl::IsPermissionDenied(usage.status()) ||
                         absl::IsInvalidArgument(usage.status());
    // A refusal is a configuration problem: say so and retry slowly, never in a busy loop (and
    // slowly from then on, whatever the next answer).
    refused_before = refused_before || refused;
    const absl::Duration delay = refused_before ? kSlow : backoff.NextBackOff();
    (refused ? LogError
             : LogWarn)(refused ? "the collector refuses this sender" : "waiting for the collector",
                        {{"error", std::string(usage.status().message())},
                         {"retry_in_ms", absl::StrCat(absl::ToInt64Milliseconds(delay))}});
    if (!worker_.WaitFor(delay)) return;
  }
  // Started under the lock Stop() asks to stop under, so Stop() either sees it started or
  // prevents it.
  absl::MutexLock lock(&mu_);
  if (worker_.stopping()) return;
  start_();
  started_ = true;
}

}  // namespace mailroom
