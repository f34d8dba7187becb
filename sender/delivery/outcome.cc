#include "sender/delivery/outcome.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sender/delivery/retry.h"
#include "sender/transport/transport.h"

namespace mailroom {

namespace {

Decision Of(Verdict verdict, std::optional<OutcomeReport> report, bool charged = false) {
  return Decision{verdict, std::move(report), charged};
}

std::string HeldBecause(absl::string_view why) {
  return absl::StrCat("held: provider unavailable: ", why);
}

// The send may have reached the provider: charged, never refunded; retried once at most, so
// an ambiguous answer costs at most one duplicate.
Decision MaybeSent(const AttemptFacts& f, const RetryDecider& retry) {
  const std::string reason(f.sent.message());
  std::optional<absl::Duration> delay;
  if (f.failures == 1) delay = retry(f.sent, f.failures);
  if (delay.has_value()) {
    if (f.probe_wait.has_value()) delay = std::max(*delay, *f.probe_wait);
    return Of(Verdict::kMaybeSentRetry, OutcomeReport::Retry(f.job_id, reason, *delay), true);
  }
  return Of(Verdict::kUnconfirmed,
            OutcomeReport::Sent(f.job_id, std::max<int64_t>(f.charge, 0), "", f.provider), true);
}

// The send failed and cannot have reached the provider.
Decision NotSent(const AttemptFacts& f, const RetryDecider& retry) {
  const absl::Status& err = f.sent;
  const std::string reason(err.message());
  if (f.breaker && IsProviderError(err)) {
    // Not this job's fault: sent by the secondary now, or handed back uncounted until the
    // provider answers again.
    if (f.failover_now) return Of(Verdict::kFailingOver, std::nullopt);
    return Of(Verdict::kProviderDown,
              OutcomeReport::Defer(f.job_id, HeldBecause(reason), f.hold_delay));
  }
  const bool permanent = !RetryPolicy::Retryable(err);
  std::optional<absl::Duration> delay;
  if (!permanent) delay = retry(err, f.failures);
  if (delay.has_value()) {
    return Of(Verdict::kRetry, OutcomeReport::Retry(f.job_id, reason, *delay));
  }
  if (permanent) {
    // The server said the address itself is bad (5.1.x on RCPT): no later job for it should
    // be tried, so the collector is asked to suppress it.
    return Of(Verdict::kRejected,
              OutcomeReport::Failed(f.job_id, reason, IsRecipientRejected(err)));
  }
  return Of(Verdict::kGaveUp,
            OutcomeReport::Failed(f.job_id,
                                  absl::StrCat("gave up after ", f.failures, " attempts: ", reason),
                                  IsRecipientRejected(err)));
}

}  // namespace

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kExpired: return "expired";
    case Verdict::kUnrenderable: return "unrenderable";
    case Verdict::kHeld: return "held";
    case Verdict::kRequeued: return "requeued";
    case Verdict::kSent: return "sent";
    case Verdict::kMaybeSentRetry: return "maybe_sent_retry";
    case Verdict::kUnconfirmed: return "unconfirmed";
    case Verdict::kFailingOver: return "failing_over";
    case Verdict::kProviderDown: return "provider_down";
    case Verdict::kRetry: return "retry";
    case Verdict::kRejected: return "rejected";
    case Verdict::kGaveUp: return "gave_up";
  }
  return "unknown";
}

Decision DecideOutcome(const AttemptFacts& f, const RetryDecider& retry) {
  if (f.expiring) {
    return Of(Verdict::kExpired,
              OutcomeReport::Expired(f.job_id, "token expires before it can be delivered"));
  }
  if (!f.rendered.ok()) {
    return Of(Verdict::kUnrenderable,
              OutcomeReport::Failed(f.job_id, std::string(f.rendered.message())));
  }
  if (f.held.has_value()) {
    return Of(Verdict::kHeld, OutcomeReport::Defer(f.job_id, HeldBecause(*f.held), f.hold_delay));
  }
  if (f.slot_short) return Of(Verdict::kRequeued, std::nullopt);
  if (f.sent.ok()) {
    return Of(Verdict::kSent,
              OutcomeReport::Sent(f.job_id, f.charge, f.provider_message_id, f.provider), true);
  }
  if (IsMaybeSent(f.sent)) return MaybeSent(f, retry);
  return NotSent(f, retry);
}

}  // namespace mailroom
