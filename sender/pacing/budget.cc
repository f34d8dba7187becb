#include "sender/pacing/budget.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"

namespace mailroom {

int64_t PriceMicros(double price_per_1000) {
  return static_cast<int64_t>(std::ceil(price_per_1000 * 1000.0 - 1e-9));
}

std::pair<absl::Time, absl::Time> MonthOf(absl::Time t) {
  absl::CivilSecond cs = absl::ToCivilSecond(t, absl::UTCTimeZone());
  absl::CivilMonth m(cs);
  return {absl::FromCivil(m, absl::UTCTimeZone()), absl::FromCivil(m + 1, absl::UTCTimeZone())};
}

Budget::Budget(BudgetConfig config, Clock* clock)
    : config_(config), clock_(clock),
      budget_micros_(config.monthly_budget.has_value()
                         ? static_cast<int64_t>(std::floor(*config.monthly_budget * 1e6))
                         : -1),
      cost_micros_(PriceMicros(config.price_per_1000)) {
  last_ = clock_->Now();
  std::tie(month_start_, month_end_) = MonthOf(last_);
  budget_tokens_ = std::max(1, config_.burst);
  provider_tokens_ = ProviderCapacity();
}

double Budget::ProviderCapacity() const {
  return config_.provider_rate.has_value() ? std::max(1.0, std::floor(*config_.provider_rate)) : 0;
}

std::optional<double> Budget::RateLocked(absl::Time now) {
  if (budget_micros_ < 0) return std::nullopt;
  int64_t emails_left = cost_micros_ > 0 ? (budget_micros_ - spent_) / cost_micros_
                                         : std::numeric_limits<int64_t>::max() / 2;
  if (emails_left <= 0) return 0.0;
  double seconds_left = std::max(1e-3, absl::ToDoubleSeconds(month_end_ - now));
  return static_cast<double>(emails_left) / seconds_left;
}

void Budget::AdvanceLocked(absl::Time now) {
  if (now >= month_end_) {
    std::tie(month_start_, month_end_) = MonthOf(now);
    spent_ = 0;
    sent_ = 0;
    last_ = std::max(last_, month_start_);
  }
  if (now <= last_) return;
  const double dt = absl::ToDoubleSeconds(now - last_);
  auto rate = RateLocked(now);
  if (rate.has_value()) {
    budget_tokens_ = std::min<double>(std::max(1, config_.burst), budget_tokens_ + dt * *rate);
  }
  if (config_.provider_rate.has_value()) {
    provider_tokens_ = std::min(ProviderCapacity(), provider_tokens_ + dt * *config_.provider_rate);
  }
  last_ = now;
}

absl::Time Budget::NextLocked(absl::Time now) {
  AdvanceLocked(now);
  absl::Time next = now;
  auto rate = RateLocked(now);
  if (rate.has_value() && budget_tokens_ < 1) {
    if (*rate <= 0) return month_end_;
    // The rate at that time is at least today's, so the slot is open when it comes.
    next = std::max(next, now + absl::Seconds((1 - budget_tokens_) / *rate) + absl::Nanoseconds(1));
  }
  if (rate.has_value() && *rate <= 0) return month_end_;
  if (config_.provider_rate.has_value() && provider_tokens_ < 1) {
    next = std::max(next, now + absl::Seconds((1 - provider_tokens_) / *config_.provider_rate) +
                              absl::Nanoseconds(1));
  }
  return std::min(next, month_end_);
}

absl::Time Budget::NextSendTime(SendClass) {
  absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  return NextLocked(now);
}

int64_t Budget::TryAcquire(SendClass) {
  absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  if (NextLocked(now) > now) return -1;
  if (RateLocked(now).has_value()) budget_tokens_ -= 1;
  if (config_.provider_rate.has_value()) provider_tokens_ -= 1;
  spent_ += cost_micros_;
  ++sent_;
  return cost_micros_;
}

void Budget::Refund(SendClass) {
  absl::MutexLock lock(&mu_);
  spent_ = std::max<int64_t>(0, spent_ - cost_micros_);
  if (sent_ > 0) --sent_;
}

int64_t Budget::spent_micros() {
  absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  AdvanceLocked(now);
  return spent_;
}

int64_t Budget::remaining_micros() {
  absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  AdvanceLocked(now);
  return budget_micros_ < 0 ? -1 : std::max<int64_t>(0, budget_micros_ - spent_);
}

double Budget::pace_per_second() {
  absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  AdvanceLocked(now);
  auto rate = RateLocked(now);
  return rate.has_value() ? *rate : std::numeric_limits<double>::infinity();
}

uint64_t Budget::sent_this_month() {
  absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  AdvanceLocked(now);
  return sent_;
}

}  // namespace mailroom
