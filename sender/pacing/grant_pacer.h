#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "common/worker_thread.h"
#include "sender/pacing/budget_client.h"
#include "sender/pacing/pacer.h"

namespace mailroom {

struct GrantPacerOptions {
  int64_t price_micros = 100;  // one email's price (at least 1)
  // Optional: the price to ask grants at now, at least `price_micros` (the higher price while a
  // dearer secondary transport takes over, sender/delivery/failover.h). A grant is used only while
  // its price is at least this one; the others go back when they expire. Unset: `price_micros`.
  std::function<int64_t()> price_now;
  // A grant is used only for sends that start this long before the collector's expiry.
  absl::Duration expiry_margin = absl::Seconds(1);
  // The most emails asked for at once (the collector grants at most one second of pace).
  int max_request = 100;
  // The most asked for at once while the collector reports the group unlimited (an infinite
  // pace): nothing to pace, so fewer, larger grants (one AcquireBudget round trip, one
  // PostgreSQL transaction, per this many emails). The collector grants at most 1,000.
  int max_request_unlimited = 1000;
  // Waits after a failed AcquireBudget: from `initial_backoff`, doubling up to `max_backoff`.
  absl::Duration initial_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(5);
};

// The sender's pacer under the group's central budget: each email needs one
// emails' worth of a grant from the collector (AcquireBudget), charged before the send. Grants
// are asked for only while the engine has a job waiting (NextSendTime/TryAcquire without a
// usable grant), a few emails at a time as the collector's pace allows (max_request_unlimited
// at a time for an unlimited group); the collector paces all senders of the group together. Unused
// emails go back (ReturnBudget) when a grant is about to expire and on Stop(), never after a send
// may have used them.
//
// A recovery may use any grant; an activation only grants asked for without the recovery
// flag (the collector keeps the recovery reserve for recoveries). `caps` are this sender's own
// limits (the optional MAILROOM_BUDGET cap and provider rate, sender/pacing/budget.h; the SES
// account's limits, sender/ses/ses_account.h): a slot needs a grant and room under every cap.
//
// NextSendTime never blocks on the network: without a usable grant it wakes the background
// thread (Start) and answers a little later (or, when the month's budget is spent, a minute
// later so the engine hands its jobs back). Thread-safe.
class GrantPacer : public Pacer {
 public:
  GrantPacer(GrantPacerOptions options, BudgetClient* client, std::vector<Pacer*> caps,
             Clock* clock);
  ~GrantPacer() override;

  absl::Time NextSendTime(SendClass c) override;
  // The slot's cost is the price of the grant it came from.
  int64_t TryAcquire(SendClass c) override;
  void Refund(SendClass c) override;
  void Refund(SendClass c, int64_t cost) override;

  // Starts the background thread that asks for grants and returns expiring ones.
  void Start();
  // Stops it and gives back every unused email (graceful shutdown: call after the engine
  // drained, so nothing is in use).
  void Stop();
  // One round of the background work, for tests: asks for a grant if one is wanted (and not
  // backing off), then returns the unused emails of grants past their margin.
  void Tick();

  // For metrics and logs.
  double pace_per_second();  // the group's pace as last reported (0 before the first answer)
  int64_t held_emails();     // unused emails of live grants
  int64_t granted_emails();  // emails granted to this sender since start
  int64_t returned_emails();
  bool exhausted();  // the collector said the month's budget is spent (for a class)

 private:
  struct Held {
    uint64_t id = 0;
    int left = 0;           // unused emails
    int taken = 0;          // handed to the engine (may still be refunded)
    bool recovery = false;  // asked with the recovery flag: recoveries only
    int64_t price = 0;      // of one email, as asked
    absl::Time usable_until;
  };
  // The price grants are asked at and must have to be used now.
  int64_t PriceNow() const;
  // A live grant `c` may use at `price`, or null.
  Held* FindLocked(SendClass c, absl::Time now, int64_t price) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `c` runs low: fewer usable emails than a quarter of the last grant (at least 1),
  // so the next grant is asked for before the engine has to wait for it.
  bool LowLocked(SendClass c, absl::Time now, int64_t price) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RefundLocked(SendClass c, absl::Time now, int64_t cost) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WantLocked(SendClass c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run();

  const GrantPacerOptions opt_;
  BudgetClient* const client_;
  const std::vector<Pacer*> caps_;
  Clock* const clock_;
  absl::Mutex mu_;
  // Per class (index 0: recovery, 1: standard).
  bool want_[2] ABSL_GUARDED_BY(mu_) = {false, false};
  absl::Time next_ask_[2] ABSL_GUARDED_BY(mu_) = {absl::InfinitePast(), absl::InfinitePast()};
  bool exhausted_[2] ABSL_GUARDED_BY(mu_) = {false, false};
  // Between failed AcquireBudget calls (exact: the tests give the delays).
  JitteredExponentialBackOffStrategy backoff_ ABSL_GUARDED_BY(mu_);
  std::deque<Held> grants_ ABSL_GUARDED_BY(mu_);
  double pace_ ABSL_GUARDED_BY(mu_) = 0;
  int last_grant_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t granted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t returned_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Mutex call_mu_;  // one Tick at a time (the thread, tests, Stop)
  // Ticks every 200 ms, and at once when a grant is wanted now (Wake). Last: stopped first.
  WorkerThread worker_;
};

}  // namespace mailroom
