#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "sender/lease/leased_job.h"

namespace mailroom {

// Decides about a failed delivery: the delay before the next attempt, or nullopt to give up.
// `failures` counts this failure too.
using RetryDecider =
    std::function<std::optional<absl::Duration>(const absl::Status& error, int failures)>;

// What one attempt at a job came to, stage by stage, as the Engine saw it: everything the
// outcome depends on, and nothing else. The stages run in order (expiry, render, route, send);
// the first that ends the attempt leaves the later ones at their defaults (see SendsNext).
struct AttemptFacts {
  uint64_t job_id = 0;
  // The job's failed attempts if this one fails too (Job.failures + 1).
  int failures = 1;
  // Too close to its expiry to be worth sending (EngineOptions::expiry_margin).
  bool expiring = false;
  // The render's result (an error: the job cannot be rendered for this recipient).
  absl::Status rendered;
  // Set when no transport may take the job now (its breakers are open): the breaker's reason.
  std::optional<std::string> held;
  // The secondary takes the job but the budget slot was bought at the primary's lower price.
  bool slot_short = false;
  // The transport's answer, and the id feedback names the message by (SENT).
  absl::Status sent;
  std::string provider_message_id;
  // The transport the send went to (its Name()): reported with SENT, so that only that
  // provider's feedback reaches the delivery.
  std::string provider;
  // A breaker watches the transport that sent (provider-wide errors hold the job).
  bool breaker = false;
  // After a failed send: the primary is down now and the secondary would send this job at once.
  bool failover_now = false;
  // After the send: until the next probe of the sending transport's breaker, when it is open.
  std::optional<absl::Duration> probe_wait;
  // How long a held job waits before it is handed out again.
  absl::Duration hold_delay = absl::ZeroDuration();
  // The email's price (micros) if it may have reached the provider: what it is charged.
  int64_t charge = 0;

  // True while no stage has ended the attempt: the next stage runs.
  bool SendsNext() const { return !expiring && rendered.ok() && !held && !slot_short; }
};

// How an attempt ends. Each verdict has one outcome (or none: the job stays held here).
enum class Verdict {
  kExpired,         // EXPIRED: too close to its expiry to be worth sending
  kUnrenderable,    // FAILED, not charged: it cannot be rendered
  kHeld,            // DEFER, not charged: no transport may take it now
  kRequeued,        // none, not charged: kept until a slot at the secondary's price
  kSent,            // SENT, charged
  kMaybeSentRetry,  // RETRY, charged: it may have reached the provider; its one retry
  kUnconfirmed,     // SENT without a provider id, charged: it may have reached the provider
  kFailingOver,     // none, not charged: kept, the secondary sends it at once
  kProviderDown,    // DEFER, not charged, not counted as a failure: a provider-wide error
  kRetry,           // RETRY, not charged: the retry policy allows another attempt
  kRejected,        // FAILED, not charged: a permanent error (suppress when the address is bad)
  kGaveUp,          // FAILED, not charged: the retry policy allows no further attempt
};

// The name of a verdict, for logs and tests.
const char* VerdictName(Verdict v);

// What to do with the job: the outcome to report (none: the job stays queued here) and
// whether its budget slot is spent (otherwise it is refunded).
struct Decision {
  Verdict verdict = Verdict::kRejected;
  std::optional<OutcomeReport> report;
  bool charged = false;
};

// The outcome of one attempt. Pure: the same facts and the same `retry` answers give the same
// decision. A send that may have reached the provider (IsMaybeSent) is charged and retried at
// most once (when it was the job's first failure), never after the sending breaker's next
// probe; a provider-wide error (IsProviderError, with a breaker) is held, or sent at once by
// the secondary; a permanent error or an exhausted retry policy fails the job, asking to
// suppress the recipient when the server refused the address (IsRecipientRejected).
Decision DecideOutcome(const AttemptFacts& facts, const RetryDecider& retry);

}  // namespace mailroom
