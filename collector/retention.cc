#include "collector/retention.h"

#include <pqxx/pqxx>

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

// Calls a prune function of migration 0013 or 0019 batch by batch (autocommit: one transaction per
// call) from `*cursor` until it says there is nothing more; returns the rows deleted. `*cursor`
// follows each call (the next call's `after`) and goes back to 0 once the function says it is
// done, so a pass stopped early (Stop, an error) goes on from there the next time.
// Stops early (between transactions) once `stopping` returns true.
template <typename Call, typename Stopping>
int64_t PruneAll(pqxx::connection& conn, int* transactions, int64_t* cursor, Stopping stopping,
                 Call call) {
  int64_t total = 0;
  while (!stopping()) {
    pqxx::nontransaction tx(conn);
    pqxx::row r = tx.exec1(call(*cursor));
    ++*transactions;
    total += r[0].as<int64_t>();
    *cursor = r[1].as<int64_t>();
    if (!r[2].as<bool>()) {
      *cursor = 0;
      break;
    }
  }
  return total;
}

}  // namespace

Retention::Retention(RetentionOptions options, Metrics* metrics, BudgetStore* budgets)
    : options_(std::move(options)), metrics_(metrics), budgets_(budgets) {}

absl::StatusOr<PruneReport> Retention::RunOnce() {
  PruneReport report;
  // Where each prune function's walk stands; written back whatever happens below (the turn
  // lets one pass at a time get this far).
  std::map<std::string, int64_t> cursors;
  {
    absl::MutexLock lock(&mu_);
    cursors = cursors_;
  }
  auto keep_cursors = [&] {
    absl::MutexLock lock(&mu_);
    cursors_ = cursors;
  };
  try {
    pqxx::connection turn(options_.database_url);
    try {
      pqxx::nontransaction(turn).exec(kTakeTurn);
    } catch (const pqxx::sql_error& e) {
      if (e.sqlstate() != "55P03") throw;
      LogInfo("retention pass skipped: another collector's pass has the turn", {});
      return report;
    }
    pqxx::connection conn(options_.database_url);
    report.ran = true;
    auto stopping = [this] {
      absl::MutexLock lock(&mu_);
      return stopped_;
    };
    if (options_.retention > absl::ZeroDuration()) {
      const std::string retention_ms = absl::StrCat(absl::ToInt64Milliseconds(options_.retention));
      std::vector<int> groups;
      {
        pqxx::nontransaction tx(conn);
        for (const auto& row : tx.exec("SELECT id FROM mailroom.consumer_groups ORDER BY id")) {
          groups.push_back(row[0].as<int>());
        }
      }
      const std::string before_epoch =
          absl::StrCat("EXTRACT(EPOCH FROM now() - make_interval(secs => ", retention_ms,
                       " / 1000.0))::BIGINT");
      // Leases that ran out, in every group: a group nobody dequeues for (no subscriber, or
      // paused) would otherwise keep its lease batches, and their tokens, for ever.
      for (int group : groups) {
        while (!stopping()) {
          pqxx::nontransaction tx(conn);
          pqxx::row r = tx.exec1(absl::StrCat("SELECT * FROM mailroom.mailroom_expire_leases(", group, ", ",
                                              before_epoch, ", ", options_.batch, ")"));
          ++report.transactions;
          report.lease_batches_expired += r[0].as<int64_t>();
          report.jobs_expired += r[1].as<int64_t>();
          if (!r[2].as<bool>()) break;
        }
      }
      for (int group : groups) {
        report.deliveries += PruneAll(conn, &report.transactions,
                                      &cursors[absl::StrCat("deliveries/", group)], stopping,
                                      [&](int64_t after) {
          return absl::StrCat("SELECT * FROM mailroom.mailroom_prune_deliveries(", group, ", ", after,
                              ", now() - make_interval(secs => ", retention_ms, " / 1000.0), ",
                              options_.batch, ")");
        });
      }
      // Finished lease batches (0021), before the tokens: a batch's tokens are kept while it
      // is leased.
      report.lease_batches += PruneAll(conn, &report.transactions, &cursors["lease_batches"],
                                       stopping, [&](int64_t after) {
        return absl::StrCat("SELECT * FROM mailroom.mailroom_prune_lease_batches(", after,
                            ", now() - make_interval(secs => ", retention_ms, " / 1000.0), ",
                            options_.batch, ")");
      });
      report.tokens += PruneAll(conn, &report.transactions, &cursors["tokens"], stopping,
                                [&](int64_t after) {
        return absl::StrCat("SELECT * FROM mailroom.mailroom_prune_tokens(", after, ", ", before_epoch,
                            ", ", options_.batch, ")");
      });
    }
    {
      pqxx::nontransaction tx(conn);
      report.counter_rows =
          tx.exec1("SELECT mailroom.mailroom_compact_delivery_counts()")[0].as<int64_t>();
      ++report.transactions;
      report.reputation_rows = tx.exec1("SELECT mailroom.mailroom_compact_reputation()")[0].as<int64_t>();
      ++report.transactions;
    }
    // The abuse limits' per-address counters whose newest request left the window (0026);
    // whatever the retention: they are the limits' state, not history.
    report.address_requests += PruneAll(conn, &report.transactions, &cursors["address_requests"], stopping,
                                          [&](int64_t after) {
      return absl::StrCat("SELECT * FROM mailroom.mailroom_prune_address_requests(", after, ", ",
                          options_.batch, ")");
    });
    // In the turn too, so one collector refunds at a time (the SQL would be safe
    // without it: it locks the grants it credits).
    if (budgets_ != nullptr) {
      auto refunds = budgets_->Refund();
      if (!refunds.ok()) return refunds.status();
      for (const BudgetRefund& r : *refunds) {
        report.refunded_emails += r.emails;
        LogInfo("unused budget of a departed sender refunded",
                {{"group", r.group}, {"holder", ShortId(r.holder)}, {"emails", absl::StrCat(r.emails)}});
        if (metrics_ != nullptr) {
          metrics_->Add(collector_metrics::kBudgetRefundedEmails, static_cast<double>(r.emails),
                        {r.group});
        }
      }
    }
    // After the refund, so that grants it has just refunded are not kept for another pass.
    if (options_.retention > absl::ZeroDuration()) {
      const std::string before =
          absl::StrCat("now() - make_interval(secs => ",
                       absl::ToInt64Milliseconds(options_.retention), " / 1000.0)");
      report.budget_grants += PruneAll(conn, &report.transactions, &cursors["budget_grants"],
                                       stopping, [&](int64_t after) {
        return absl::StrCat("SELECT * FROM mailroom.mailroom_prune_budget_grants(", after, ", ", before,
                            ", ", options_.batch, ")");
      });
      // Grants of live senders, which are not pruned, folded an hour after they expired (a
      // live sender returns a grant before it expires); after the prune, which keeps fewer.
      report.budget_grants_folded +=
          PruneAll(conn, &report.transactions, &cursors["budget_grants_folded"], stopping,
                   [&](int64_t after) {
            return absl::StrCat("SELECT * FROM mailroom.mailroom_compact_budget_grants(", after,
                                ", now() - INTERVAL '1 hour', ", options_.batch, ")");
          });
      // After the grants: a holder whose last grants went in this pass is done with.
      report.budget_subscriptions += PruneAll(conn, &report.transactions,
                                              &cursors["budget_subscriptions"], stopping,
                                              [&](int64_t) {
        return absl::StrCat("SELECT * FROM mailroom.mailroom_prune_budget_subscriptions(", before, ", ",
                            options_.batch, ")");
      });
      report.soft_bounces += PruneAll(conn, &report.transactions, &cursors["soft_bounces"],
                                      stopping, [&](int64_t) {
        return absl::StrCat("SELECT * FROM mailroom.mailroom_prune_soft_bounces(", options_.batch, ")");
      });
    }
    // The turn ends with its session (the connection closes here).
  } catch (const std::exception& e) {
    keep_cursors();
    return absl::UnavailableError(absl::StrCat("pruning: ", e.what()));
  }
  keep_cursors();
  if (metrics_ != nullptr) {
    metrics_->Add(collector_metrics::kPruned, static_cast<double>(report.deliveries),
                  {"deliveries"});
    metrics_->Add(collector_metrics::kPruned, static_cast<double>(report.tokens), {"tokens"});
    metrics_->Add(collector_metrics::kPruned, static_cast<double>(report.lease_batches),
                  {"lease_batches"});
    metrics_->Add(collector_metrics::kPruned, static_cast<double>(report.budget_grants),
                  {"budget_grants"});
    metrics_->Add(collector_metrics::kPruned, static_cast<double>(report.budget_subscriptions),
                  {"budget_subscriptions"});
    metrics_->Add(collector_metrics::kPruned, static_cast<double>(report.soft_bounces),
                  {"soft_bounces"});
    metrics_->Add(collector_metrics::kPruned, static_cast<double>(report.address_requests),
                  {"mailroom_address_requests"});
  }
  return report;
}

void Retention::Run() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopped_), options_.interval)) return;
    }
    auto report = RunOnce();
    if (!report.ok()) {
      LogWarn("pruning failed", {{"error", std::string(report.status().message())}});
    } else if (report->deliveries > 0 || report->tokens > 0 || report->lease_batches > 0 ||
               report->lease_batches_expired > 0 || report->jobs_expired > 0 ||
               report->budget_grants > 0 ||
               report->budget_grants_folded > 0 || report->budget_subscriptions > 0 ||
               report->soft_bounces > 0 || report->address_requests > 0) {
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
                         {"transactions", absl::StrCat(report->transactions)}});
    }
  }
}

void Retention::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

}  // namespace mailroom
