#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collector/db/pg_tx.h"

namespace mailroom {

// A job as stored: one token row joined with its account and its delivery in a group.
struct StoredJob {
  uint64_t id = 0;
  std::string action = "activation";  // the action's name (mailroom.actions)
  bool critical = false;              // the action's class is critical (the recovery lane's jobs)
  bool notice = false;                // the action's class is notice
  std::string email;
  std::string login;
  std::string secret;  // 32 raw bytes; empty for an action without a secret (a notice)
  std::string code;    // empty for an action without a code
  int64_t expires_at = 0;
  uint64_t account_id = 0;
  uint32_t attempt = 1;  // the hand-out count: 1 on the first hand-out
  uint32_t failures = 0;
  int64_t created_at = 0;
  std::string locale;  // BCP 47 tag from accounts.locale; "" when unset
};

// One reported outcome of a job.
struct JobResult {
  enum class Kind { kSent, kFailed, kExpired, kRetry, kDefer };
  uint64_t id = 0;
  uint32_t attempt = 0;  // the lease's hand-out count, as handed out (the fencing token)
  Kind kind = Kind::kSent;
  std::string reason;
  uint32_t retry_after_ms = 0;
  int64_t cost_micros = 0;
  // Only with kFailed: the recipient was rejected permanently; its address is added to the
  // suppression list (reason smtp_rejected, source `reason`) if this outcome is recorded.
  bool suppress_recipient = false;
  // Only with kSent: the provider's message id (SES MessageId), stored on the delivery so that
  // feedback can find the job; "" when the transport has none.
  std::string provider_message_id;
  // Only with kSent: the transport that sent it (ses, postmark, smtp, ...; "" when the
  // subscriber does not say), stored on the delivery: a provider's feedback reaches only what
  // that provider sent.
  std::string provider;
};

struct GroupStatsRow {
  std::string group;
  uint64_t depth = 0;
  double lag_seconds = 0;
  uint64_t in_flight = 0;
  uint64_t waiting_retry = 0;
  uint64_t sent = 0;
  uint64_t failed = 0;
  uint64_t expired = 0;
  uint64_t cancelled = 0;
  uint64_t superseded = 0;    // a newer password recovery of the account replaced it
  uint64_t rate_limited = 0;  // over a per-account or per-address limit at insert
  uint64_t suppressed = 0;    // the address is on the suppression list
};

// One entry of the suppression list (table `suppressions`).
struct SuppressionRow {
  std::string address;  // lower(trim(email))
  std::string reason;   // hard_bounce | complaint | smtp_rejected | manual
  std::string source;
  int64_t first_seen = 0;  // Unix seconds
  int64_t last_seen = 0;
  int64_t expires_at = 0;  // 0: never
};

// Which suppressions to list: addresses after `after` (exclusive; "" from the start), of
// `reason` ("" any) and starting with `prefix` ("" any), ordered by address, at most `limit`.
struct SuppressionQuery {
  std::string after;
  std::string reason;
  std::string prefix;
  int limit = 100;
};

struct FailureRow {
  uint64_t id = 0;
  std::string action;  // "" when the token is gone
  std::string email;
  std::string reason;
  uint32_t attempts = 0;
  int64_t failed_at = 0;
};

// One dequeue: up to `limit` jobs of `group` leased to subscription `owner` for `lease`.
struct DequeueRequest {
  std::string group;
  int limit = 0;
  std::string owner;
  absl::Duration lease;
  // The recovery lane: the critical class only (password recoveries, sign-in codes, address
  // changes, any critical action: due again, then new); the other classes' cursors are
  // neither read nor moved.
  bool recoveries_only = false;
  // The budget holder whose grants the subscription spends (SubscribeRequest.budget_holder;
  // "" none): the jobs handed are counted for it in the dequeue's transaction, and the
  // subscription's outcomes other than SENT and its released jobs as settled unsent.
  std::string holder{};
  // A dequeue with `holder` for `owner` has succeeded before: one that hands no job then
  // writes nothing (the first one registers the link, even with no job).
  bool holder_registered = false;
};

struct UsageRow {
  std::string month;  // YYYY-MM
  uint64_t sent = 0;
  int64_t cost_micros = 0;
};

// The collector's view of PostgreSQL. Implementations are thread-safe. No exception leaves a
// Store: database errors come back as kUnavailable (connection problems, timeouts; retry) or
// kFailedPrecondition/kNotFound/kInvalidArgument (what a retry does not fix), as
// collector/db/pg_status.h maps them.
class Store {
 public:
  virtual ~Store() = default;

  // The NOTIFY channel configured in the database (mailroom_settings.channel).
  virtual absl::StatusOr<std::string> Channel() = 0;
  // Creates `group` if missing. It then receives tokens committed from now on, or, with
  // `from_earliest`, every token not yet expired too (mailroom_ensure_group). No-op if the
  // group exists.
  virtual absl::Status EnsureGroup(const std::string& group, bool from_earliest) = 0;
  // Creates the activation tokens of up to `limit` queued signups (mailroom_collect_signups),
  // committed before it returns; returns how many queued signups it took.
  virtual absl::StatusOr<int> CollectSignups(int limit) = 0;
  // Leases jobs as `request` says (mailroom_dequeue; mailroom_dequeue_for_holder for a
  // subscription with a budget holder).
  virtual absl::StatusOr<std::vector<StoredJob>> Dequeue(const DequeueRequest& request) = 0;
  // Leases up to `limit` jobs of `group` to `owner` for `lease`, for no budget holder.
  absl::StatusOr<std::vector<StoredJob>> Dequeue(const std::string& group, int limit,
                                                 const std::string& owner, absl::Duration lease) {
    return Dequeue(DequeueRequest{group, limit, owner, lease});
  }
  // The same in the recovery lane (DequeueRequest::recoveries_only).
  absl::StatusOr<std::vector<StoredJob>> DequeueRecoveries(const std::string& group, int limit,
                                                           const std::string& owner,
                                                           absl::Duration lease) {
    return Dequeue(DequeueRequest{group, limit, owner, lease, /*recoveries_only=*/true});
  }
  // Records outcomes of jobs leased to `owner` (each with the hand-out count it was handed out
  // with) in one transaction; returns the ids recorded. Outcomes for any other lease change
  // nothing. A recorded outcome with `suppress_recipient` suppresses its job's address in the same
  // transaction; recorded SENT outcomes store their provider_message_id and count towards the
  // group's reputation counters (mailroom_record_sent); recorded outcomes other than SENT
  // count as settled unsent for the budget holder `owner` dequeued for
  // (DequeueRequest::holder; mailroom_budget_settled).
  virtual absl::StatusOr<std::vector<uint64_t>> Ack(const std::string& group,
                                                    const std::string& owner,
                                                    const std::vector<JobResult>& results) = 0;
  // Extends the leases `owner` holds on `ids` to now + `lease`; returns the ids renewed.
  // `attempts` is empty (any hand-out count) or parallel to `ids` (only those hand-out counts).
  // Jobs leased in one lease batch share their lease: renewing one renews all of them.
  virtual absl::StatusOr<std::vector<uint64_t>> Renew(const std::string& group,
                                                      const std::string& owner,
                                                      const std::vector<uint64_t>& ids,
                                                      const std::vector<uint32_t>& attempts,
                                                      absl::Duration lease) = 0;
  // Extends every lease `owner` holds, expired or not, to now + `lease`: after a database
  // outage, for subscribers still connected, whose acknowledgements could not be recorded.
  virtual absl::Status RenewAll(const std::string& group, const std::string& owner,
                                absl::Duration lease) = 0;
  // `owner`'s stream ended: its leases run out as usual (its sender may still deliver and
  // acknowledge them) but no longer count towards poison detection. Its outcomes still count
  // for its budget holder.
  virtual absl::Status HolderLeft(const std::string& group, const std::string& owner) = 0;
  // Makes the leases `owner` holds on `ids` due now, without counting them as lost: jobs that
  // were leased but never reached the subscriber (its stream ended first). Those released
  // count as settled unsent for the budget holder `owner` dequeued for.
  virtual absl::Status Release(const std::string& group, const std::string& owner,
                               const std::vector<uint64_t>& ids) = 0;
  // The names of every consumer group in the database.
  virtual absl::StatusOr<std::vector<std::string>> GroupNames() = 0;
  // Statistics of one group, or of all when `group` is empty.
  virtual absl::StatusOr<std::vector<GroupStatsRow>> Stats(const std::string& group) = 0;
  // This month's usage of a group.
  virtual absl::StatusOr<UsageRow> Usage(const std::string& group) = 0;
  // SELECT 1.
  virtual absl::Status Ping() = 0;
};

// MAILROOM_DB_POOL_SIZE's default: the connections of NewPgStore's pool.
inline constexpr int kDefaultDbPoolSize = 4;

// A Store over a pool of `pool_size` connections to `url` (collector/db/pool.h: opened lazily
// and reopened after a failure). Each call uses one connection; calls run concurrently up to
// `pool_size`. Every transaction runs under `timeouts` (collector/db/pg_tx.h: set per
// transaction, so `url` may be a transaction-pooling pgbouncer). `default_budget_micros`: the
// collector's budget for a group without one of its own (MAILROOM_DEFAULT_GROUP_BUDGET;
// nullopt: unlimited), which the dequeue reads to pause notices when little of a group's month
// is left.
std::unique_ptr<Store> NewPgStore(const std::string& url, int pool_size,
                                  const TxTimeouts& timeouts = {},
                                  std::optional<int64_t> default_budget_micros = std::nullopt);

}  // namespace mailroom
