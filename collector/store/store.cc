#include "collector/store/store.h"

#include <pqxx/pqxx>

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "collector/db/pool.h"

namespace mailroom {
namespace {

// The ids of a function that returns a set of them, read as `AS r(id)`.
std::vector<uint64_t> ParseIds(const pqxx::result& r) {
  std::vector<uint64_t> ids;
  ids.reserve(r.size());
  for (const auto& row : r) ids.push_back(row["id"].as<uint64_t>());
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

// A row of mailroom_dequeue's, by column name.
StoredJob JobFromRow(const pqxx::row& row) {
  StoredJob j;
  j.id = row["job_id"].as<uint64_t>();
  j.action = row["action"].as<std::string>();
  j.email = row["email"].as<std::string>();
  j.login = row["login"].as<std::string>();
  j.secret = row["secret"].is_null() ? "" : pqxx::binarystring(row["secret"]).str();
  j.code = row["code"].is_null() ? "" : row["code"].as<std::string>();
  j.expires_at = row["expires_at"].as<int64_t>();
  j.account_id = row["account_id"].as<uint64_t>();
  j.attempt = row["attempt"].as<uint32_t>();
  j.failures = row["failures"].as<uint32_t>();
  j.created_at = row["created_at"].as<int64_t>();
  j.locale = row["locale"].is_null() ? "" : row["locale"].as<std::string>();
  const std::string priority = row["priority"].as<std::string>();
  j.critical = priority == "critical";
  j.notice = priority == "notice";
  return j;
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
      : pool_({std::move(url), pool_size, timeouts}), default_budget_(default_budget_micros) {}

  absl::StatusOr<std::string> Channel() override {
    return pool_.Run<std::string>("reading the channel", [this](Connection& c) {
      return c.CallAlone("mailroom_channel", {}).at(0)["mailroom_channel"].as<std::string>();
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
      return c.CallAlone("mailroom_collect_signups", {int32_t{limit}})
          .at(0)["mailroom_collect_signups"]
          .as<int>();
    });
  }

  absl::StatusOr<std::vector<StoredJob>> Dequeue(const DequeueRequest& q) override {
    return pool_.Run<std::vector<StoredJob>>("dequeue", [&](Connection& c) {
      // One statement in autocommit: one round trip, and no transaction (nor the group's row
      // lock) left open between round trips. mailroom_dequeue commits its transaction
      // asynchronously: a lost lease commit only means the jobs are handed out again (WAL is
      // sequential: a durable acknowledgement implies the dequeue before it is durable too).
      // For a subscription with a budget holder, mailroom_dequeue_for_holder counts the jobs
      // handed in the same statement and commits synchronously when it hands any.
      const int32_t lease_ms = static_cast<int32_t>(LeaseMs(q.lease));
      pqxx::result r = q.holder.empty() ? c.CallAlone("mailroom_dequeue",
                                                      {q.group, int32_t{q.limit}, q.owner, lease_ms,
                                                       q.recoveries_only, default_budget_})
                                        : c.CallAlone("mailroom_dequeue_for_holder",
                                                      {q.group, int32_t{q.limit}, q.owner, lease_ms,
                                                       q.recoveries_only, default_budget_, q.holder,
                                                       q.holder_registered});
      std::vector<StoredJob> jobs;
      jobs.reserve(r.size());
      for (const auto& row : r) jobs.push_back(JobFromRow(row));
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
      pqxx::result r = tx.exec_params("SELECT r.id FROM mailroom.mailroom_ack($1::text, $2::text, "
                                      "$3::bigint[], $4::int[], $5::text[], $6::text[],"
                                      " $7::int[], $8::bigint[], $9::text[], $10::text[]) r(id)",
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
          "SELECT r.id FROM mailroom.mailroom_renew($1::text, $2::text, $3::bigint[],"
          " NULLIF($4::int[], '{}'), $5::int) r(id)",
          group, owner, IntArray(ids), IntArray(attempts), LeaseMs(lease));
      tx.commit();
      return ParseIds(r);
    });
  }

  absl::Status RenewAll(const std::string& group, const std::string& owner,
                        absl::Duration lease) override {
    return pool_.Do("renewing leases", [&](Connection& c) {
      Transaction tx(c);
      tx.exec_params("SELECT mailroom.mailroom_renew_all($1::text, $2::text, $3::int)", group,
                     owner, static_cast<int32_t>(LeaseMs(lease)));
      tx.commit();
    });
  }

  absl::Status HolderLeft(const std::string& group, const std::string& owner) override {
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
      for (const auto& row : c.CallAlone("mailroom_groups", {})) {
        out.push_back(row["group_name"].as<std::string>());
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
        s.group = row["group_name"].as<std::string>();
        s.depth = row["depth"].as<uint64_t>();
        s.lag_seconds = row["lag_seconds"].as<double>();
        s.in_flight = row["in_flight"].as<uint64_t>();
        s.waiting_retry = row["waiting_retry"].as<uint64_t>();
        s.sent = row["sent"].as<uint64_t>();
        s.failed = row["failed"].as<uint64_t>();
        s.expired = row["expired"].as<uint64_t>();
        s.cancelled = row["cancelled"].as<uint64_t>();
        s.superseded = row["superseded"].as<uint64_t>();
        s.rate_limited = row["rate_limited"].as<uint64_t>();
        s.suppressed = row["suppressed"].as<uint64_t>();
        out.push_back(std::move(s));
      }
      return out;
    });
  }

  absl::StatusOr<UsageRow> Usage(const std::string& group) override {
    return pool_.Run<UsageRow>("reading usage", [&](Connection& c) {
      Transaction tx(c);
      pqxx::row row = tx.exec_params1("SELECT * FROM mailroom.mailroom_usage($1::text)", group);
      UsageRow u;
      u.month = row["month"].as<std::string>();
      u.sent = row["sent"].as<uint64_t>();
      u.cost_micros = row["cost_micros"].as<int64_t>();
      return u;
    });
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

  Pool pool_;
  const std::optional<int64_t> default_budget_;  // the dequeue's p_default_budget
};

}  // namespace

std::unique_ptr<Store> NewPgStore(const std::string& url, int pool_size, const TxTimeouts& timeouts,
                                  std::optional<int64_t> default_budget_micros) {
  return std::make_unique<PgStore>(url, pool_size < 1 ? 1 : pool_size, timeouts,
                                   default_budget_micros);
}

}  // namespace mailroom
