#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "sender/pacing/pacer.h"

namespace mailroom {

struct BudgetConfig {
  std::optional<double> monthly_budget;  // money per UTC calendar month; nullopt = unlimited
  double price_per_1000 = 0.10;          // money per 1,000 emails
  int burst = 10;                        // emails that may go back to back ahead of the pace
  std::optional<double> provider_rate;   // provider's cap, emails per second
};

// One sender's own pacing: the optional per-sender cap (MAILROOM_BUDGET) and the provider's
// rate cap (MAILROOM_PROVIDER_RATE_LIMIT), applied on top of the group's central budget
// (sender/pacing/grant_pacer.h), every SendClass alike. The pace is the money left this month
// divided by the time left in it (so money not spent early may be spent later), applied as a token
// bucket of `burst` emails refilled at that pace; the provider cap is a second bucket. The pace
// only grows while nothing is sent, so a slot NextSendTime() predicts is open when it comes.
// Spend is kept in integer micro-units, each email's price rounded up, and the month's total can
// never exceed the cap: when it is spent NextSendTime() is the first instant of next month.
// The cap counts this process's sends since it started (the group's spend, which survives
// restarts, is the collector's). Thread-safe.
class Budget : public Pacer {
 public:
  Budget(BudgetConfig config, Clock* clock);

  absl::Time NextSendTime(SendClass c) override;
  int64_t TryAcquire(SendClass c) override;
  void Refund(SendClass c) override;

  // The price of one email in micro-units (rounded up).
  int64_t cost_micros() const { return cost_micros_; }
  // For metrics and logs.
  int64_t spent_micros();
  // Remaining money this month in micro-units (-1 when unlimited).
  int64_t remaining_micros();
  // Current budget pace in emails per second (0 when spent; infinity when unlimited).
  double pace_per_second();
  uint64_t sent_this_month();

 private:
  // Starts a new month when `now` is past this one; refills the buckets up to `now`.
  void AdvanceLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Emails per second at the budget pace now; nullopt when unlimited, 0 when spent.
  std::optional<double> RateLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The provider bucket's size: the cap's whole emails per second, at least 1.
  double ProviderCapacity() const;
  absl::Time NextLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const BudgetConfig config_;
  Clock* const clock_;
  const int64_t budget_micros_;  // -1 when unlimited
  const int64_t cost_micros_;
  absl::Mutex mu_;
  absl::Time month_start_ ABSL_GUARDED_BY(mu_);
  absl::Time month_end_ ABSL_GUARDED_BY(mu_);
  int64_t spent_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sent_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_ ABSL_GUARDED_BY(mu_);           // when the buckets were last refilled
  double budget_tokens_ ABSL_GUARDED_BY(mu_) = 0;  // emails allowed now by the budget pace
  double provider_tokens_ ABSL_GUARDED_BY(mu_) = 0;
};

// One email's price in micro-units from a price per 1000 emails, rounded up: the recorded
// spend is never below what the provider charges.
int64_t PriceMicros(double price_per_1000);

// The UTC calendar month containing `t`: [start, end).
std::pair<absl::Time, absl::Time> MonthOf(absl::Time t);

}  // namespace mailroom
