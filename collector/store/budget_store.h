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

// The collector's defaults for groups whose budget or reserve is not set in group_budgets
// (MAILROOM_DEFAULT_GROUP_BUDGET, MAILROOM_RECOVERY_RESERVE_PERCENT).
struct BudgetDefaults {
  std::optional<int64_t> monthly_budget_micros;  // nullopt: unlimited
  int recovery_reserve_percent = 10;
  // How long a grant may be used; also how long a leased recovery may hold back the group's
  // activations.
  absl::Duration grant_lease = absl::Seconds(10);
};

// A sender's request for permission to send.
struct GrantRequest {
  std::string group;
  std::string holder;     // the sender (MAILROOM_SENDER_NAME plus a per-process id)
  int emails = 1;         // how many it would like (the answer may be fewer)
  bool recovery = false;  // for password recoveries: may use the reserve
  int64_t price_micros = 0;
};

// The answer: `emails` > 0 with a grant id and deadline, or 0 with when to ask again.
struct Grant {
  uint64_t grant_id = 0;
  int emails = 0;
  absl::Time expires_at = absl::InfinitePast();
  absl::Duration retry_after = absl::ZeroDuration();
  bool exhausted = false;      // no money left for this class this month
  double pace_per_second = 0;  // the group's pace in emails/s at this price (inf: unlimited)
};

// A group's budget this month, as GetGroupBudget shows it.
struct GroupBudgetRow {
  std::string group;
  std::string month;                             // YYYY-MM (UTC)
  std::optional<int64_t> monthly_budget_micros;  // in force; nullopt: unlimited
  bool budget_is_default = true;                 // not set for the group: the collector's default
  int recovery_reserve_percent = 0;              // in force
  bool reserve_is_default = true;
  int burst = 10;
  int64_t committed_micros = 0;  // greatest(granted - returned, spent)
  int64_t granted_micros = 0;
  int64_t returned_micros = 0;
  int64_t spent_micros = 0;  // SENT acknowledgements (group_usage)
  uint64_t sent = 0;
  int64_t outstanding_micros = 0;     // live grants not given back
  double pace_micros_per_second = 0;  // (budget - committed) / time left (inf: unlimited)
};

// What SetGroupBudget changes; unset fields are kept.
struct BudgetSettings {
  std::string group;
  std::optional<int64_t> monthly_budget_micros;
  bool default_budget = false;  // clear the group's budget: the collector's default applies
  std::optional<int> recovery_reserve_percent;
  bool default_reserve = false;
  std::optional<int> burst;
};

// What mailroom_budget_refund gave back of one dead holder's grants.
struct BudgetRefund {
  std::string group;
  std::string holder;
  int64_t emails = 0;
};

// The group budgets in PostgreSQL (group_budgets, budget_grants): grants, returns and settings.
// Every error is a Status (collector/db/pg_status.h): kNotFound (unknown group), kInvalidArgument
// (a value the schema refuses), kUnavailable (database, or the group's budget row locked for longer
// than the lock timeout; retry), kFailedPrecondition (what a retry does not fix).
// Thread-safe.
class BudgetStore {
 public:
  virtual ~BudgetStore() = default;
  // Grants up to `request.emails` (mailroom_budget_grant), charged at once. Password recoveries
  // first across senders: while the group is paced by a budget and one of its recoveries waits
  // to be sent (committed less than a grant lease ago and not handed out yet, or leased to any
  // subscriber that may still send it: lease live, holder there, handed out less than a grant
  // lease ago), a request without `recovery` gets no email, only `retry_after` (one email at
  // the pace, 50 ms to 1 s).
  virtual absl::StatusOr<Grant> Acquire(const GrantRequest& request) = 0;
  // Gives back `emails` unused emails of `grant_id`; returns how many were credited.
  virtual absl::StatusOr<int> Return(const std::string& group, const std::string& holder,
                                     uint64_t grant_id, int emails) = 0;
  virtual absl::StatusOr<GroupBudgetRow> Get(const std::string& group) = 0;
  // Applies `settings` and returns the group's budget as it now is.
  virtual absl::StatusOr<GroupBudgetRow> Set(const BudgetSettings& settings) = 0;
  // Gives back the unused part of the grants of holders that died (mailroom_budget_refund,
  // mailroom_budget_refund): those linked to a subscription whose grants all expired more
  // than a grant lease ago and who hold no live job lease get granted - returned -
  // (jobs handed - jobs settled unsent) back. Idempotent; returns one row per holder refunded.
  virtual absl::StatusOr<std::vector<BudgetRefund>> Refund() = 0;
};

// How a PgBudgetStore keeps one group's stuck call from delaying another group's.
struct BudgetIsolation {
  // Connections shared by all groups (opened on demand); a group uses at most one at a time,
  // so a group whose calls are stuck leaves the others connections-1 of them.
  int connections = 4;
  // lock_timeout of every budget statement, and the longest a call waits for its group's
  // turn or for a connection: a call stuck behind a lock (an operator's open transaction on
  // the group's group_budgets row) fails with kUnavailable after about this long, or twice
  // this long when it queued behind another stuck call of its group.
  absl::Duration lock_timeout = absl::Seconds(1);
};

// A BudgetStore over a pool of `isolation.connections` connections to `url`
// (collector/db/pool.h: opened on demand, reopened after a failure). Calls of one group run one
// at a time (grants of one group are serialised by PostgreSQL anyway); calls of different
// groups run side by side on their own connections. Transactions run under `timeouts`
// (collector/db/pg_tx.h) and the isolation's lock_timeout, set per transaction.
std::unique_ptr<BudgetStore> NewPgBudgetStore(const std::string& url, BudgetDefaults defaults,
                                              BudgetIsolation isolation = {},
                                              const TxTimeouts& timeouts = {});

}  // namespace mailroom
