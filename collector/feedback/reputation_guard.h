#pragma once

#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "collector/feedback/feedback_store.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/worker_thread.h"

namespace mailroom {

// Replaces the reputation gauges (mailroom_reputation_{sent,delivered,bounced,complained}
// {group} over the rolling window, mailroom_reputation_bounce_rate and
// mailroom_reputation_complaint_rate {group}: bounced / sent and complained / sent, 0 without
// emails sent) with `rows`; groups that disappeared lose their series.
void SetReputationGauges(const std::vector<ReputationRow>& rows, Metrics& metrics);
// Sets mailroom_reputation_provider_{delivered,bounced,complained}{group,provider}: what each
// provider's feedback reported per group (the series of groups and providers not in `rows` are
// removed).
void SetProviderReputationGauges(const std::vector<ProviderReputationRow>& rows, Metrics& metrics);

// When a group's rolling rates cross these, its sending pauses. A rate of 0
// disables that check; both 0 (the default) disables the guard.
struct GuardOptions {
  double max_bounce_rate = 0;     // MAILROOM_GUARD_MAX_BOUNCE_RATE, e.g. 0.02
  double max_complaint_rate = 0;  // MAILROOM_GUARD_MAX_COMPLAINT_RATE, e.g. 0.0005
  uint64_t min_sent = 100;        // MAILROOM_GUARD_MIN_SENT: no verdict on fewer emails
  bool enabled() const { return max_bounce_rate > 0 || max_complaint_rate > 0; }
};

// Decides, from each group's reputation counters, which groups are paused: those with at
// least min_sent emails in the window whose bounce rate (bounced / sent) or complaint rate
// (complained / sent) reached its maximum. A paused group's jobs stay in PostgreSQL (the
// dispatcher asks Paused() before each dequeue): nothing fails, nothing is charged; the group
// resumes by itself once its rates are under the maxima. Logs each pause and resume once and
// sets mailroom_reputation_paused{group}. Thread-safe.
class ReputationGuard {
 public:
  ReputationGuard(GuardOptions options, Metrics* metrics);
  // Re-decides from fresh counters (every group's).
  void Update(const std::vector<ReputationRow>& rows);
  bool Paused(const std::string& group) const;

 private:
  const GuardOptions options_;
  Metrics* const metrics_;
  mutable absl::Mutex mu_;
  std::set<std::string> paused_ ABSL_GUARDED_BY(mu_);
};

// Every `refresh`, reads the reputation counters over `window` from `store`, sets the gauges
// (SetReputationGauges) and updates `guard` (may be null). Runs on a worker thread
// (common/worker_thread.h) between Start() and Stop(); a database error keeps the previous
// values (and the guard's verdicts) until the next refresh. Pointers are borrowed.
class ReputationMonitor {
 public:
  // The refreshes are `refresh` apart on `clock`.
  ReputationMonitor(FeedbackStore* store, absl::Duration window, absl::Duration refresh,
                    ReputationGuard* guard, Metrics* metrics, Clock* clock = RealClock::Get());
  // Reads once, now (Start() does this first, on its thread).
  void RefreshOnce();
  void Start() { worker_.Start(); }
  // Returns when the thread has ended (a read in progress finishes first). Idempotent; the
  // destructor stops it too.
  void Stop() { worker_.Stop(); }

 private:
  // The worker's body: RefreshOnce, then again every `refresh` until Stop().
  void Loop();

  FeedbackStore* const store_;
  const absl::Duration window_, refresh_;
  ReputationGuard* const guard_;
  Metrics* const metrics_;
  // Last: stopped before the members its body uses are destroyed.
  WorkerThread worker_;
};

}  // namespace mailroom
