#include "collector/store/operator_store.h"

#include <pqxx/pqxx>

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collector/db/pool.h"
#include "collector/store/suppression_row.h"

namespace mailroom {
namespace {

// Reads a nullable text column as "" for NULL.
std::string TextOr(const pqxx::field& f) { return f.is_null() ? "" : f.as<std::string>(); }
template <typename T>
T NumberOr(const pqxx::field& f) {
  return f.is_null() ? T{0} : f.as<T>();
}

FoundEmail ToFoundEmail(const pqxx::row& r) {
  FoundEmail e;
  e.job_id = r["token_id"].as<uint64_t>();
  e.account_id = NumberOr<uint64_t>(r["account"]);
  e.action = r["action"].as<std::string>();
  e.address = TextOr(r["address"]);
  e.state = r["state"].as<std::string>();
  e.reason = TextOr(r["reason"]);
  e.requested_at = NumberOr<int64_t>(r["requested_at"]);
  e.expires_at = NumberOr<int64_t>(r["expires_at"]);
  e.handouts = NumberOr<int>(r["handouts"]);
  e.failures = NumberOr<int>(r["failures"]);
  e.provider = TextOr(r["provider"]);
  e.provider_message_id = TextOr(r["provider_message_id"]);
  return e;
}

LedgerEntry ToLedgerEntry(const pqxx::row& r) {
  LedgerEntry l;
  l.event_id = NumberOr<uint64_t>(r["event_id"]);
  l.event = r["event"].as<std::string>();
  l.at_ms = r["at_ms"].as<int64_t>();
  l.handout = NumberOr<int>(r["handout"]);
  l.subscriber = TextOr(r["subscriber"]);
  l.provider = TextOr(r["provider"]);
  l.provider_message_id = TextOr(r["provider_message_id"]);
  l.cost_micros = NumberOr<int64_t>(r["cost_micros"]);
  l.detail = TextOr(r["detail"]);
  return l;
}

// The suppression entry in force of `address`, or when it is empty of account `account`'s
// current address, if any.
std::optional<SuppressionRow> SuppressionOf(Transaction& tx, const std::string& address,
                                            uint64_t account) {
  pqxx::result r = tx.exec_params(
      "SELECT * FROM mailroom.mailroom_suppression_of($1::text, $2::bigint)", address,
      static_cast<int64_t>(account));
  if (r.empty()) return std::nullopt;
  return SuppressionFromRow(r[0]);
}

class PgOperatorStore : public OperatorStore {
 public:
  PgOperatorStore(std::string url, int connections, TxTimeouts timeouts)
      : pool_({std::move(url), connections, timeouts}) {}

  absl::StatusOr<FoundEmails> FindEmails(const std::string& group, const std::string& address,
                                         uint64_t account, int limit) override {
    return pool_.Run<FoundEmails>("finding emails", [&](Connection& c) {
      Transaction tx(c);
      FoundEmails found;
      pqxx::result emails = tx.exec_params(
          "SELECT * FROM mailroom.mailroom_find_emails($1::text, $2::text, $3::bigint, $4::int)",
          group, address.empty() ? std::optional<std::string>() : address,
          static_cast<int64_t>(account), limit);
      std::map<uint64_t, size_t> at;
      std::vector<uint64_t> ids;
      for (const auto& row : emails) {
        at[row["token_id"].as<uint64_t>()] = found.emails.size();
        ids.push_back(row["token_id"].as<uint64_t>());
        found.emails.push_back(ToFoundEmail(row));
      }
      if (!ids.empty()) {
        pqxx::result ledger = tx.exec_params(
            "SELECT l.* FROM mailroom.mailroom_email_ledger(mailroom.mailroom_group_id($1::text),"
            " $2::bigint[]) l",
            group, IntArray(ids));
        for (const auto& row : ledger) {
          found.emails[at[row["token_id"].as<uint64_t>()]].ledger.push_back(ToLedgerEntry(row));
        }
      }
      // The address's entry; for an account, its current address's.
      found.suppression = SuppressionOf(tx, address, account);
      tx.commit();
      return found;
    });
  }

  absl::StatusOr<GroupPauseRow> SetPaused(const std::string& group, bool paused,
                                          const std::string& reason) override {
    return pool_.Run<GroupPauseRow>("pausing a group", [&](Connection& c) {
      Transaction tx(c);
      pqxx::row r = tx.exec_params1(
          "SELECT * FROM mailroom.mailroom_pause_group($1::text, $2::boolean, $3::text)", group,
          paused, reason);
      tx.commit();
      return GroupPauseRow{group, !r["paused_at"].is_null(), NumberOr<int64_t>(r["paused_at"]),
                           TextOr(r["reason"])};
    });
  }

  absl::StatusOr<std::vector<std::string>> Groups() override {
    return pool_.Run<std::vector<std::string>>("listing groups", [&](Connection& c) {
      std::vector<std::string> out;
      for (const auto& row : c.CallAlone("mailroom_groups", {})) {
        out.push_back(row["group_name"].as<std::string>());
      }
      return out;
    });
  }

  absl::StatusOr<std::vector<HourRow>> Hourly(const std::string& group, int hours) override {
    return pool_.Run<std::vector<HourRow>>("reading a group's hours", [&](Connection& c) {
      Transaction tx(c);
      pqxx::result r = tx.exec_params(
          "SELECT * FROM mailroom.mailroom_group_hourly($1::text, $2::int)", group, hours);
      tx.commit();
      std::vector<HourRow> out;
      for (const auto& row : r) {
        out.push_back({row["hour"].as<int64_t>(), row["sent"].as<int64_t>(),
                       row["delivered"].as<int64_t>(), row["bounced"].as<int64_t>(),
                       row["complained"].as<int64_t>()});
      }
      return out;
    });
  }

  absl::StatusOr<std::vector<TroubleRow>> Trouble(const std::string& group, absl::Duration within,
                                                  int limit) override {
    return pool_.Run<std::vector<TroubleRow>>("reading a group's failures", [&](Connection& c) {
      Transaction tx(c);
      pqxx::result r = tx.exec_params(
          "SELECT * FROM mailroom.mailroom_group_trouble($1::text,"
          " now() - make_interval(secs => $2::double precision), $3::int)",
          group, absl::ToDoubleSeconds(within), limit);
      tx.commit();
      std::vector<TroubleRow> out;
      for (const auto& row : r) {
        out.push_back({row["event_id"].as<uint64_t>(), row["event"].as<std::string>(),
                       row["at_ms"].as<int64_t>(), TextOr(row["detail"]),
                       row["token_id"].as<uint64_t>(), NumberOr<uint64_t>(row["account"]),
                       row["action"].as<std::string>(), TextOr(row["address"])});
      }
      return out;
    });
  }

  absl::StatusOr<std::vector<FailureRow>> Failures(const std::string& group, int limit) override {
    return pool_.Run<std::vector<FailureRow>>("listing failures", [&](Connection& c) {
      Transaction tx(c);
      std::vector<FailureRow> out;
      for (const auto& row : tx.exec_params(
               "SELECT * FROM mailroom.mailroom_list_failures($1::text, $2::int)", group, limit)) {
        FailureRow f;
        f.id = row["job_id"].as<uint64_t>();
        f.action = row["action"].as<std::string>();
        f.email = row["email"].as<std::string>();
        f.reason = row["reason"].as<std::string>();
        f.attempts = row["attempts"].as<uint32_t>();
        f.failed_at = row["failed_at"].as<int64_t>();
        out.push_back(std::move(f));
      }
      return out;
    });
  }

  absl::StatusOr<int> Requeue(const std::string& group, const std::vector<uint64_t>& ids) override {
    return pool_.Run<int>("requeueing", [&](Connection& c) {
      Transaction tx(c);
      const int n = tx.exec_params1("SELECT mailroom.mailroom_requeue($1::text, $2::bigint[])",
                                    group,
                                    ids.empty() ? std::optional<std::string>()
                                                : std::optional<std::string>(IntArray(ids)))[0]
                        .as<int>();
      tx.commit();
      return n;
    });
  }

  absl::StatusOr<std::vector<SuppressionRow>> ListSuppressions(const SuppressionQuery& q) override {
    return pool_.Run<std::vector<SuppressionRow>>("listing suppressions", [&](Connection& c) {
      Transaction tx(c);
      pqxx::result r = tx.exec_params("SELECT * FROM mailroom.mailroom_list_suppressions($1::text, "
                                      "$2::text, $3::text, $4::int)",
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
      pqxx::row row = tx.exec_params1("SELECT * FROM mailroom.mailroom_add_suppression($1::text, "
                                      "$2::text, $3::text, $4::bigint)",
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
              "SELECT * FROM mailroom.mailroom_remove_suppression($1::text)", address);
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

  absl::StatusOr<uint64_t> BeginAudit(const AuditRecord& r) override {
    return pool_.Run<uint64_t>("recording an operator call", [&](Connection& c) {
      Transaction tx(c);
      pqxx::row row = tx.exec_params1(
          "SELECT mailroom.mailroom_audit($1::text, $2::text, $3::text, $4::text)", r.credential,
          r.method, r.group, r.target);
      tx.commit();
      return row[0].as<uint64_t>();
    });
  }

  absl::Status EndAudit(uint64_t id, const std::string& outcome) override {
    return pool_.Do("recording an operator call's outcome", [&](Connection& c) {
      Transaction tx(c);
      tx.exec_params("SELECT mailroom.mailroom_audit_end($1::bigint, $2::text)",
                     static_cast<int64_t>(id), outcome);
      tx.commit();
    });
  }

  absl::StatusOr<std::vector<AuditEntryRow>> ListAudit(uint64_t before_id, int limit) override {
    return pool_.Run<std::vector<AuditEntryRow>>("listing the audit", [&](Connection& c) {
      Transaction tx(c);
      pqxx::result r = tx.exec_params(
          "SELECT * FROM mailroom.mailroom_list_audit($1::bigint, $2::int)",
          static_cast<int64_t>(before_id), limit);
      tx.commit();
      std::vector<AuditEntryRow> out;
      for (const auto& row : r) {
        out.push_back({row["id"].as<uint64_t>(),
                       row["at_ms"].as<int64_t>(),
                       {row["credential"].as<std::string>(), row["method"].as<std::string>(),
                        row["consumer_group"].as<std::string>(), row["target"].as<std::string>()},
                       row["outcome"].as<std::string>()});
      }
      return out;
    });
  }

 private:
  Pool pool_;
};

}  // namespace

std::unique_ptr<OperatorStore> NewPgOperatorStore(const std::string& url, int connections,
                                                  const TxTimeouts& timeouts) {
  return std::make_unique<PgOperatorStore>(url, connections, timeouts);
}

}  // namespace mailroom
