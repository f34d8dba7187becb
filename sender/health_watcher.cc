#include "sender/health_watcher.h"

namespace mailroom {

HealthWatcher::HealthWatcher(std::function<bool()> healthy, std::function<void(bool)> publish,
                             absl::Duration period)
    : healthy_(std::move(healthy)), publish_(std::move(publish)), period_(period),
      worker_([this] { Loop(); }) {
  worker_.Start();
}

HealthWatcher::~HealthWatcher() { Stop(); }

void HealthWatcher::Stop() { worker_.Stop(); }

void HealthWatcher::Loop() {
  bool first = true, last = false;
  while (!worker_.stopping()) {
    bool now = healthy_();
    if (first || now != last) publish_(now);
    first = false;
    last = now;
    if (!worker_.WaitFor(period_)) return;
  }
}

}  // namespace mailroom
