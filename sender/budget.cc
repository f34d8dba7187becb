#include "sender/budget.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"

namespace mailroom {

std::pair<absl::Time, absl::Time> MonthOf(absl::Time t) {
  absl::CivilSecond cs = absl::ToCivilSecond(t, absl::UTCTimeZone());
  absl::CivilMonth m(cs);
  return {absl::FromCivil(m, absl::UTCTimeZone()), absl::FromCivil(m + 1, absl::UTCTimeZone())};
}

Budget::Budget(BudgetConfig config, Clock* clock)
    : config_(config),
      clock_(clock),
      budget_micros_(config.monthly_budget.has_value()
                         ? static_cast<int64_t>(std::floor(*config.monthly_budget * 1e6))
                         : -1),
      // Rounded up: the recorded spend is never below what the provider charges.
      cost_micros_(static_cast<int64_t>(std::ceil(config.price_per_1000 * 1000.0 - 1e-9))) {
  absl::Time now = clock_->Now();
  std::tie(month_start_, month_end_) = MonthOf(now);
  budget_tat_ = provider_tat_ = now;
}

void Budget::RollOverLocked(absl::Time now) {
  if (now < month_end_) return;
  std::tie(month_start_, month_end_) = MonthOf(now);
  spent_ = 0;
  sent_ = 0;
  budget_tat_ = now;
}

std::optional<double> Budget::IntervalLocked(absl::Time now) {
  if (budget_micros_ < 0) return std::nullopt;
  int64_t emails_left = cost_micros_ > 0 ? (budget_micros_ - spent_) / cost_micros_
                                         : std::numeric_limits<int64_t>::max();
  if (emails_left <= 0) return std::numeric_limits<double>::infinity();
  double seconds_left = std::max(1e-3, absl::ToDoubleSeconds(month_end_ - now));
  return seconds_left / static_cast<double>(emails_left);
}

absl::Time Budget::NextLocked(absl::Time now) {
  RollOverLocked(now);
  absl::Time next = now;
  auto interval = IntervalLocked(now);
  if (interval.has_value()) {
    if (std::isinf(*interval)) return month_end_;
    absl::Duration tolerance = absl::Seconds(*interval * (std::max(1, config_.burst) - 1));
    next = std::max(next, budget_tat_ - tolerance);
  }
  if (config_.provider_rate.has_value()) {
    double t = 1.0 / *config_.provider_rate;
    int cap_burst = std::max(1, static_cast<int>(std::floor(*config_.provider_rate)));
    next = std::max(next, provider_tat_ - absl::Seconds(t * (cap_burst - 1)));
  }
  return next;
}

absl::Time Budget::NextSendTime() {
  absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  return NextLocked(now);
}

int64_t Budget::TryAcquire() {
  absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  if (NextLocked(now) > now) return -1;
  auto interval = IntervalLocked(now);
  if (interval.has_value()) {
    if (std::isinf(*interval)) return -1;
    budget_tat_ = std::max(budget_tat_, now) + absl::Seconds(*interval);
  }
  if (config_.provider_rate.has_value()) {
    provider_tat_ = std::max(provider_tat_, now) + absl::Seconds(1.0 / *config_.provider_rate);
  }
  spent_ += cost_micros_;
  ++sent_;
  return cost_micros_;
}

void Budget::Refund() {
  absl::MutexLock lock(&mu_);
  spent_ = std::max<int64_t>(0, spent_ - cost_micros_);
  if (sent_ > 0) --sent_;
}

void Budget::Restore(const std::string& month, uint64_t sent, int64_t cost_micros) {
  absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  RollOverLocked(now);
  if (month != absl::FormatTime("%Y-%m", month_start_, absl::UTCTimeZone())) return;
  spent_ = std::max(spent_, cost_micros);
  sent_ = std::max(sent_, sent);
}

int64_t Budget::spent_micros() {
  absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  RollOverLocked(now);
  return spent_;
}

int64_t Budget::remaining_micros() {
  absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  RollOverLocked(now);
  return budget_micros_ < 0 ? -1 : std::max<int64_t>(0, budget_micros_ - spent_);
}

double Budget::pace_per_second() {
  absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  RollOverLocked(now);
  auto interval = IntervalLocked(now);
  if (!interval.has_value()) return std::numeric_limits<double>::infinity();
  return std::isinf(*interval) ? 0.0 : 1.0 / *interval;
}

uint64_t Budget::sent_this_month() {
  absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  RollOverLocked(now);
  return sent_;
}

}  // namespace mailroom
