#include "collector/store/store.h"

#include <pqxx/pqxx>

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "collector/db/pool.h"
#include "collector/store/suppression_row.h"

namespace mailroom {
namespace {

// An array literal of integers for a bigint[] parameter.
template <typename T>
std::string IntArray(const std::vector<T>& v) {
  return absl::StrCat("{", absl::StrJoin(v, ","), "}");
}

// Parses "{1,2,3}" as returned for a bigint[] column.
std::vector<uint64_t> ParseIds(const pqxx::result& r) {
  std::vector<uint64_t> ids;
  ids.reserve(r.size());
  for (const auto& row : r) ids.push_back(row[0].as<uint64_t>());
  return ids;
}

const char* KindName(JobResult::Kind k) {
  switch (k) {
    case JobResult::Kind::kSent: return "sent";
    case JobResult::Kind::kFailed: return "failed";
    case JobResult::Kind::kExpired: return "expired";
    case JobResult::Kind::kRetry: return "retry";
    case JobResult::Kind::kDefer: return "defer";
  }
  return "failed";
}

int64_t LeaseMs(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

// Counts the SENT outcomes mailroom_ack recorded in the group's reputation. Their provider
// message ids are stored by mailroom_ack itself, so none are passed here.
void RecordSent(Transaction& tx, const std::string& group, const std::vector<JobResult>& results,
                const std::vector<uint64_t>& recorded) {
  absl::flat_hash_set<uint64_t> done(recorded.begin(), recorded.end());
  int64_t sent = 0;
  for (const JobResult& j : results) {
    if (j.kind == JobResult::Kind::kSent && done.count(j.id) > 0) ++sent;
  }
  if (sent == 0) return;
  tx.exec_params(
      "SELECT mailroom.mailroom_record_sent($1::text, $2::bigint, '{}'::bigint[], '{}'::text[])",
      group, sent);
}

// Counts the outcomes other than SENT that mailroom_ack recorded as settled unsent for the
// holder `owner` is linked to (mailroom_budget_settled; nothing when it is not linked).
void SettledUnsent(Transaction& tx, const std::string& group, const std::string& owner,
                   const std::vector<JobResult>& results, const std::vector<uint64_t>& recorded) {
  const bool any_unsent = std::any_of(results.begin(), results.end(), [](const JobResult& j) {
    return j.kind != JobResult::Kind::kSent;
  });
  if (recorded.empty() || !any_unsent) return;  // the drain's common case: all SENT
  absl::flat_hash_set<uint64_t> done(recorded.begin(), recorded.end());
  int unsent = 0;
  for (const JobResult& j : results) {
    if (j.kind != JobResult::Kind::kSent && done.count(j.id) > 0) ++unsent;
  }
  if (unsent == 0) return;
  tx.exec_params("SELECT mailroom.mailroom_budget_settled($1::text, $2::text, $3::int)", group,
                 owner, unsent);
}

class PgStore : public Store {
 public:
  PgStore(std::string url, int pool_size, const TxTimeouts& timeouts,
          std::optional<int64_t> default_budget_micros)
      : pool_({std::move(url), pool_size, timeouts}),
        default_budget_(default_budget_micros.has_value()
                            ? absl::StrCat(*default_budget_micros, "::bigint")
                            : std::string("NULL::bigint")) {}

  absl::StatusOr<std::string> Channel() override {
    return pool_.Run<std::string>("reading the channel", [this](Connection& c) {
      Transaction tx(c);
      return tx.exec1("SELECT channel FROM mailroom.mailroom_settings")[0].as<std::string>();
    });
  }

  absl::Status EnsureGroup(const std::string& group, bool from_earliest) override {
    return RunCommitted("creating the group",
                        "SELECT mailroom.mailroom_ensure_group($1::text, $2::boolean)", group,
                        from_earliest);
  }

  absl::StatusOr<int> CollectSignups(int limit) override {
    return pool_.Run<int>("collecting signups", [&](Connection& c) {
      // Alone in autocommit: the tokens are committed when the dequeue after it takes its
      // snapshot.
      return c.ExecAlone(absl::StrCat("SELECT mailroom.mailroom_collect_signups(", limit, "::int)"))
          .at(0)
          .at(0)
          .as<int>();
    });
  }

  absl::StatusOr<std::vector<StoredJob>> Dequeue(const std::string& group, int limit,
                                                 const std::string& owner,
                                                 absl::Duration lease) override {
    return DequeueJobs(group, limit, owner, lease, /*recoveries_only=*/false);
  }

  absl::StatusOr<std::vector<StoredJob>> DequeueRecoveries(const std::string& group, int limit,
                                                           const std::string& owner,
                                                           absl::Duration lease) override {
    return DequeueJobs(group, limit, owner, lease, /*recoveries_only=*/true);
  }

  absl::StatusOr<std::vector<StoredJob>> DequeueJobs(const std::string& group, int limit,
                                                     const std::string& owner, absl::Duration lease,
                                                     bool recoveries_only) {
    return pool_.Run<std::vector<StoredJob>>("dequeue", [&](Connection& c) {
      // One statement in autocommit: one round trip, and no transaction (nor the group's row
      // lock) left open between round trips. mailroom_dequeue commits its transaction
      // asynchronously: a lost lease commit only means the jobs are handed out again (WAL is
      // sequential: a durable acknowledgement implies the dequeue before it is durable too).
      const std::string dequeue = absl::StrCat("mailroom.mailroom_dequeue(", c.Quote(group),
                                               "::text, ", limit, "::int, ", c.Quote(owner),
                                               "::text, ", LeaseMs(lease), "::int, ",
                                               recoveries_only ? "true" : "false", ", ",
                                               default_budget_, ")");
      constexpr char kColumns[] = "job_id, action, email, login, secret, code, expires_at,"
                                  " account_id, attempt, failures, created_at, locale, priority";
      // A subscription linked to a grant holder (mailroom_budget_handed): the jobs handed are
      // counted in the dequeue's transaction, so a job is never in a sender's hands uncounted, and
      // a transaction that hands jobs commits synchronously, as the count bounds a refund of the
      // holder's grants and must not be lost with an asynchronous commit while the jobs are on
      // their way. The first dequeue after the link writes the count even with no job, to
      // register the link. The count is taken in the same statement: `h` is read by the
      // one-time filter, which runs before the jobs are returned, even when there are none.
      const Link link = LinkOf(owner);
      std::string query;
      if (link.holder.empty()) {
        query = absl::StrCat("SELECT ", kColumns, " FROM ", dequeue);
      } else {
        query = absl::StrCat(
            "WITH d AS MATERIALIZED (SELECT * FROM ", dequeue, "),",
            " h AS MATERIALIZED (SELECT mailroom.mailroom_budget_handed(", c.Quote(group),
            "::text, ", c.Quote(owner), "::text, ", c.Quote(link.holder), "::text, n),",
            "   set_config('synchronous_commit', CASE WHEN n > 0 THEN 'on' ELSE 'off' END, true)"
            "   FROM (SELECT count(*)::INT AS n FROM d) c WHERE n > 0 OR NOT ",
            link.registered ? "true" : "false", ")", " SELECT ", kColumns,
            " FROM d WHERE (SELECT count(*) FROM h) >= 0");
      }
      pqxx::result r = c.ExecAlone(query);
      if (!link.holder.empty() && !link.registered) MarkRegistered(owner);
      std::vector<StoredJob> jobs;
      jobs.reserve(r.size());
      for (const auto& row : r) {
        StoredJob j;
        j.id = row[0].as<uint64_t>();
        j.action = row[1].as<std::string>();
        j.email = row[2].as<std::string>();
        j.login = row[3].as<std::string>();
        j.secret = row[4].is_null() ? "" : pqxx::binarystring(row[4]).str();
        j.code = row[5].is_null() ? "" : row[5].as<std::string>();
        j.expires_at = row[6].as<int64_t>();
        j.account_id = row[7].as<uint64_t>();
        j.attempt = row[8].as<uint32_t>();
        j.failures = row[9].as<uint32_t>();
        j.created_at = row[10].as<int64_t>();
        j.locale = row[11].is_null() ? "" : row[11].as<std::string>();
        const std::string priority = row[12].as<std::string>();
        j.critical = priority == "critical";
        j.notice = priority == "notice";
        jobs.push_back(std::move(j));
      }
      return jobs;
    });
  }

  absl::StatusOr<std::vector<uint64_t>> Ack(const std::string& group, const std::string& owner,
                                            const std::vector<JobResult>& results) override {
    std::vector<uint64_t> ids;
    std::vector<uint32_t> attempts;
    // A SENT outcome with a provider message id keeps a deliveries row (a plain SENT only its lease
    // batch's bit).
    std::vector<std::string> kinds, reasons, message_ids, providers;
    std::vector<uint32_t> retry;
    std::vector<int64_t> costs;
    bool suppress = false;
    for (const JobResult& r : results) {
      suppress = suppress || r.suppress_recipient;
      ids.push_back(r.id);
      attempts.push_back(r.attempt);
      kinds.push_back(KindName(r.kind));
      reasons.push_back(r.reason);
      retry.push_back(r.retry_after_ms);
      costs.push_back(r.cost_micros);
      message_ids.push_back(r.kind == JobResult::Kind::kSent ? r.provider_message_id : "");
      providers.push_back(r.kind == JobResult::Kind::kSent ? r.provider : "");
    }
    return pool_.Run<std::vector<uint64_t>>("acknowledge", [&](Connection& c) {
      Transaction tx(c);
      pqxx::result r = tx.exec_params("SELECT * FROM mailroom.mailroom_ack($1::text, $2::text, "
                                      "$3::bigint[], $4::int[], $5::text[], $6::text[],"
                                      " $7::int[], $8::bigint[], $9::text[], $10::text[])",
                                      group, owner, IntArray(ids), IntArray(attempts),
                                      TextArray(kinds), TextArray(reasons), IntArray(retry),
                                      IntArray(costs), TextArray(message_ids),
                                      TextArray(providers));
      std::vector<uint64_t> recorded = ParseIds(r);
      // Only outcomes mailroom_ack recorded (it fences by owner and hand-out count) suppress their
      // address, in the same transaction: a stale lease's report changes nothing.
      if (suppress) {
        absl::flat_hash_set<uint64_t> done(recorded.begin(), recorded.end());
        std::vector<uint64_t> sids;
        std::vector<std::string> sources;
        for (const JobResult& j : results) {
          if (j.suppress_recipient && done.count(j.id) > 0) {
            sids.push_back(j.id);
            sources.push_back(j.reason);
          }
        }
        if (!sids.empty()) {
          tx.exec_params("SELECT mailroom.mailroom_suppress_recipients($1::bigint[], $2::text[])",
                         IntArray(sids), TextArray(sources));
        }
      }
      RecordSent(tx, group, results, recorded);
      SettledUnsent(tx, group, owner, results, recorded);
      tx.commit();
      return recorded;
    });
  }

  absl::StatusOr<std::vector<uint64_t>> Renew(const std::string& group, const std::string& owner,
                                              const std::vector<uint64_t>& ids,
                                              const std::vector<uint32_t>& attempts,
                                              absl::Duration lease) override {
    return pool_.Run<std::vector<uint64_t>>("renewing leases", [&](Connection& c) {
      Transaction tx(c);
      pqxx::result r = tx.exec_params(
          "SELECT * FROM mailroom.mailroom_renew($1::text, $2::text, $3::bigint[],"
          " NULLIF($4::int[], '{}'), $5::int)",
          group, owner, IntArray(ids), IntArray(attempts), LeaseMs(lease));
      tx.commit();
      return ParseIds(r);
    });
  }

  absl::Status RenewAll(const std::string& group, const std::string& owner,
                        absl::Duration lease) override {
    return pool_.Do("renewing leases", [&](Connection& c) {
      Transaction tx(c);
      for (const char* table : {"deliveries", "lease_batches"}) {
        tx.exec_params(absl::StrCat("UPDATE ", table,
                                    " d SET due_at = now() + make_interval(secs => $3 / 1000.0)"
                                    "  FROM consumer_groups g"
                                    " WHERE g.name = $1 AND d.group_id = g.id"
                                    "   AND d.owner = $2 AND d.state = 'leased'"),
                       group, owner, LeaseMs(lease));
      }
      tx.commit();
    });
  }

  void LinkHolder(const std::string& /*group*/, const std::string& owner,
                  const std::string& holder) override {
    absl::MutexLock lock(&links_mu_);
    links_[owner] = Link{holder, false};
  }

  absl::Status HolderLeft(const std::string& group, const std::string& owner) override {
    {
      // No dequeue follows for a departed subscription (the dispatcher removed it first).
      absl::MutexLock lock(&links_mu_);
      links_.erase(owner);
    }
    return RunCommitted("marking a subscriber's leases",
                        "SELECT mailroom.mailroom_holder_left($1::text, $2::text)", group, owner);
  }

  absl::Status Release(const std::string& group, const std::string& owner,
                       const std::vector<uint64_t>& ids) override {
    return pool_.Do("releasing leases", [&](Connection& c) {
      Transaction tx(c);
      const int released =
          tx.exec_params1("SELECT mailroom.mailroom_release($1::text, $2::text, $3::bigint[])",
                          group, owner, IntArray(ids))[0]
              .as<int>();
      if (released > 0) {
        tx.exec_params("SELECT mailroom.mailroom_budget_settled($1::text, $2::text, $3::int)",
                       group, owner, released);
      }
      tx.commit();
    });
  }

  absl::StatusOr<std::vector<std::string>> GroupNames() override {
    return pool_.Run<std::vector<std::string>>("reading the groups", [](Connection& c) {
      std::vector<std::string> out;
      for (const auto& row :
           c.ExecAlone("SELECT name FROM mailroom.consumer_groups ORDER BY name")) {
        out.push_back(row[0].as<std::string>());
      }
      return out;
    });
  }

  absl::StatusOr<std::vector<GroupStatsRow>> Stats(const std::string& group) override {
    return pool_.Run<std::vector<GroupStatsRow>>("reading stats", [&](Connection& c) {
      Transaction tx(c);
      std::vector<GroupStatsRow> out;
      for (const auto& row :
           tx.exec_params("SELECT * FROM mailroom.mailroom_stats($1::text)", group)) {
        GroupStatsRow s;
        s.group = row[0].as<std::string>();
        s.depth = row[1].as<uint64_t>();
        s.lag_seconds = row[2].as<double>();
        s.in_flight = row[3].as<uint64_t>();
        s.waiting_retry = row[4].as<uint64_t>();
        s.sent = row[5].as<uint64_t>();
        s.failed = row[6].as<uint64_t>();
        s.expired = row[7].as<uint64_t>();
        s.cancelled = row[8].as<uint64_t>();
        s.superseded = row[9].as<uint64_t>();
        s.rate_limited = row[10].as<uint64_t>();
        s.suppressed = row[11].as<uint64_t>();
        out.push_back(std::move(s));
      }
      return out;
    });
  }

  absl::StatusOr<std::vector<FailureRow>> Failures(const std::string& group, int limit) override {
    return pool_.Run<std::vector<FailureRow>>("listing failures", [&](Connection& c) {
      Transaction tx(c);
      std::vector<FailureRow> out;
      for (const auto& row :
           tx.exec_params("SELECT d.token_id, coalesce(t.action, ''),"
                          "       coalesce(t.to_address, a.email, ''),"
                          "       coalesce(d.reason, ''), d.attempts,"
                          "       EXTRACT(EPOCH FROM d.updated_at)::BIGINT"
                          "  FROM deliveries d JOIN consumer_groups g ON g.id = d.group_id"
                          "  LEFT JOIN tokens t ON t.id = d.token_id"
                          "  LEFT JOIN accounts a ON a.id = t.account"
                          " WHERE g.name = $1 AND d.state = 'failed'"
                          " ORDER BY d.updated_at DESC, d.token_id DESC LIMIT $2",
                          group, limit)) {
        FailureRow f;
        f.id = row[0].as<uint64_t>();
        f.action = row[1].as<std::string>();
        f.email = row[2].as<std::string>();
        f.reason = row[3].as<std::string>();
        f.attempts = row[4].as<uint32_t>();
        f.failed_at = row[5].as<int64_t>();
        out.push_back(std::move(f));
      }
      return out;
    });
  }

  absl::StatusOr<int> Requeue(const std::string& group, const std::vector<uint64_t>& ids) override {
    return pool_.Run<int>("requeueing", [&](Connection& c) {
      Transaction tx(c);
      pqxx::result r = tx.exec_params(
          "UPDATE deliveries d SET state = 'retry', due_at = now(), failures = 0,"
          "       lost_leases = 0, reason = NULL, updated_at = now()"
          "  FROM consumer_groups g"
          " WHERE g.name = $1 AND d.group_id = g.id AND d.state = 'failed'"
          "   AND ($2 OR d.token_id = ANY ($3::bigint[]))",
          group, ids.empty(), IntArray(ids));
      tx.commit();
      return static_cast<int>(r.affected_rows());
    });
  }

  absl::StatusOr<UsageRow> Usage(const std::string& group) override {
    return pool_.Run<UsageRow>("reading usage", [&](Connection& c) {
      Transaction tx(c);
      pqxx::row row = tx.exec_params1(
          "SELECT to_char(date_trunc('month', now() AT TIME ZONE 'UTC'), 'YYYY-MM'),"
          "       coalesce(u.sent, 0), coalesce(u.cost_micros, 0)"
          "  FROM (SELECT 1) one"
          "  LEFT JOIN consumer_groups g ON g.name = $1"
          "  LEFT JOIN group_usage u ON u.group_id = g.id"
          "   AND u.month = date_trunc('month', now() AT TIME ZONE 'UTC')::DATE",
          group);
      UsageRow u;
      u.month = row[0].as<std::string>();
      u.sent = row[1].as<uint64_t>();
      u.cost_micros = row[2].as<int64_t>();
      return u;
    });
  }

  absl::StatusOr<std::vector<SuppressionRow>> ListSuppressions(const SuppressionQuery& q) override {
    return pool_.Run<std::vector<SuppressionRow>>("listing suppressions", [&](Connection& c) {
      Transaction tx(c);
      // A range scan of the primary key from the page token; the prefix is a range too
      // (address >= prefix), checked with starts_with (no LIKE escaping of the prefix).
      pqxx::result r = tx.exec_params(
          "SELECT " + std::string(kSuppressionColumns) +
              "  FROM suppressions s"
              " WHERE s.address > $1 AND s.address >= $3"
              "   AND ($2 = '' OR s.reason = $2) AND starts_with(s.address, $3)"
              " ORDER BY s.address LIMIT $4",
          q.after, q.reason, q.prefix, q.limit);
      std::vector<SuppressionRow> out;
      out.reserve(r.size());
      for (const auto& row : r) out.push_back(SuppressionFromRow(row));
      return out;
    });
  }

  absl::StatusOr<SuppressionRow> AddSuppression(const SuppressionRow& in) override {
    return pool_.Run<SuppressionRow>("adding a suppression", [&](Connection& c) {
      Transaction tx(c);
      pqxx::row row = tx.exec_params1(
          "INSERT INTO suppressions AS s (address, reason, source, expires_at)"
          " VALUES (lower(trim($1)), $2, $3, CASE WHEN $4::bigint = 0 THEN NULL ELSE "
          "to_timestamp($4::bigint) END)"
          " ON CONFLICT (address) DO UPDATE"
          "   SET reason = EXCLUDED.reason, source = EXCLUDED.source,"
          "       expires_at = EXCLUDED.expires_at, last_seen = now()"
          " RETURNING " +
              std::string(kSuppressionColumns),
          in.address, in.reason, in.source, in.expires_at);
      tx.commit();
      return SuppressionFromRow(row);
    });
  }

  absl::StatusOr<SuppressionRow> RemoveSuppression(const std::string& address) override {
    auto removed = pool_.Run<std::optional<SuppressionRow>>(
        "removing a suppression", [&](Connection& c) -> std::optional<SuppressionRow> {
          Transaction tx(c);
          pqxx::result r = tx.exec_params(
              "DELETE FROM suppressions s WHERE s.address = lower(trim($1))"
              " RETURNING " +
                  std::string(kSuppressionColumns),
              address);
          tx.commit();
          if (r.empty()) return std::nullopt;
          return SuppressionFromRow(r[0]);
        });
    if (!removed.ok()) return removed.status();
    if (!removed->has_value()) {
      return absl::NotFoundError(absl::StrCat("\"", address, "\" is not suppressed"));
    }
    return **std::move(removed);
  }

  absl::Status Ping() override {
    return pool_.Do("health check", [](Connection& c) { c.ExecAlone("SELECT 1"); });
  }

 private:
  // Runs `sql` with `args` in a transaction of its own and commits it.
  template <typename... Args>
  absl::Status RunCommitted(const char* what, const std::string& sql, const Args&... args) {
    return pool_.Do(what, [&](Connection& c) {
      Transaction tx(c);
      tx.exec_params(sql, args...);
      tx.commit();
    });
  }

  // A subscription's link to a grant holder (LinkHolder); `registered`: its counter row
  // exists (the first dequeue after the link writes it, even with no job).
  struct Link {
    std::string holder;  // "" when not linked
    bool registered = false;
  };

  Link LinkOf(const std::string& owner) {
    absl::MutexLock lock(&links_mu_);
    auto it = links_.find(owner);
    return it == links_.end() ? Link{} : it->second;
  }

  void MarkRegistered(const std::string& owner) {
    absl::MutexLock lock(&links_mu_);
    auto it = links_.find(owner);
    if (it != links_.end()) it->second.registered = true;
  }

  Pool pool_;
  const std::string default_budget_;  // the dequeue's p_default_budget, as SQL
  absl::Mutex links_mu_;
  absl::flat_hash_map<std::string, Link> links_ ABSL_GUARDED_BY(links_mu_);
};

}  // namespace

std::unique_ptr<Store> NewPgStore(const std::string& url, int pool_size, const TxTimeouts& timeouts,
                                  std::optional<int64_t> default_budget_micros) {
  return std::make_unique<PgStore>(url, pool_size < 1 ? 1 : pool_size, timeouts,
                                   default_budget_micros);
}

}  // namespace mailroom
