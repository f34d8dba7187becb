#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/worker_thread.h"
#include "sender/delivery/breaker.h"
#include "sender/pacing/pacer.h"
#include "sender/transport/ses_transport.h"

namespace mailroom {

// The provider's own limits, read rather than typed: the sender reads GetAccount
// at start and every `interval`, and caps itself by MaxSendRate (a token bucket of
// max(1, floor(rate)) emails) and by Max24HourSend - SentLast24Hours (less what it sent since
// the last reading; when none is left, nothing until a later reading arrives, however late).
// SendingEnabled=false or enforcement SHUTDOWN pause sending as a provider-wide failure: the
// breaker (may be null) is opened with that reason, so jobs are handed back, nothing fails and
// health turns NOT_SERVING; a later reading that allows sending closes it again, if it was this
// that opened it. PROBATION and sandbox mode (ProductionAccessEnabled=false) are logged as warnings
// and set the gauge mailroom_sender_ses_account_warning{kind="probation"|"sandbox"}. A failed
// reading keeps the last limits (logged). Thread-safe; a Pacer for GrantPacer's caps.
class SesAccount : public Pacer {
 public:
  using FetchFunction = std::function<absl::StatusOr<SesAccountInfo>()>;
  SesAccount(FetchFunction fetch, absl::Duration interval, Breaker* breaker, Metrics* metrics,
             Clock* clock);
  ~SesAccount() override;

  absl::Time NextSendTime(SendClass c) override;
  int64_t TryAcquire(SendClass c) override;
  void Refund(SendClass c) override;

  // One reading now: new limits, pause or resume, warnings. Returns the fetch's status.
  absl::Status Refresh();
  // Reads every `interval` on a background thread until Stop().
  void Start();
  void Stop();
  bool paused();

 private:
  void RefillLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time NextLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const FetchFunction fetch_;
  const absl::Duration interval_;
  Breaker* const breaker_;
  Metrics* const metrics_;
  Clock* const clock_;
  absl::Mutex mu_;
  bool known_ ABSL_GUARDED_BY(mu_) = false;
  SesAccountInfo info_ ABSL_GUARDED_BY(mu_);
  absl::Time read_at_ ABSL_GUARDED_BY(mu_);
  int64_t sent_since_read_ ABSL_GUARDED_BY(mu_) = 0;
  double tokens_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time refilled_ ABSL_GUARDED_BY(mu_);
  bool paused_by_us_ ABSL_GUARDED_BY(mu_) = false;
  std::string warned_ ABSL_GUARDED_BY(mu_);  // the warnings last logged
  // Reads every `interval`; Stop() ends its wait at once. Last: stopped first.
  WorkerThread worker_;
};

}  // namespace mailroom
