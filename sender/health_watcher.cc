#include "sender/health_watcher.h"

namespace mailroom {

HealthWatcher::HealthWatcher(std::function<bool()> healthy, std::function<void(bool)> publish,
                             absl::Duration period)
    : healthy_(std::move(healthy)), publish_(std::move(publish)), period_(period) {
  thread_ = std::thread([this] { Loop(); });
}

HealthWatcher::~HealthWatcher() { Stop(); }

void HealthWatcher::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void HealthWatcher::Loop() {
  bool first = true, last = false;
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    // The conditions are read without our lock: they take locks of their own.
    mu_.Unlock();
    bool now = healthy_();
    if (first || now != last) publish_(now);
    first = false;
    last = now;
    mu_.Lock();
    mu_.AwaitWithTimeout(absl::Condition(&stop_), period_);
  }
}

}  // namespace mailroom
