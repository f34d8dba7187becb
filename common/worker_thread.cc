#include "common/worker_thread.h"

#include <utility>

namespace mailroom {

WorkerThread::WorkerThread(std::function<void()> body, Clock* clock)
    : body_(std::move(body)), clock_(clock) {}

WorkerThread::~WorkerThread() { Stop(); }

void WorkerThread::Start() {
  absl::MutexLock join(&join_mu_);
  if (thread_.joinable() || stopping()) return;
  thread_ = std::thread([this] { body_(); });
}

void WorkerThread::Stop() {
  absl::MutexLock join(&join_mu_);
  RequestStop();
  if (thread_.joinable()) thread_.join();
}

void WorkerThread::RequestStop() {
  // Under the lock that the waits' condition is read under, so a wait sees it at once.
  absl::MutexLock lock(&mu_);
  stopping_ = true;
}

void WorkerThread::Wake() {
  absl::MutexLock lock(&mu_);
  woken_ = true;
}

bool WorkerThread::WaitUntil(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || woken_; };
  clock_->AwaitWithDeadline(&mu_, absl::Condition(&woken), deadline);
  woken_ = false;
  return !stopping_;
}

bool WorkerThread::WaitFor(absl::Duration d) { return WaitUntil(clock_->Now() + d); }

bool WorkerThread::stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

}  // namespace mailroom
