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
        if (!w.empty() && w[0]["waiting"].as<bool>()) {
          tx.commit();
          Grant g;
          g.pace_per_second = w[0]["pace_per_second"].as<double>();
          g.retry_after = RecoveryFirstWait(g.pace_per_second);
          return g;
        }
      }
      pqxx::row row = tx.exec_params1(
          "SELECT coalesce(grant_id, 0) AS grant_id, emails,"
          "       coalesce(EXTRACT(EPOCH FROM expires_at)::DOUBLE PRECISION, 0) AS expires_at,"
          "       retry_after_ms, exhausted, pace_per_second"
          "  FROM mailroom.mailroom_budget_grant($1::text, $2::text, $3::int, $4::boolean, "
          "$5::bigint,"
          " $6::int, $7::bigint, $8::int)",
          r.group, r.holder, r.emails, r.recovery, r.price_micros,
          absl::ToInt64Milliseconds(defaults_.grant_lease), defaults_.monthly_budget_micros,
          defaults_.recovery_reserve_percent);
      tx.commit();
      Grant g;
      g.grant_id = row["grant_id"].as<uint64_t>();
      g.emails = row["emails"].as<int>();
      if (g.emails > 0) g.expires_at = absl::FromUnixMicros(row["expires_at"].as<double>() * 1e6);
      g.retry_after = absl::Milliseconds(row["retry_after_ms"].as<int64_t>());
      g.exhausted = row["exhausted"].as<bool>();
      g.pace_per_second = row["pace_per_second"].as<double>();
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
        out.push_back({row["group_name"].as<std::string>(), row["holder"].as<std::string>(),
                       row["emails"].as<int64_t>()});
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
          const bool found =
              tx.exec_params1("SELECT mailroom.mailroom_set_group_budget($1::text, $2::boolean,"
                              " $3::bigint, $4::boolean, $5::int, $6::int)",
                              s.group, s.default_budget, s.monthly_budget_micros, s.default_reserve,
                              s.recovery_reserve_percent, s.burst)[0]
                  .as<bool>();
          if (!found) return NotFound(s.group);
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
    pqxx::result r = tx.exec_params(
        "SELECT * FROM mailroom.mailroom_group_budget($1::text, $2::bigint, $3::int)", group,
        defaults_.monthly_budget_micros, defaults_.recovery_reserve_percent);
    if (r.empty()) return NotFound(group);
    const pqxx::row& row = r[0];
    GroupBudgetRow b;
    b.group = group;
    b.month = row["month"].as<std::string>();
    if (!row["budget_micros"].is_null())
      b.monthly_budget_micros = row["budget_micros"].as<int64_t>();
    b.budget_is_default = row["budget_is_default"].as<bool>();
    b.recovery_reserve_percent = row["reserve_percent"].as<int>();
    b.reserve_is_default = row["reserve_is_default"].as<bool>();
    b.burst = row["burst"].as<int>();
    b.committed_micros = row["committed_micros"].as<int64_t>();
    b.granted_micros = row["granted_micros"].as<int64_t>();
    b.returned_micros = row["returned_micros"].as<int64_t>();
    b.spent_micros = row["spent_micros"].as<int64_t>();
    b.sent = row["sent"].as<uint64_t>();
    b.outstanding_micros = row["outstanding_micros"].as<int64_t>();
    b.pace_micros_per_second = row["pace_micros_per_second"].as<double>();
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
