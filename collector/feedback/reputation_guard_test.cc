// ReputationGuard's verdicts from reputation counters and the gauge it sets.
#include "collector/feedback/reputation_guard.h"

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

ReputationRow Row(const std::string& group, uint64_t sent, uint64_t bounced, uint64_t complained) {
  ReputationRow r;
  r.group = group;
  r.sent = sent;
  r.bounced = bounced;
  r.complained = complained;
  return r;
}

TEST(ReputationGuardTest, PausesAtTheMaximaWithEnoughEmailsAndResumesUnder) {
  Metrics m;
  ReputationGuard g({/*max_bounce_rate=*/0.02, /*max_complaint_rate=*/0.0005, /*min_sent=*/100},
                    &m);
  g.Update({Row("a", 1000, 19, 0), Row("b", 99, 50, 50), Row("c", 10000, 0, 4)});
  EXPECT_FALSE(g.Paused("a"));  // 1.9 % bounces
  EXPECT_FALSE(g.Paused("b"));  // too few emails for a verdict
  EXPECT_FALSE(g.Paused("c"));  // 0.04 % complaints
  g.Update({Row("a", 1000, 20, 0), Row("b", 100, 0, 0), Row("c", 10000, 0, 5)});
  EXPECT_TRUE(g.Paused("a"));  // 2 %
  EXPECT_FALSE(g.Paused("b"));
  EXPECT_TRUE(g.Paused("c"));  // 0.05 %
  EXPECT_EQ(m.Value("mailroom_reputation_paused", {{"group", "a"}}), 1);
  EXPECT_EQ(m.Value("mailroom_reputation_paused", {{"group", "b"}}), 0);
  // The window moves on: under the maxima again, sending resumes.
  g.Update({Row("a", 1001, 20, 0), Row("c", 10000, 0, 5)});
  EXPECT_FALSE(g.Paused("a"));
  EXPECT_TRUE(g.Paused("c"));
  EXPECT_EQ(m.Value("mailroom_reputation_paused", {{"group", "a"}}), 0);
}

TEST(ReputationGuardTest, OffByDefault) {
  Metrics m;
  ReputationGuard g(GuardOptions{}, &m);
  g.Update({Row("a", 1000, 1000, 1000)});
  EXPECT_FALSE(g.Paused("a"));
  // Only complaints checked when only their maximum is set.
  ReputationGuard complaints({0, 0.001, 10}, &m);
  complaints.Update({Row("a", 1000, 1000, 0), Row("b", 1000, 0, 1)});
  EXPECT_FALSE(complaints.Paused("a"));
  EXPECT_TRUE(complaints.Paused("b"));
}

// Answers Reputation with the rows it was given (or an error), counting the calls.
class RowsStore : public FeedbackStore {
 public:
  void Set(std::vector<ReputationRow> rows, bool fail) {
    absl::MutexLock lock(&mu_);
    rows_ = std::move(rows);
    fail_ = fail;
  }
  // Waits until Reputation was called `n` times; false after 10 s.
  bool AwaitCalls(int n) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return calls_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), absl::Seconds(10));
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  absl::StatusOr<FeedbackRecord> Record(const std::string&, const FeedbackEvent&, int,
                                        const FeedbackScope&) override {
    return absl::UnimplementedError("not in this test");
  }
  absl::StatusOr<std::vector<ReputationRow>> Reputation(absl::Duration) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    if (fail_) return absl::UnavailableError("database down");
    return rows_;
  }
  absl::StatusOr<std::vector<ProviderReputationRow>> ReputationByProvider(absl::Duration) override {
    return std::vector<ProviderReputationRow>{};
  }

 private:
  absl::Mutex mu_;
  std::vector<ReputationRow> rows_ ABSL_GUARDED_BY(mu_);
  bool fail_ ABSL_GUARDED_BY(mu_) = false;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

// Waits until the monitor's thread waits on the clock again.
void AwaitWaiting(FakeClock& clock) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (clock.waiting() < 1 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_EQ(clock.waiting(), 1);
}

TEST(ReputationMonitorTest, ReadsAtStartThenEveryRefreshAndKeepsTheLastValuesOnAnError) {
  Metrics m;
  ReputationGuard guard({/*max_bounce_rate=*/0.02, 0, /*min_sent=*/100}, &m);
  RowsStore store;
  FakeClock clock(absl::FromUnixSeconds(1700000000));
  store.Set({Row("a", 1000, 10, 0)}, false);
  ReputationMonitor monitor(&store, absl::Hours(24), absl::Seconds(30), &guard, &m, &clock);
  monitor.Start();
  ASSERT_TRUE(store.AwaitCalls(1));  // at once, before any time passed
  AwaitWaiting(clock);
  EXPECT_EQ(store.calls(), 1);
  EXPECT_EQ(m.Value("mailroom_reputation_sent", {{"group", "a"}}), 1000);
  EXPECT_FALSE(guard.Paused("a"));

  store.Set({Row("a", 1000, 20, 0)}, false);
  clock.Advance(absl::Seconds(30));
  ASSERT_TRUE(store.AwaitCalls(2));
  AwaitWaiting(clock);
  EXPECT_EQ(store.calls(), 2);
  EXPECT_EQ(m.Value("mailroom_reputation_bounced", {{"group", "a"}}), 20);
  EXPECT_TRUE(guard.Paused("a"));

  // The database fails: the gauges and the verdict stay as the last read left them.
  store.Set({}, true);
  clock.Advance(absl::Seconds(30));
  ASSERT_TRUE(store.AwaitCalls(3));
  AwaitWaiting(clock);
  EXPECT_EQ(m.Value("mailroom_reputation_bounced", {{"group", "a"}}), 20);
  EXPECT_TRUE(guard.Paused("a"));

  // Stop ends the wait at once: the clock never reaches the next refresh.
  monitor.Stop();
  EXPECT_EQ(store.calls(), 3);
}

TEST(ReputationMonitorTest, StopBeforeStartNeverReads) {
  Metrics m;
  RowsStore store;
  ReputationMonitor monitor(&store, absl::Hours(24), absl::Seconds(30), nullptr, &m);
  monitor.Stop();
  monitor.Start();
  monitor.Stop();
  EXPECT_EQ(store.calls(), 0);
}

}  // namespace
}  // namespace mailroom
