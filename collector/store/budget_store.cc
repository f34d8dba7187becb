#include "collector/store/budget_store.h"

#include <pqxx/pqxx>

#include <algorithm>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "collector/db/pool.h"

namespace mailroom {
namespace {

// One row of GroupBudgetRow for group $1 with defaults $2 (budget, NULL = unlimited) and $3.
constexpr char kGetSql[] = R"SQL(
SELECT to_char(s.month, 'YYYY-MM'), s.budget_micros, b.monthly_budget_micros IS NULL,
       s.reserve_percent, b.recovery_reserve_percent IS NULL, s.burst, s.committed_micros,
       s.granted_micros, s.returned_micros, s.spent_micros, s.sent,
       (SELECT coalesce(sum((bg.emails - bg.returned_emails) * bg.price_micros), 0)
          FROM budget_grants bg WHERE bg.group_id = g.id AND bg.expires_at > now()),
       CASE WHEN s.budget_micros IS NULL THEN 'Infinity'::DOUBLE PRECISION
            ELSE greatest(s.budget_micros - s.committed_micros, 0) / s.seconds_left END
  FROM consumer_groups g
  LEFT JOIN group_budgets b ON b.group_id = g.id
 CROSS JOIN LATERAL mailroom_budget_state(g.id, $2, $3) s
 WHERE g.name = $1
)SQL";

// How long a sender refused a slot for an activation, while a recovery of its group waits to be
// sent, waits before it asks again: one email at the group's pace, within [50 ms, 1 s].
absl::Duration RecoveryFirstWait(double pace_per_second) {
  if (!(pace_per_second > 1)) return absl::Seconds(1);
  return std::max(absl::Milliseconds(50), absl::Seconds(1 / pace_per_second));
}

class PgBudgetStore : public BudgetStore {
 public:
  PgBudgetStore(std::string url, BudgetDefaults defaults, BudgetIsolation isolation,
                TxTimeouts timeouts)
      : pool_({std::move(url), isolation.connections,
               WithLockTimeout(timeouts, isolation.lock_timeout)}),
        defaults_(defaults), isolation_(isolation) {}

  absl::StatusOr<Grant> Acquire(const GrantRequest& r) override {
    return Run<Grant>("granting budget", r.group, [&](Connection& c) {
      Transaction tx(c);
      if (!r.recovery) {
        // Recoveries first across the group's senders (mailroom_budget_recovery_first): while
        // a recovery queued or leased to any of them waits to be sent, activations get no slot
        // of the group's pace.
        pqxx::result w = tx.exec_params(
            "SELECT waiting, pace_per_second FROM mailroom.mailroom_budget_recovery_first("
            "$1::text, $2::bigint, $3::int, $4::bigint, $5::int)",
            r.group, r.price_micros,
            static_cast<int>(absl::ToInt64Milliseconds(defaults_.grant_lease)),
            defaults_.monthly_budget_micros, defaults_.recovery_reserve_percent);
        if (!w.empty() && w[0][0].as<bool>()) {
          tx.commit();
          Grant g;
          g.pace_per_second = w[0][1].as<double>();
          g.retry_after = RecoveryFirstWait(g.pace_per_second);
          return g;
        }
      }
      pqxx::row row = tx.exec_params1(
          "SELECT coalesce(grant_id, 0), emails, "
          "       coalesce(EXTRACT(EPOCH FROM expires_at)::DOUBLE PRECISION, 0),"
          "       retry_after_ms, exhausted, pace_per_second"
          "  FROM mailroom.mailroom_budget_grant($1::text, $2::text, $3::int, $4::boolean, "
          "$5::bigint,"
          " $6::int, $7::bigint, $8::int)",
          r.group, r.holder, r.emails, r.recovery, r.price_micros,
          absl::ToInt64Milliseconds(defaults_.grant_lease), defaults_.monthly_budget_micros,
          defaults_.recovery_reserve_percent);
      tx.commit();
      Grant g;
      g.grant_id = row[0].as<uint64_t>();
      g.emails = row[1].as<int>();
      if (g.emails > 0) g.expires_at = absl::FromUnixMicros(row[2].as<double>() * 1e6);
      g.retry_after = absl::Milliseconds(row[3].as<int64_t>());
      g.exhausted = row[4].as<bool>();
      g.pace_per_second = row[5].as<double>();
      return g;
    });
  }

  absl::StatusOr<int> Return(const std::string& group, const std::string& holder, uint64_t grant_id,
                             int emails) override {
    return Run<int>("returning budget", group, [&](Connection& c) {
      Transaction tx(c);
      int n =
          tx.exec_params1(
                "SELECT mailroom.mailroom_budget_return($1::text, $2::text, $3::bigint, $4::int)",
                group, holder, grant_id, emails)[0]
              .as<int>();
      tx.commit();
      return n;
    });
  }

  absl::StatusOr<std::vector<BudgetRefund>> Refund() override {
    return Run<std::vector<BudgetRefund>>("refunding budget", "", [&](Connection& c) {
      Transaction tx(c);
      // The grant lease is the margin: a live sender never uses a grant after it, and it
      // covers the clocks of collectors and senders disagreeing by less than that.
      pqxx::result r = tx.exec_params(
          "SELECT group_name, holder, emails FROM mailroom.mailroom_budget_refund($1::int)",
          static_cast<int>(absl::ToInt64Milliseconds(defaults_.grant_lease)));
      tx.commit();
      std::vector<BudgetRefund> out;
      out.reserve(r.size());
      for (const auto& row : r) {
        out.push_back({row[0].as<std::string>(), row[1].as<std::string>(), row[2].as<int64_t>()});
      }
      return out;
    });
  }

  absl::StatusOr<GroupBudgetRow> Get(const std::string& group) override {
    return Run<GroupBudgetRow>("reading the budget", group, [&](Connection& c) {
      Transaction tx(c);
      return Read(tx, group);
    });
  }

  absl::StatusOr<GroupBudgetRow> Set(const BudgetSettings& s) override {
    return Run<GroupBudgetRow>(
        "setting the budget", s.group, [&](Connection& c) -> absl::StatusOr<GroupBudgetRow> {
          Transaction tx(c);
          pqxx::result g = tx.exec_params("SELECT id FROM consumer_groups WHERE name = $1",
                                          s.group);
          if (g.empty()) return NotFound(s.group);
          const int gid = g[0][0].as<int>();
          tx.exec_params("INSERT INTO group_budgets (group_id) VALUES ($1) ON CONFLICT DO NOTHING",
                         gid);
          // Each setting is kept unless given (a CASE per column keeps this one statement).
          tx.exec_params("UPDATE group_budgets SET"
                         "  monthly_budget_micros = CASE WHEN $2 THEN NULL WHEN $3 THEN $4::BIGINT"
                         "                               ELSE monthly_budget_micros END,"
                         "  recovery_reserve_percent = CASE WHEN $5 THEN NULL WHEN $6 THEN $7::INT"
                         "                                  ELSE recovery_reserve_percent END,"
                         "  burst = CASE WHEN $8 THEN $9::INT ELSE burst END, updated_at = now()"
                         " WHERE group_id = $1",
                         gid, s.default_budget, s.monthly_budget_micros.has_value(),
                         s.monthly_budget_micros.value_or(0), s.default_reserve,
                         s.recovery_reserve_percent.has_value(),
                         s.recovery_reserve_percent.value_or(0), s.burst.has_value(),
                         s.burst.value_or(1));
          absl::StatusOr<GroupBudgetRow> row = Read(tx, s.group);
          if (row.ok()) tx.commit();
          return row;
        });
  }

 private:
  static absl::Status NotFound(const std::string& group) {
    return absl::NotFoundError(absl::StrCat("unknown consumer group \"", group, "\""));
  }

  // The group's budget as Get shows it; kNotFound for an unknown group.
  absl::StatusOr<GroupBudgetRow> Read(Transaction& tx, const std::string& group) {
    pqxx::result r = tx.exec_params(kGetSql, group, defaults_.monthly_budget_micros,
                                    defaults_.recovery_reserve_percent);
    if (r.empty()) return NotFound(group);
    const pqxx::row& row = r[0];
    GroupBudgetRow b;
    b.group = group;
    b.month = row[0].as<std::string>();
    if (!row[1].is_null()) b.monthly_budget_micros = row[1].as<int64_t>();
    b.budget_is_default = row[2].as<bool>();
    b.recovery_reserve_percent = row[3].as<int>();
    b.reserve_is_default = row[4].as<bool>();
    b.burst = row[5].as<int>();
    b.committed_micros = row[6].as<int64_t>();
    b.granted_micros = row[7].as<int64_t>();
    b.returned_micros = row[8].as<int64_t>();
    b.spent_micros = row[9].as<int64_t>();
    b.sent = row[10].as<uint64_t>();
    b.outstanding_micros = row[11].as<int64_t>();
    b.pace_micros_per_second = row[12].as<double>();
    return b;
  }

  // Runs `fn` on a connection of the pool, at most one call of `group` at a time (none for
  // `group` ""). The turn and the connection are waited for until the lock timeout.
  template <typename T, typename Fn>
  absl::StatusOr<T> Run(const char* what, const std::string& group, Fn fn) {
    const absl::Time deadline = absl::Now() + isolation_.lock_timeout;
    if (!group.empty()) {
      absl::MutexLock lock(&mu_);
      auto free = [this, &group]() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // called under mu_
        return busy_.count(group) == 0;
      };
      if (!mu_.AwaitWithDeadline(absl::Condition(&free), deadline)) {
        return absl::UnavailableError(
            absl::StrCat(what, ": another budget call of group \"", group,
                         "\" has been waiting for a database lock; retry"));
      }
      busy_.insert(group);
    }
    absl::StatusOr<T> result = pool_.Run<T>(what, fn, deadline);
    if (!group.empty()) {
      absl::MutexLock lock(&mu_);
      busy_.erase(group);
    }
    return result;
  }

  Pool pool_;
  const BudgetDefaults defaults_;
  const BudgetIsolation isolation_;
  absl::Mutex mu_;
  std::set<std::string> busy_ ABSL_GUARDED_BY(mu_);  // groups with a call running
};

}  // namespace

std::unique_ptr<BudgetStore> NewPgBudgetStore(const std::string& url, BudgetDefaults defaults,
                                              BudgetIsolation isolation,
                                              const TxTimeouts& timeouts) {
  return std::make_unique<PgBudgetStore>(url, defaults, isolation, timeouts);
}

}  // namespace mailroom
