#include "collector/maintenance/retention.h"

#include <pqxx/pqxx>

#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collector/metrics/collector_metrics.h"
#include "common/log.h"

namespace mailroom {
namespace {

// The retention pass's turn: a lock on a table of mailroom's, held by an open transaction on a
// connection of its own for the whole pass. SHARE UPDATE EXCLUSIVE mode conflicts with itself,
// takes UPDATE, DELETE or TRUNCATE on the table, which only mailroom's roles have, and conflicts
// with no lock a statement takes while it is parsed, before its rights are checked (so a role
// that may only name the table cannot hold it through PREPARE); an advisory lock, which any
// role may take and hold, would let any role that can connect stop every pass. NOWAIT: a
// collector whose turn it is not skips its pass. The lock is not WAL-logged and takes no
// transaction id, so the idle transaction holds back no vacuum.
constexpr char kTakeTurn[] =
    "SET idle_in_transaction_session_timeout = 0; BEGIN;"
    " LOCK TABLE mailroom.mailroom_retention_turn IN SHARE UPDATE EXCLUSIVE MODE NOWAIT";

// Takes the retention turn on `turn` (its own connection, held for the pass); false when
// another collector's pass has it.
bool TakeTurn(pqxx::connection& turn) {
  try {
    pqxx::nontransaction(turn).exec(kTakeTurn);
    return true;
  } catch (const pqxx::sql_error& e) {
    if (e.sqlstate() != "55P03") throw;
    return false;
  }
}

// The statements of one retention pass, on its connection (autocommit: one short transaction
// per call). Each step adds what it did to the report and moves the walks' cursors. Throws
// libpqxx's exceptions.
class Pass {
 public:
  Pass(pqxx::connection& conn, const RetentionOptions& options, PruneReport& report,
       std::map<std::string, int64_t>& cursors, std::function<bool()> stopping)
      : conn_(conn), options_(options), report_(report), cursors_(cursors),
        stopping_(std::move(stopping)),
        retention_ms_(absl::ToInt64Milliseconds(options.retention)) {}

  std::vector<int> Groups() {
    std::vector<int> groups;
    pqxx::nontransaction tx(conn_);
    for (const auto& row : tx.exec("SELECT group_id FROM mailroom.mailroom_groups()")) {
      groups.push_back(row["group_id"].as<int>());
    }
    return groups;
  }

  // Leases that ran out, in every group: a group nobody dequeues for (no subscriber, or
  // paused) would otherwise keep its lease batches, and their tokens, for ever.
  void ExpireLeases(const std::vector<int>& groups) {
    for (int group : groups) {
      while (!stopping_()) {
        pqxx::nontransaction tx(conn_);
        pqxx::row r = tx.exec_params1(
            absl::StrCat("SELECT * FROM mailroom.mailroom_expire_leases($1::int, ", BeforeEpoch(2),
                         ", $3::int)"),
            group, retention_ms_, options_.batch);
        ++report_.transactions;
        report_.lease_batches_expired += r["batches"].as<int64_t>();
        report_.jobs_expired += r["jobs"].as<int64_t>();
        if (!r["more"].as<bool>()) break;
      }
    }
  }

  // Finished deliveries of every group, finished lease batches and tokens no group
  // needs, in that order: a batch's tokens are kept while it is leased.
  void PruneFinished(const std::vector<int>& groups) {
    for (int group : groups) {
      report_.deliveries += PruneAll(absl::StrCat("deliveries/", group), [&](Tx& tx,
                                                                             int64_t after) {
        return tx.exec_params1(Prune("mailroom_prune_deliveries($1::int, $2::bigint, " + Before(3) +
                                     ", $4::int)"),
                               group, after, retention_ms_, options_.batch);
      });
    }
    report_.lease_batches += PruneAll("lease_batches", [&](Tx& tx, int64_t after) {
      return tx.exec_params1(Prune("mailroom_prune_lease_batches($1::bigint, " + Before(2) +
                                   ", $3::int)"),
                             after, retention_ms_, options_.batch);
    });
    report_.tokens += PruneAll("tokens", [&](Tx& tx, int64_t after) {
      return tx.exec_params1(Prune("mailroom_prune_tokens($1::bigint, " + BeforeEpoch(2) +
                                   ", $3::int)"),
                             after, retention_ms_, options_.batch);
    });
  }

  // Folds the outcome and reputation counters.
  void CompactCounters() {
    pqxx::nontransaction tx(conn_);
    report_.counter_rows =
        tx.exec1("SELECT mailroom.mailroom_compact_delivery_counts() AS n")["n"].as<int64_t>();
    ++report_.transactions;
    report_.reputation_rows =
        tx.exec1("SELECT mailroom.mailroom_compact_reputation() AS n")["n"].as<int64_t>();
    ++report_.transactions;
  }

  // Grows the pool of wrong-code counters, so that requests never run DDL
  // (mailroom_grow_code_counters): whatever the retention, like the limits' state.
  void GrowCodeCounters() {
    pqxx::nontransaction tx(conn_);
    report_.code_counters_added =
        tx.exec1("SELECT mailroom.mailroom_grow_code_counters() AS n")["n"].as<int64_t>();
    ++report_.transactions;
  }

  // The abuse limits' per-address counters whose newest request left the window;
  // whatever the retention: they are the limits' state, not history.
  void PruneAddressRequests() {
    report_.address_requests += PruneAll("address_requests", [&](Tx& tx, int64_t after) {
      return tx.exec_params1(Prune("mailroom_prune_address_requests($1::bigint, $2::int)"), after,
                             options_.batch);
    });
  }

  // The application's feed, whatever MAILROOM_RETENTION: its own retention is in
  // mailroom_settings.event_retention_days.
  void PruneEmailEvents() {
    report_.email_events += PruneAll("email_events", [&](Tx& tx, int64_t) {
      return tx.exec_params1(Prune("mailroom_prune_email_events($1::int)"), options_.batch);
    });
  }

  // mailroom_settings.audit_retention_days.
  void PruneOperatorAudit() {
    report_.operator_audit += PruneAll("operator_audit", [&](Tx& tx, int64_t) {
      return tx.exec_params1(Prune("mailroom_prune_operator_audit($1::int)"), options_.batch);
    });
  }

  // The budget's tables (grants, subscriptions, soft bounces), after the refund, so that grants it
  // has just refunded are not kept for another pass.
  void PruneBudgetTables() {
    report_.budget_grants += PruneAll("budget_grants", [&](Tx& tx, int64_t after) {
      return tx.exec_params1(Prune("mailroom_prune_budget_grants($1::bigint, " + Before(2) +
                                   ", $3::int)"),
                             after, retention_ms_, options_.batch);
    });
    // Grants of live senders, which are not pruned, folded an hour after they expired (a
    // live sender returns a grant before it expires); after the prune, which keeps fewer.
    report_.budget_grants_folded += PruneAll("budget_grants_folded", [&](Tx& tx, int64_t after) {
      return tx.exec_params1(Prune("mailroom_compact_budget_grants($1::bigint,"
                                   " now() - INTERVAL '1 hour', $2::int)"),
                             after, options_.batch);
    });
    // After the grants: a holder whose last grants went in this pass is done with.
    report_.budget_subscriptions += PruneAll("budget_subscriptions", [&](Tx& tx, int64_t) {
      return tx.exec_params1(Prune("mailroom_prune_budget_subscriptions(" + Before(1) +
                                   ", $2::int)"),
                             retention_ms_, options_.batch);
    });
    report_.soft_bounces += PruneAll("soft_bounces", [&](Tx& tx, int64_t) {
      return tx.exec_params1(Prune("mailroom_prune_soft_bounces($1::int)"), options_.batch);
    });
  }

 private:
  using Tx = pqxx::nontransaction;

  // The retention's start, now() - retention, in SQL, of parameter $n (the retention in ms).
  static std::string Before(int n) {
    return absl::StrCat("now() - make_interval(secs => $", n, "::bigint / 1000.0)");
  }
  // The same as Unix seconds.
  static std::string BeforeEpoch(int n) {
    return absl::StrCat("EXTRACT(EPOCH FROM ", Before(n), ")::BIGINT");
  }
  // A call of one of the prune functions, its three columns named as PruneAll reads them
  // (mailroom_prune_address_requests names its own deleted, next_after, more).
  static std::string Prune(const std::string& call) {
    return absl::StrCat("SELECT * FROM mailroom.", call, " AS r(pruned, last_id, more)");
  }

  // Calls one of the mailroom_prune_* functions batch by batch (autocommit: one
  // transaction per call) from the walk's cursor `walk` until it says there is nothing more;
  // returns the rows deleted. The cursor follows each call (the next call's `after`) and goes
  // back to 0 once the function says it is done, so a pass stopped early (Stop, an error) goes
  // on from there the next time. Stops early (between transactions) once stopping.
  template <typename Call>
  int64_t PruneAll(const std::string& walk, Call call) {
    int64_t& cursor = cursors_[walk];
    int64_t total = 0;
    while (!stopping_()) {
      Tx tx(conn_);
      pqxx::row r = call(tx, cursor);
      ++report_.transactions;
      total += r["pruned"].as<int64_t>();
      cursor = r["last_id"].as<int64_t>();
      if (!r["more"].as<bool>()) {
        cursor = 0;
        break;
      }
    }
    return total;
  }

  pqxx::connection& conn_;
  const RetentionOptions& options_;
  PruneReport& report_;
  std::map<std::string, int64_t>& cursors_;
  const std::function<bool()> stopping_;
  const int64_t retention_ms_;  // the retention's start is now() minus this
};

}  // namespace

Retention::Retention(RetentionOptions options, Metrics* metrics, BudgetStore* budgets)
    : options_(std::move(options)), metrics_(metrics), budgets_(budgets) {}

absl::StatusOr<PruneReport> Retention::RunOnce() {
  PruneReport report;
  // Where each prune function's walk stands; written back whatever happens (the turn lets one
  // pass at a time get that far).
  std::map<std::string, int64_t> cursors;
  {
    absl::MutexLock lock(&mu_);
    cursors = cursors_;
  }
  const absl::Status status = RunPass(report, cursors);
  {
    absl::MutexLock lock(&mu_);
    cursors_ = cursors;
  }
  if (!status.ok()) return status;
  if (report.ran) CountPruned(report);
  return report;
}

absl::Status Retention::RunPass(PruneReport& report, std::map<std::string, int64_t>& cursors) {
  try {
    pqxx::connection turn(options_.database_url);
    if (!TakeTurn(turn)) {
      LogInfo("retention pass skipped: another collector's pass has the turn", {});
      return absl::OkStatus();
    }
    pqxx::connection conn(options_.database_url);
    report.ran = true;
    Pass pass(conn, options_, report, cursors, [this] { return stopping(); });
    const bool retain = options_.retention > absl::ZeroDuration();
    if (retain) {
      const std::vector<int> groups = pass.Groups();
      pass.ExpireLeases(groups);
      pass.PruneFinished(groups);
    }
    pass.CompactCounters();
    pass.PruneAddressRequests();
    pass.GrowCodeCounters();
    pass.PruneEmailEvents();
    pass.PruneOperatorAudit();
    // In the turn too, so one collector refunds at a time (the SQL would be safe without it:
    // it locks the grants it credits).
    absl::Status refunded = RefundDeadHolders(report);
    if (!refunded.ok()) return refunded;
    if (retain) pass.PruneBudgetTables();
    return absl::OkStatus();
    // The turn ends with its session (the connection closes here).
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("pruning: ", e.what()));
  }
}

absl::Status Retention::RefundDeadHolders(PruneReport& report) {
  if (budgets_ == nullptr) return absl::OkStatus();
  auto refunds = budgets_->Refund();
  if (!refunds.ok()) return refunds.status();
  for (const BudgetRefund& r : *refunds) {
    report.refunded_emails += r.emails;
    LogInfo("unused budget of a departed sender refunded", {{"group", r.group},
                                                            {"holder", ShortId(r.holder)},
                                                            {"emails", absl::StrCat(r.emails)}});
    if (metrics_ != nullptr) {
      metrics_->Add(collector_metrics::kBudgetRefundedEmails, static_cast<double>(r.emails),
                    {r.group});
    }
  }
  return absl::OkStatus();
}

void Retention::CountPruned(const PruneReport& report) {
  if (metrics_ == nullptr) return;
  const std::pair<const char*, int64_t> pruned[] = {
      {"deliveries", report.deliveries},
      {"tokens", report.tokens},
      {"lease_batches", report.lease_batches},
      {"budget_grants", report.budget_grants},
      {"budget_subscriptions", report.budget_subscriptions},
      {"soft_bounces", report.soft_bounces},
      {"mailroom_address_requests", report.address_requests},
  };
  for (const auto& [table, rows] : pruned) {
    metrics_->Add(collector_metrics::kPruned, static_cast<double>(rows), {table});
  }
}

void Retention::Start() {
  pruner_.Start();
  publisher_.Start();
}

void Retention::Stop() {
  // Both loops see stopping() at once, then each is joined.
  pruner_.RequestStop();
  publisher_.RequestStop();
  pruner_.Stop();
  publisher_.Stop();
}

void Retention::PruneLoop() {
  while (pruner_.WaitFor(options_.interval)) {
    auto report = RunOnce();
    if (!report.ok()) {
      LogWarn("pruning failed", {{"error", std::string(report.status().message())}});
    } else if (report->deliveries > 0 || report->tokens > 0 || report->lease_batches > 0 ||
               report->lease_batches_expired > 0 || report->jobs_expired > 0 ||
               report->budget_grants > 0 || report->budget_grants_folded > 0 ||
               report->budget_subscriptions > 0 || report->soft_bounces > 0 ||
               report->address_requests > 0 || report->email_events > 0 ||
               report->operator_audit > 0) {
      LogInfo("pruned", {{"deliveries", absl::StrCat(report->deliveries)},
                         {"tokens", absl::StrCat(report->tokens)},
                         {"lease_batches", absl::StrCat(report->lease_batches)},
                         {"lease_batches_expired", absl::StrCat(report->lease_batches_expired)},
                         {"jobs_expired", absl::StrCat(report->jobs_expired)},
                         {"budget_grants", absl::StrCat(report->budget_grants)},
                         {"budget_grants_folded", absl::StrCat(report->budget_grants_folded)},
                         {"budget_subscriptions", absl::StrCat(report->budget_subscriptions)},
                         {"soft_bounces", absl::StrCat(report->soft_bounces)},
                         {"address_requests", absl::StrCat(report->address_requests)},
                         {"email_events", absl::StrCat(report->email_events)},
                         {"operator_audit", absl::StrCat(report->operator_audit)},
                         {"transactions", absl::StrCat(report->transactions)}});
    }
  }
}

int64_t Retention::PublishOn(pqxx::connection& conn) {
  int64_t total = 0;
  for (;;) {
    pqxx::nontransaction tx(conn);
    pqxx::row r = tx.exec_params1("SELECT * FROM mailroom.mailroom_publish_events($1::int)",
                                  options_.publish_batch);
    total += r["published"].as<int64_t>();
    if (!r["more"].as<bool>() || stopping()) return total;
  }
}

absl::StatusOr<int64_t> Retention::PublishEvents() {
  try {
    pqxx::connection conn(options_.database_url);
    return PublishOn(conn);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("publishing events: ", e.what()));
  }
}

void Retention::PublishLoop() {
  std::unique_ptr<pqxx::connection> conn;
  while (publisher_.WaitFor(options_.publish_interval)) {
    try {
      if (conn == nullptr) conn = std::make_unique<pqxx::connection>(options_.database_url);
      PublishOn(*conn);
    } catch (const std::exception& e) {
      conn.reset();
      LogWarn("publishing events failed", {{"error", e.what()}});
    }
  }
}

}  // namespace mailroom
