#include "sender/startup.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace mailroom {

Startup::Startup(UsageFunction usage, std::function<void(const v1::GetUsageResponse&)> restore,
                 std::function<void()> start, Clock* clock)
    : usage_(std::move(usage)), restore_(std::move(restore)), start_(std::move(start)),
      clock_(clock) {}

Startup::~Startup() { Stop(); }

void Startup::Begin() {
  if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
}

bool Startup::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  return started();
}

bool Startup::started() const {
  absl::MutexLock lock(&mu_);
  return started_;
}

void Startup::Run() {
  absl::Duration backoff = absl::Milliseconds(200);
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    auto usage = usage_(absl::Seconds(5));
    if (usage.ok()) {
      restore_(*usage);
      break;
    }
    if (absl::IsCancelled(usage.status())) return;
    const bool refused = absl::IsUnauthenticated(usage.status()) ||
                         absl::IsPermissionDenied(usage.status()) ||
                         absl::IsInvalidArgument(usage.status());
    // A refusal is a configuration problem: say so and retry slowly, never in a busy loop.
    if (refused) backoff = absl::Seconds(30);
    (refused ? LogError
             : LogWarn)(refused ? "the collector refuses this sender" : "waiting for the collector",
                        {{"error", std::string(usage.status().message())},
                         {"retry_in_ms", absl::StrCat(absl::ToInt64Milliseconds(backoff))}});
    absl::MutexLock lock(&mu_);
    clock_->AwaitWithDeadline(&mu_, absl::Condition(&stopping_), clock_->Now() + backoff);
    backoff = std::min(backoff * 2, absl::Seconds(30));
  }
  // Started under the lock, so Stop() either sees it started or prevents it.
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  start_();
  started_ = true;
}

}  // namespace mailroom
