#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collector/db/pg_tx.h"
#include "collector/feedback/feedback_event.h"

namespace mailroom {

// A group's reputation counters over a rolling window (reputation_hourly).
struct ReputationRow {
  std::string group;
  uint64_t sent = 0;
  uint64_t delivered = 0;
  uint64_t bounced = 0;  // permanent bounces
  uint64_t complained = 0;

  // Permanent bounces and complaints per email sent (0 when nothing was sent).
  double bounce_rate() const { return sent == 0 ? 0 : static_cast<double>(bounced) / sent; }
  double complaint_rate() const { return sent == 0 ? 0 : static_cast<double>(complained) / sent; }
};

// A group's counters from one provider's feedback path over a rolling window
// (mailroom_reputation_by_provider): what that provider reported.
struct ProviderReputationRow {
  std::string group;
  std::string provider;  // ses | postmark | sendgrid | mailgun | resend | http
  uint64_t delivered = 0;
  uint64_t bounced = 0;  // permanent bounces
  uint64_t complained = 0;
};

// What recording one SNS message or webhook event did.
enum class FeedbackResult { kRecorded, kUnmatched, kDuplicate };

// Where an event may reach, and what an event that reaches no delivery still does.
struct FeedbackScope {
  // The only group whose deliveries the event may name (the group of the secret it was signed
  // with); "" for every group.
  std::string group;
  // Whether an event that matches no delivery still suppresses its recipients (the operator's
  // opt-in for its provider, MAILROOM_FEEDBACK_SUPPRESS_UNMATCHED). Never with a `group`.
  bool suppress_unmatched = false;
};

// What Record did with one event.
struct FeedbackRecord {
  FeedbackResult result = FeedbackResult::kRecorded;
  // With kUnmatched, why: "no_delivery" (no delivery carries the event's message ids, nor is
  // the job its tags name), "recipient" (one does, sent to an address the event does not name),
  // "provider" (one does, sent by another provider: mailroom_feedback_reaches) or
  // "other_group" (one does, of a group outside the scope).
  std::string unmatched_reason;
  // With kUnmatched: the opt-in suppressed the recipients (or counted their soft bounce).
  bool suppressed = false;
};

// "recorded", "unmatched" or "duplicate": the endpoint's answer and its counters' label.
const char* ResultName(FeedbackResult r);

// The domains of `recipients` (comma-separated, each once): how feedback logs name whom an
// event was about. The addresses themselves are personal data and are not logged.
std::string RecipientDomains(const std::vector<std::string>& recipients);

// The feedback and reputation side of PostgreSQL (mailroom_record_feedback, reputation_hourly).
// Thread-safe; no exception leaves it: a database error is the Status collector/db/pg_status.h maps
// it to.
class FeedbackStore {
 public:
  virtual ~FeedbackStore() = default;
  // Records event `e` of provider `e.provider` (mailroom_record_feedback): once per
  // `event_key` (the SNS message id, or "<provider>:<event id>"). The event is attached to a
  // delivery only when the delivery carries one of `e.message_ids` (or is the job `e.group` /
  // `e.job_id` name), was sent to one of `e.recipients` (compared as lower(btrim(address))) and
  // is of `scope.group` when that is set. Then a permanent bounce or complaint suppresses the
  // delivery's recipient, a transient bounce suppresses it after `soft_bounce_limit` of them
  // within 7 days, and the counters are the group's and provider's. An event that matches no
  // delivery changes nothing (kUnmatched) unless `scope.suppress_unmatched`.
  virtual absl::StatusOr<FeedbackRecord> Record(const std::string& event_key,
                                                const FeedbackEvent& e, int soft_bounce_limit,
                                                const FeedbackScope& scope) = 0;
  // Every group's counters over the last `window` (whole hours).
  virtual absl::StatusOr<std::vector<ReputationRow>> Reputation(absl::Duration window) = 0;
  // Every group's counters per provider over the last `window`: the groups and providers
  // with feedback only.
  virtual absl::StatusOr<std::vector<ProviderReputationRow>> ReputationByProvider(
      absl::Duration window) = 0;
};

// A FeedbackStore on a pool of one connection to `url` (collector/db/pool.h: opened lazily,
// reopened after an error). Transactions run under `timeouts` (collector/db/pg_tx.h).
std::unique_ptr<FeedbackStore> NewPgFeedbackStore(const std::string& url,
                                                  const TxTimeouts& timeouts = {});

}  // namespace mailroom
