#include "collector/store.h"

#include <pqxx/pqxx>

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"

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

// The columns ToSuppression reads, in order.
constexpr char kSuppressionColumns[] =
    "s.address, s.reason, s.source, EXTRACT(EPOCH FROM s.first_seen)::BIGINT,"
    " EXTRACT(EPOCH FROM s.last_seen)::BIGINT,"
    " coalesce(EXTRACT(EPOCH FROM s.expires_at)::BIGINT, 0)";

SuppressionRow ToSuppression(const pqxx::row& row) {
  SuppressionRow s;
  s.address = row[0].as<std::string>();
  s.reason = row[1].as<std::string>();
  s.source = row[2].as<std::string>();
  s.first_seen = row[3].as<int64_t>();
  s.last_seen = row[4].as<int64_t>();
  s.expires_at = row[5].as<int64_t>();
  return s;
}

// Counts the SENT outcomes mailroom_ack recorded in the group's reputation. Their provider
// message ids are stored by mailroom_ack itself (migration 0021), so none are passed here.
void RecordSent(pqxx::transaction_base& tx, const std::string& group, const std::vector<JobResult>& results,
                const std::vector<uint64_t>& recorded) {
  absl::flat_hash_set<uint64_t> done(recorded.begin(), recorded.end());
  int64_t sent = 0;
  for (const JobResult& j : results) {
    if (j.kind == JobResult::Kind::kSent && done.count(j.id) > 0) ++sent;
  }
  if (sent == 0) return;
  tx.exec_params("SELECT mailroom.mailroom_record_sent($1::text, $2::bigint, '{}'::bigint[], '{}'::text[])", group, sent);
}

// Counts the outcomes other than SENT that mailroom_ack recorded as settled unsent for the
// holder `owner` is linked to (migration 0015; nothing when it is not linked).
void SettledUnsent(pqxx::transaction_base& tx, const std::string& group, const std::string& owner,
                   const std::vector<JobResult>& results,
                   const std::vector<uint64_t>& recorded) {
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
  tx.exec_params("SELECT mailroom.mailroom_budget_settled($1::text, $2::text, $3::int)", group, owner,
                 unsent);
}

class PgStore : public Store {
 public:
  PgStore(std::string url, int pool_size, const TxTimeouts& timeouts)
      : url_(std::move(url)),
        begin_(BeginCommand(timeouts)),
        statement_prefix_(StatementPrefix(timeouts)),
        slots_(pool_size) {}

  absl::StatusOr<std::string> Channel() override {
    return Run<std::string>("reading the channel", [this](pqxx::connection& c) {
      Work tx(c, begin_);
      return tx.exec1("SELECT channel FROM mailroom.mailroom_settings")[0].as<std::string>();
    });
  }

  absl::Status EnsureGroup(const std::string& group, bool from_earliest) override {
    return Run<bool>("creating the group",
                     [&](pqxx::connection& c) {
                       Work tx(c, begin_);
                       tx.exec_params("SELECT mailroom.mailroom_ensure_group($1::text, $2::boolean)", group,
                                      from_earliest);
                       tx.commit();
                       return true;
                     })
        .status();
  }

  absl::StatusOr<int> CollectSignups(int limit) override {
    return Run<int>("collecting signups", [&](pqxx::connection& c) {
      // Alone in autocommit: the tokens are committed when the dequeue after it takes its
      // snapshot.
      pqxx::nontransaction tx(c);
      return tx
          .exec1(absl::StrCat(statement_prefix_, "SELECT mailroom.mailroom_collect_signups(", limit,
                              "::int)"))[0]
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
                                                     const std::string& owner,
                                                     absl::Duration lease, bool recoveries_only) {
    return Run<std::vector<StoredJob>>("dequeue", [&](pqxx::connection& c) {
      // One statement in autocommit: one round trip, and no transaction (nor the group's row
      // lock) left open between round trips. mailroom_dequeue commits its transaction
      // asynchronously: a lost lease commit only means the jobs are handed out again (WAL is
      // sequential: a durable acknowledgement implies the dequeue before it is durable too).
      const std::string dequeue = absl::StrCat(
          "mailroom.mailroom_dequeue(", c.quote(group), "::text, ", limit, "::int, ", c.quote(owner),
          "::text, ", LeaseMs(lease), "::int, ", recoveries_only ? "true" : "false", ")");
      constexpr char kColumns[] =
          "job_id, action = 'password_recovery', email, login, secret, code, expires_at,"
          " account_id, attempt, failures, created_at, locale";
      // A subscription linked to a grant holder (migration 0015): the jobs handed are counted
      // in the dequeue's transaction, so a job is never in a sender's hands uncounted, and a
      // transaction that hands jobs commits synchronously, as the count bounds a refund of the
      // holder's grants and must not be lost with an asynchronous commit while the jobs are on
      // their way. The first dequeue after the link writes the count even with no job, to
      // register the link. The count is taken in the same statement: `h` is read by the
      // one-time filter, which runs before the jobs are returned, even when there are none.
      const Link link = LinkOf(owner);
      std::string query;
      if (link.holder.empty()) {
        query = absl::StrCat(statement_prefix_, "SELECT ", kColumns, " FROM ", dequeue);
      } else {
        query = absl::StrCat(
            statement_prefix_, "WITH d AS MATERIALIZED (SELECT * FROM ", dequeue, "),",
            " h AS MATERIALIZED (SELECT mailroom.mailroom_budget_handed(", c.quote(group), "::text, ",
            c.quote(owner), "::text, ", c.quote(link.holder), "::text, n),",
            "   set_config('synchronous_commit', CASE WHEN n > 0 THEN 'on' ELSE 'off' END, true)"
            "   FROM (SELECT count(*)::INT AS n FROM d) c WHERE n > 0 OR NOT ",
            link.registered ? "true" : "false", ")",
            " SELECT ", kColumns, " FROM d WHERE (SELECT count(*) FROM h) >= 0");
      }
      pqxx::nontransaction tx(c);
      pqxx::result r = tx.exec(query);
      if (!link.holder.empty() && !link.registered) MarkRegistered(owner);
      std::vector<StoredJob> jobs;
      jobs.reserve(r.size());
      for (const auto& row : r) {
        StoredJob j;
        j.id = row[0].as<uint64_t>();
        j.password_recovery = row[1].as<bool>();
        j.email = row[2].as<std::string>();
        j.login = row[3].as<std::string>();
        j.secret = pqxx::binarystring(row[4]).str();
        j.code = row[5].is_null() ? "" : row[5].as<std::string>();
        j.expires_at = row[6].as<int64_t>();
        j.account_id = row[7].as<uint64_t>();
        j.attempt = row[8].as<uint32_t>();
        j.failures = row[9].as<uint32_t>();
        j.created_at = row[10].as<int64_t>();
        j.locale = row[11].is_null() ? "" : row[11].as<std::string>();
        jobs.push_back(std::move(j));
      }
      return jobs;
    });
  }

  absl::StatusOr<std::vector<uint64_t>> Ack(const std::string& group, const std::string& owner,
                                            const std::vector<JobResult>& results) override {
    std::vector<uint64_t> ids;
    std::vector<uint32_t> attempts;
    // A SENT outcome with a provider message id keeps a deliveries row (migration 0021).
    std::vector<std::string> kinds, reasons, message_ids;
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
    }
    return Run<std::vector<uint64_t>>("acknowledge", [&](pqxx::connection& c) {
      Work tx(c, begin_);
      pqxx::result r = tx.exec_params(
          "SELECT * FROM mailroom.mailroom_ack($1::text, $2::text, $3::bigint[], $4::int[], $5::text[], $6::text[],"
          " $7::int[], $8::bigint[], $9::text[])",
          group, owner, IntArray(ids), IntArray(attempts), TextArray(kinds), TextArray(reasons),
          IntArray(retry), IntArray(costs), TextArray(message_ids));
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
    return Run<std::vector<uint64_t>>("renewing leases", [&](pqxx::connection& c) {
      Work tx(c, begin_);
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
    return Run<bool>("renewing leases",
                     [&](pqxx::connection& c) {
                       Work tx(c, begin_);
                       for (const char* table : {"deliveries", "lease_batches"}) {
                         tx.exec_params(
                             absl::StrCat("UPDATE ", table,
                                          " d SET due_at = now() + make_interval(secs => $3 / "
                                          "1000.0)"
                                          "  FROM consumer_groups g"
                                          " WHERE g.name = $1 AND d.group_id = g.id"
                                          "   AND d.owner = $2 AND d.state = 'leased'"),
                             group, owner, LeaseMs(lease));
                       }
                       tx.commit();
                       return true;
                     })
        .status();
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
    return Run<bool>("marking a subscriber's leases",
                     [&](pqxx::connection& c) {
                       Work tx(c, begin_);
                       tx.exec_params("SELECT mailroom.mailroom_holder_left($1::text, $2::text)", group, owner);
                       tx.commit();
                       return true;
                     })
        .status();
  }

  absl::Status Release(const std::string& group, const std::string& owner,
                       const std::vector<uint64_t>& ids) override {
    return Run<bool>("releasing leases",
                     [&](pqxx::connection& c) {
                       Work tx(c, begin_);
                       const int released =
                           tx.exec_params1("SELECT mailroom.mailroom_release($1::text, $2::text, $3::bigint[])", group,
                                           owner, IntArray(ids))[0]
                               .as<int>();
                       if (released > 0) {
                         tx.exec_params("SELECT mailroom.mailroom_budget_settled($1::text, $2::text, $3::int)", group,
                                        owner, released);
                       }
                       tx.commit();
                       return true;
                     })
        .status();
  }

  absl::StatusOr<std::vector<std::string>> GroupNames() override {
    return Run<std::vector<std::string>>("reading the groups", [](pqxx::connection& c) {
      pqxx::nontransaction tx(c);
      std::vector<std::string> out;
      for (const auto& row : tx.exec("SELECT name FROM mailroom.consumer_groups ORDER BY name")) {
        out.push_back(row[0].as<std::string>());
      }
      return out;
    });
  }

  absl::StatusOr<std::vector<GroupStatsRow>> Stats(const std::string& group) override {
    return Run<std::vector<GroupStatsRow>>("reading stats", [&](pqxx::connection& c) {
      Work tx(c, begin_);
      std::vector<GroupStatsRow> out;
      for (const auto& row : tx.exec_params("SELECT * FROM mailroom.mailroom_stats($1::text)", group)) {
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
    return Run<std::vector<FailureRow>>("listing failures", [&](pqxx::connection& c) {
      Work tx(c, begin_);
      std::vector<FailureRow> out;
      for (const auto& row : tx.exec_params(
               "SELECT d.token_id, t.action = 'password_recovery', coalesce(a.email, ''),"
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
        f.password_recovery = !row[1].is_null() && row[1].as<bool>();
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
    return Run<int>("requeueing", [&](pqxx::connection& c) {
      Work tx(c, begin_);
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
    return Run<UsageRow>("reading usage", [&](pqxx::connection& c) {
      Work tx(c, begin_);
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

  absl::StatusOr<std::vector<SuppressionRow>> ListSuppressions(
      const SuppressionQuery& q) override {
    return Run<std::vector<SuppressionRow>>("listing suppressions", [&](pqxx::connection& c) {
      Work tx(c, begin_);
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
      for (const auto& row : r) out.push_back(ToSuppression(row));
      return out;
    });
  }

  absl::StatusOr<SuppressionRow> AddSuppression(const SuppressionRow& in) override {
    return Run<SuppressionRow>("adding a suppression", [&](pqxx::connection& c) {
      Work tx(c, begin_);
      pqxx::row row = tx.exec_params1(
          "INSERT INTO suppressions AS s (address, reason, source, expires_at)"
          " VALUES (lower(trim($1)), $2, $3, CASE WHEN $4::bigint = 0 THEN NULL ELSE to_timestamp($4::bigint) END)"
          " ON CONFLICT (address) DO UPDATE"
          "   SET reason = EXCLUDED.reason, source = EXCLUDED.source,"
          "       expires_at = EXCLUDED.expires_at, last_seen = now()"
          " RETURNING " + std::string(kSuppressionColumns),
          in.address, in.reason, in.source, in.expires_at);
      tx.commit();
      return ToSuppression(row);
    });
  }

  absl::StatusOr<SuppressionRow> RemoveSuppression(const std::string& address) override {
    auto removed = Run<std::optional<SuppressionRow>>(
        "removing a suppression", [&](pqxx::connection& c) -> std::optional<SuppressionRow> {
          Work tx(c, begin_);
          pqxx::result r = tx.exec_params(
              "DELETE FROM suppressions s WHERE s.address = lower(trim($1))"
              " RETURNING " + std::string(kSuppressionColumns),
              address);
          tx.commit();
          if (r.empty()) return std::nullopt;
          return ToSuppression(r[0]);
        });
    if (!removed.ok()) return removed.status();
    if (!removed->has_value()) {
      return absl::NotFoundError(absl::StrCat("\"", address, "\" is not suppressed"));
    }
    return **std::move(removed);
  }

  absl::Status Ping() override {
    return Run<bool>("health check",
                     [](pqxx::connection& c) {
                       pqxx::nontransaction tx(c);
                       tx.exec("SELECT 1");
                       return true;
                     })
        .status();
  }

 private:
  struct Slot {
    absl::Mutex mu;
    std::unique_ptr<pqxx::connection> conn;
  };

  // Runs `fn` on a pooled connection, translating libpqxx's exceptions into a Status.
  template <typename T, typename Fn>
  absl::StatusOr<T> Run(const char* what, Fn fn) {
    Slot* slot = Acquire();
    absl::StatusOr<T> result = absl::UnknownError("not run");
    try {
      if (slot->conn == nullptr || !slot->conn->is_open()) {
        slot->conn = std::make_unique<pqxx::connection>(url_);
      }
      result = fn(*slot->conn);
    } catch (const pqxx::broken_connection& e) {
      slot->conn.reset();
      result = absl::UnavailableError(absl::StrCat(what, ": database connection lost: ", e.what()));
    } catch (const pqxx::sql_error& e) {
      const std::string& state = e.sqlstate();
      // Class 08 (connection), 57 (operator intervention: shutdown, terminated backend),
      // 40 (serialization/deadlock) and 53 (resources) are worth retrying.
      bool transient = state.rfind("08", 0) == 0 || state.rfind("57", 0) == 0 ||
                       state.rfind("40", 0) == 0 || state.rfind("53", 0) == 0;
      if (transient || slot->conn == nullptr || !slot->conn->is_open()) {
        slot->conn.reset();
        result = absl::UnavailableError(absl::StrCat(what, ": ", e.what()));
      } else if (state == "P0002") {
        result = absl::NotFoundError(absl::StrCat(what, ": ", e.what()));
      } else {
        result = absl::FailedPreconditionError(absl::StrCat(what, ": ", e.what()));
      }
    } catch (const std::exception& e) {
      slot->conn.reset();
      result = absl::UnavailableError(absl::StrCat(what, ": ", e.what()));
    }
    slot->mu.Unlock();
    return result;
  }

  // A free slot if there is one, else waits for the next one in turn. Returned locked.
  Slot* Acquire() {
    for (Slot& s : slots_) {
      if (s.mu.TryLock()) return &s;
    }
    Slot* s = &slots_[next_.fetch_add(1) % slots_.size()];
    s->mu.Lock();
    return s;
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

  const std::string url_;
  const std::string begin_;  // BeginCommand: every transaction's timeouts
  const std::string statement_prefix_;  // StatementPrefix: a lone statement's timeouts
  std::vector<Slot> slots_;
  std::atomic<size_t> next_{0};
  absl::Mutex links_mu_;
  absl::flat_hash_map<std::string, Link> links_ ABSL_GUARDED_BY(links_mu_);
};

}  // namespace

std::unique_ptr<Store> NewPgStore(const std::string& url, int pool_size,
                                  const TxTimeouts& timeouts) {
  return std::make_unique<PgStore>(url, pool_size < 1 ? 1 : pool_size, timeouts);
}

}  // namespace mailroom
