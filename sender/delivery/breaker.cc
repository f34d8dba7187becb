#include "sender/delivery/breaker.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "sender/metrics/sender_metrics.h"
#include "sender/transport/transport.h"

namespace mailroom {

Breaker::Breaker(Options options, Clock* clock, Metrics* metrics)
    : opt_(std::move(options)), clock_(clock), metrics_(metrics),
      probe_backoff_(opt_.initial_backoff, opt_.max_backoff), backoff_(opt_.initial_backoff) {
  if (metrics_ != nullptr) {
    metrics_->Set(sender_metrics::kBreakerOpen, 0);
    metrics_->Add(sender_metrics::kBreakerTrips, 0);
  }
}

void Breaker::SetGauge(bool open) {
  if (metrics_ != nullptr) metrics_->Set(sender_metrics::kBreakerOpen, open ? 1 : 0);
}

Breaker::Ticket Breaker::Admit() {
  absl::MutexLock lock(&mu_);
  if (!open_) return {Decision::kSend, epoch_};
  if (!probing_ && clock_->Now() >= next_probe_) {
    probing_ = true;
    return {Decision::kProbe, epoch_};
  }
  return {Decision::kHold, epoch_};
}

void Breaker::Cancel(const Ticket& ticket) {
  absl::MutexLock lock(&mu_);
  if (ticket.decision == Decision::kProbe && open_ && ticket.epoch == epoch_) probing_ = false;
}

void Breaker::Record(const Ticket& ticket, const absl::Status& outcome) {
  const bool provider_down = IsProviderError(outcome);
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  if (!open_) {
    // A send admitted before an earlier trip closed again may still report: only a provider
    // error from the current closed period opens.
    if (!provider_down || ticket.epoch != epoch_) return;
    open_ = true;
    ++epoch_;
    ++trips_;
    probe_backoff_.Reset();
    backoff_ = WaitAfter(outcome, probe_backoff_.NextBackOff(), opt_.max_backoff);
    next_probe_ = now + backoff_;
    opened_at_ = now;
    reason_ = std::string(outcome.message());
    if (metrics_ != nullptr) metrics_->Add(sender_metrics::kBreakerTrips, 1);
    SetGauge(true);
    // An unnamed breaker (the only one) logs the lines it always did.
    const std::string probe_in_ms = absl::StrCat(absl::ToInt64Milliseconds(backoff_));
    if (opt_.name.empty()) {
      LogError("provider unavailable; holding jobs",
               {{"reason", reason_}, {"probe_in_ms", probe_in_ms}});
    } else {
      LogError("provider unavailable; holding jobs",
               {{"transport", opt_.name}, {"reason", reason_}, {"probe_in_ms", probe_in_ms}});
    }
    return;
  }
  // Open: only the current probe's outcome counts; sends that started before the trip say
  // nothing about the provider now.
  if (ticket.decision != Decision::kProbe || ticket.epoch != epoch_) return;
  probing_ = false;
  if (provider_down) {
    backoff_ = WaitAfter(outcome, probe_backoff_.NextBackOff(), opt_.max_backoff);
    next_probe_ = now + backoff_;
    reason_ = std::string(outcome.message());
    Log(LogLevel::kDebug, "probe failed; provider still unavailable",
        {{"reason", reason_}, {"probe_in_ms", absl::StrCat(absl::ToInt64Milliseconds(backoff_))}});
    return;
  }
  open_ = false;
  ++epoch_;
  probe_backoff_.Reset();
  backoff_ = opt_.initial_backoff;
  next_probe_ = absl::InfinitePast();
  reason_.clear();
  SetGauge(false);
  const std::string held_for_ms = absl::StrCat(absl::ToInt64Milliseconds(now - opened_at_));
  if (opt_.name.empty()) {
    LogInfo("provider available again; sending", {{"held_for_ms", held_for_ms}});
  } else {
    LogInfo("provider available again; sending",
            {{"transport", opt_.name}, {"held_for_ms", held_for_ms}});
  }
}

bool Breaker::open() const {
  absl::MutexLock lock(&mu_);
  return open_;
}

absl::Time Breaker::NextProbe() const {
  absl::MutexLock lock(&mu_);
  if (!open_) return absl::InfinitePast();
  if (probing_) return clock_->Now() + backoff_;
  return next_probe_;
}

std::string Breaker::reason() const {
  absl::MutexLock lock(&mu_);
  return reason_;
}

int64_t Breaker::trips() const {
  absl::MutexLock lock(&mu_);
  return trips_;
}

}  // namespace mailroom
