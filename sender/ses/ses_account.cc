#include "sender/ses/ses_account.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "sender/metrics/sender_metrics.h"
#include "sender/transport/ses_transport.h"

namespace mailroom {
namespace {

// While the 24-hour quota is used up and the next reading is due but not in, how long until
// NextSendTime is asked again (a time in the future: TryAcquire refuses until then).
constexpr absl::Duration kQuotaRecheck = absl::Milliseconds(100);

}  // namespace

SesAccount::SesAccount(FetchFunction fetch, absl::Duration interval, Breaker* breaker,
                       Metrics* metrics, Clock* clock)
    : fetch_(std::move(fetch)), interval_(interval), breaker_(breaker), metrics_(metrics),
      clock_(clock), worker_(
                         [this] {
                           while (worker_.WaitFor(interval_)) (void)Refresh();
                         },
                         clock) {
  read_at_ = refilled_ = clock_->Now();
}

SesAccount::~SesAccount() { Stop(); }

absl::Status SesAccount::Refresh() {
  auto info = fetch_();
  if (!info.ok()) {
    LogWarn("ses GetAccount failed; keeping the last limits",
            {{"error", std::string(info.status().message())}});
    return info.status();
  }
  const absl::Time now = clock_->Now();
  bool pause = false, resume = false;
  std::string warnings;
  {
    absl::MutexLock lock(&mu_);
    RefillLocked(now);
    const bool first = !known_;
    info_ = *info;
    known_ = true;
    read_at_ = now;
    sent_since_read_ = 0;
    if (first) tokens_ = std::max(1.0, std::floor(info_.max_send_rate));
    if (info_.paused()) {
      pause = true;
      paused_by_us_ = true;
    } else if (paused_by_us_) {
      resume = true;
      paused_by_us_ = false;
    }
    if (info_.enforcement_status == "PROBATION") warnings += "probation ";
    if (!info_.production_access) warnings += "sandbox ";
    if (warnings != warned_) {
      if (!warnings.empty()) {
        LogWarn("ses account restricted",
                {{"enforcement_status", info_.enforcement_status},
                 {"production_access", info_.production_access ? "true" : "false"}});
      }
      warned_ = warnings;
    }
  }
  if (metrics_ != nullptr) {
    metrics_->Set(sender_metrics::kSesAccountWarning,
                  info->enforcement_status == "PROBATION" ? 1 : 0, {"probation"});
    metrics_->Set(sender_metrics::kSesAccountWarning, info->production_access ? 0 : 1, {"sandbox"});
    metrics_->Set(sender_metrics::kSesSendingPaused, info->paused() ? 1 : 0);
    metrics_->Set(sender_metrics::kSesMaxSendRate, info->max_send_rate);
    metrics_->Set(sender_metrics::kSesQuotaRemaining,
                  info->max_24_hour_send < 0
                      ? -1.0
                      : std::max(0.0, info->max_24_hour_send - info->sent_last_24_hours));
  }
  if (breaker_ != nullptr && pause) {
    // The same path as a send refused with SendingPausedException: hand jobs back, fail none.
    Breaker::Ticket t = breaker_->Admit();
    if (t.decision != Breaker::Decision::kHold) {
      breaker_->Record(t, ProviderError(absl::StrCat("ses GetAccount: sending ",
                                                     info->sending_enabled
                                                         ? "shut down (EnforcementStatus SHUTDOWN)"
                                                         : "disabled (SendingEnabled=false)")));
    }
  }
  if (breaker_ != nullptr && resume && breaker_->open()) {
    Breaker::Ticket t = breaker_->Admit();
    if (t.decision == Breaker::Decision::kProbe) breaker_->Record(t, absl::OkStatus());
    if (t.decision == Breaker::Decision::kSend) breaker_->Cancel(t);
  }
  return absl::OkStatus();
}

void SesAccount::RefillLocked(absl::Time now) {
  if (now > refilled_ && info_.max_send_rate > 0) {
    tokens_ = std::min(std::max(1.0, std::floor(info_.max_send_rate)),
                       tokens_ + absl::ToDoubleSeconds(now - refilled_) * info_.max_send_rate);
  }
  refilled_ = std::max(refilled_, now);
}

absl::Time SesAccount::NextLocked(absl::Time now) {
  if (!known_) return now;
  RefillLocked(now);
  if (info_.max_24_hour_send >= 0 &&
      info_.max_24_hour_send - info_.sent_last_24_hours - sent_since_read_ < 1) {
    // Nothing left until a reading says otherwise. Not until the time of the next reading:
    // the reading itself may come later (the fetch takes a while, or fails) and every send
    // before it would be refused.
    return std::max(read_at_ + interval_, now + kQuotaRecheck);
  }
  if (info_.max_send_rate > 0 && tokens_ < 1) {
    return now + absl::Seconds((1 - tokens_) / info_.max_send_rate) + absl::Nanoseconds(1);
  }
  return now;
}

absl::Time SesAccount::NextSendTime(SendClass) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  return NextLocked(now);
}

int64_t SesAccount::TryAcquire(SendClass) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  if (NextLocked(now) > now) return -1;
  if (known_ && info_.max_send_rate > 0) tokens_ -= 1;
  ++sent_since_read_;
  return 0;
}

void SesAccount::Refund(SendClass) {
  absl::MutexLock lock(&mu_);
  if (sent_since_read_ > 0) --sent_since_read_;
  if (known_ && info_.max_send_rate > 0) tokens_ += 1;
}

bool SesAccount::paused() {
  absl::MutexLock lock(&mu_);
  return known_ && info_.paused();
}

void SesAccount::Start() { worker_.Start(); }

void SesAccount::Stop() { worker_.Stop(); }

}  // namespace mailroom
