#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collector/db/pg_tx.h"
#include "collector/store/store.h"

namespace mailroom {

// One entry of an email's ledger (email_events of the group's deliveries, and those staged).
struct LedgerEntry {
  uint64_t event_id = 0;  // 0: staged, not published yet
  std::string event;      // sent, retried, failed, expired, suppressed, delivered, bounced, ...
  int64_t at_ms = 0;      // Unix milliseconds
  int handout = 0;        // the try's hand-out count; 0 for a provider's event
  std::string subscriber, provider, provider_message_id, detail;
  int64_t cost_micros = 0;
};

// One email as FindEmails shows it: its token's facts and the group's delivery, never the
// token's secret or code.
struct FoundEmail {
  uint64_t job_id = 0;
  uint64_t account_id = 0;
  std::string action, address, state, reason;  // state as mailroom.account_emails says it
  int64_t requested_at = 0, expires_at = 0;    // Unix seconds
  int handouts = 0, failures = 0;
  std::string provider, provider_message_id;
  std::vector<LedgerEntry> ledger;  // oldest first
};

// What an address's or an account's lookup found.
struct FoundEmails {
  std::vector<FoundEmail> emails;  // newest first
  // The address's entry in force (an account: its address's); an expired one is not.
  std::optional<SuppressionRow> suppression;
};

// One operator call as the audit records it.
struct AuditRecord {
  std::string credential;  // who: Principal::credential, never a secret
  std::string method;      // the call
  std::string group;       // "" for a call on every group's list
  std::string target;      // what it is about: address, account, jobs, the reason given
};

// An audit entry as ListAudit shows it.
struct AuditEntryRow {
  uint64_t id = 0;
  int64_t at_ms = 0;
  AuditRecord record;
  std::string outcome;  // "started" until the call ended
};

// One hour of a group's sending (reputation_hourly, every provider summed).
struct HourRow {
  int64_t hour = 0;  // Unix seconds of its start
  int64_t sent = 0, delivered = 0, bounced = 0, complained = 0;
};

// A failure, bounce, complaint, suppressed or expired email of a group (the ledger's event).
struct TroubleRow {
  uint64_t event_id = 0;
  std::string event;
  int64_t at_ms = 0;
  std::string detail;
  uint64_t job_id = 0, account_id = 0;
  std::string action, address;
};

// A group's pause by an operator, as it now is.
struct GroupPauseRow {
  std::string group;
  bool paused = false;
  int64_t paused_at = 0;  // Unix seconds; 0 when not paused
  std::string reason;
};

// The operator's reads of mailroom's tables, a group's pause, its failures and their requeue,
// the suppression list and the audit of operator calls, its charts' and lists' reads for the
// console, over the SQL functions mailroom_find_emails, mailroom_email_ledger,
// mailroom_group_hourly, mailroom_group_trouble, mailroom_pause_group, mailroom_list_failures,
// mailroom_requeue, mailroom_list_suppressions, mailroom_add_suppression,
// mailroom_remove_suppression, mailroom_audit, mailroom_audit_end and mailroom_list_audit. Errors
// are Statuses (collector/db/pg_status.h): kNotFound for an unknown group, kUnavailable when the
// database does not answer. Thread-safe.
class OperatorStore {
 public:
  virtual ~OperatorStore() = default;
  // The newest `limit` emails of `address` (when not empty) or else of `account`, each with
  // its delivery and ledger in `group`, and the address's suppression entry.
  virtual absl::StatusOr<FoundEmails> FindEmails(const std::string& group,
                                                 const std::string& address, uint64_t account,
                                                 int limit) = 0;
  // Pauses (`paused`, with `reason`) or resumes `group`: while paused no collector hands out
  // its jobs.
  virtual absl::StatusOr<GroupPauseRow> SetPaused(const std::string& group, bool paused,
                                                  const std::string& reason) = 0;
  // Every consumer group's name, in order.
  virtual absl::StatusOr<std::vector<std::string>> Groups() = 0;
  // The last `hours` hours of `group`'s sending, oldest first (mailroom_group_hourly).
  virtual absl::StatusOr<std::vector<HourRow>> Hourly(const std::string& group, int hours) = 0;
  // `group`'s newest `limit` failures, bounces, complaints, suppressed and expired emails of the
  // last `within` (mailroom_group_trouble).
  virtual absl::StatusOr<std::vector<TroubleRow>> Trouble(const std::string& group,
                                                          absl::Duration within, int limit) = 0;
  // Records the start of a call; returns its entry's id. A call whose start cannot be
  // recorded must not run.
  virtual absl::StatusOr<uint64_t> BeginAudit(const AuditRecord& record) = 0;
  // Sets how call `id` ended (once).
  virtual absl::Status EndAudit(uint64_t id, const std::string& outcome) = 0;
  // The newest `limit` entries with an id below `before_id` (0: from the newest).
  virtual absl::StatusOr<std::vector<AuditEntryRow>> ListAudit(uint64_t before_id, int limit) = 0;
  // Most recent permanent failures, newest first.
  virtual absl::StatusOr<std::vector<FailureRow>> Failures(const std::string& group, int limit) = 0;
  // Puts failed jobs back in the queue (all failed jobs of the group when `ids` is empty).
  virtual absl::StatusOr<int> Requeue(const std::string& group,
                                      const std::vector<uint64_t>& ids) = 0;
  // Entries of the suppression list (see SuppressionQuery).
  virtual absl::StatusOr<std::vector<SuppressionRow>> ListSuppressions(
      const SuppressionQuery& query) = 0;
  // Inserts or updates the entry of `row.address` (already normalised and validated): reason,
  // source and expires_at are replaced, last_seen set to now, first_seen kept. Returns the
  // entry as stored.
  virtual absl::StatusOr<SuppressionRow> AddSuppression(const SuppressionRow& row) = 0;
  // Deletes the entry of `address` and returns it; kNotFound when there is none.
  virtual absl::StatusOr<SuppressionRow> RemoveSuppression(const std::string& address) = 0;
};

// An OperatorStore over a pool of `connections` connections to `url` (opened on demand), its
// transactions under `timeouts`.
std::unique_ptr<OperatorStore> NewPgOperatorStore(const std::string& url, int connections = 2,
                                                  const TxTimeouts& timeouts = {});

}  // namespace mailroom
