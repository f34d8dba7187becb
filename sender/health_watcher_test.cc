#include "sender/health_watcher.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

class Recorder {
 public:
  void Publish(bool v) {
    absl::MutexLock lock(&mu_);
    seen_.push_back(v);
  }
  // Waits (bounded) until `n` values were published; returns them.
  std::vector<bool> WaitFor(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return seen_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
    return seen_;
  }

 private:
  absl::Mutex mu_;
  std::vector<bool> seen_ ABSL_GUARDED_BY(mu_);
};

TEST(HealthWatcherTest, PublishesTheFirstAnswerThenOnlyChanges) {
  std::atomic<bool> healthy{false};
  Recorder rec;
  HealthWatcher w([&] { return healthy.load(); }, [&](bool v) { rec.Publish(v); },
                  absl::Milliseconds(5));
  EXPECT_EQ(rec.WaitFor(1), std::vector<bool>({false}));
  healthy = true;
  EXPECT_EQ(rec.WaitFor(2), std::vector<bool>({false, true}));
  healthy = false;
  EXPECT_EQ(rec.WaitFor(3), std::vector<bool>({false, true, false}));
  healthy = true;
  EXPECT_EQ(rec.WaitFor(4), std::vector<bool>({false, true, false, true}));
  w.Stop();
  size_t n = rec.WaitFor(0).size();
  healthy = false;
  // Stop() joined the thread: nothing can be published any more.
  EXPECT_EQ(rec.WaitFor(0).size(), n);
}

}  // namespace
}  // namespace mailroom
