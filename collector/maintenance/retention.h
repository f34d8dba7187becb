#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <pqxx/pqxx>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collector/store/budget_store.h"
#include "common/metrics.h"
#include "common/worker_thread.h"

namespace mailroom {

// How the collector keeps its tables bounded (MAILROOM_RETENTION, MAILROOM_RETENTION_INTERVAL).
struct RetentionOptions {
  // Connection string with the collector's connection defaults (statement timeout, keepalives).
  std::string database_url;
  // Finished deliveries and lease batches, spent tokens and budget grants and subscriptions that
  // can no longer matter older than this are deleted, and soft bounces older than the 7 days that
  // count. Zero keeps everything (the outcome counters are still compacted).
  absl::Duration retention = absl::Hours(24 * 30);
  // Time between two passes.
  absl::Duration interval = absl::Minutes(1);
  // Rows examined per transaction.
  int batch = 1000;
  // Time between two publishes of the application's staged events (the publisher loop), and the
  // events one publish moves at most (beyond it, at most one packed row: one acknowledgement's
  // plain SENTs, mailroom_publish_events).
  absl::Duration publish_interval = absl::Seconds(1);
  int publish_batch = 10000;
};

// What one pass did.
struct PruneReport {
  bool ran = false;                   // false: another collector holds the pruning lock
  int64_t deliveries = 0;             // finished deliveries deleted
  int64_t tokens = 0;                 // tokens deleted
  int64_t lease_batches = 0;          // finished lease batches deleted
  int64_t lease_batches_expired = 0;  // leased batches whose lease ran out, expired
  int64_t jobs_expired = 0;           // jobs waiting for a new lease whose token expired before the
                                      // retention, recorded as expired
  int64_t budget_grants = 0;          // grants that can no longer matter deleted
  int64_t budget_grants_folded = 0;   // grants of live holders folded into another row
  int64_t budget_subscriptions = 0;   // subscription rows of holders without grants deleted
  int64_t soft_bounces = 0;           // soft bounces older than the 7 days that count deleted
  int64_t address_requests = 0;       // abuse-limit counters of addresses idle for a window
  int64_t email_events = 0;           // events of the application's feed older than its retention
  int64_t operator_audit = 0;         // operator calls recorded longer ago than their retention
  int64_t code_counters_added = 0;    // wrong-code counters created (mailroom_grow_code_counters)
  int64_t counter_rows = 0;           // delivery_counts rows left after compaction
  int64_t reputation_rows =
      0;                 // reputation_hourly rows left after compaction (one per group and hour)
  int transactions = 0;  // batches run (one short transaction each)
  int64_t refunded_emails = 0;  // unused grant emails of dead holders given back (all groups)
};

// First, in every group, expires the lease batches whose lease ran out and records as expired
// the jobs waiting for a new lease whose token expired before the retention
// (mailroom_expire_leases): whether or not anyone dequeues for the group (no subscriber, paused
// by the reputation guard), its leases run out and its tokens can go.
// Then prunes finished deliveries, finished lease batches and tokens no group needs
// (mailroom_prune_deliveries, mailroom_prune_tokens, mailroom_prune_lease_batches) in batches of
// `batch` rows, one transaction per batch with SKIP LOCKED, so it never holds a lock for long nor
// waits on a collector. Each walk goes past rows it must keep (a kept row delays only itself) and
// its position is kept between passes, so a pass cut short goes on from there; then folds the
// outcome counters (mailroom_compact_delivery_counts) and grows the pool of wrong-code counters
// (mailroom_grow_code_counters). Pruning never changes mailroom_stats' counts.
// Several collectors may run it at once: the retention turn (a lock on mailroom_retention_turn)
// lets one pass run at a time and the others skip theirs. Opens its own connection for each pass
// (none is held between passes).
//
// With a BudgetStore, each pass also gives back the unused grants of dead senders
// (BudgetStore::Refund), logs each holder refunded and counts the emails in
// mailroom_budget_refunded_emails_total{group}.
//
// After the refund, the same batches prune the budget's tables: budget grants expired
// before the retention that can no longer matter (refunded, fully returned, of a holder never
// linked, or of a dead holder with nothing to give back), subscription rows of holders with
// no grant left (not updated within the retention, holding no lease) and soft bounces older
// than the 7 days that count; and it folds the grants of each holder that expired more than an
// hour ago into one row per month, price and class (every sum unchanged), so a sender alive
// for weeks keeps a few rows. None of it with a zero retention. Pruning never makes a refund
// larger, folding changes none (see migrations/functions/mailroom_compact_budget_grants.sql).
//
// Whatever the retention, each pass also deletes the events of the application's feed older
// than mailroom_settings.event_retention_days (mailroom_prune_email_events) and the operator
// calls recorded longer ago than mailroom_settings.audit_retention_days
// (mailroom_prune_operator_audit).
//
// The publisher (Start's publisher loop, PublishEvents) moves the application's staged events into
// its feed (mailroom_publish_events, which NOTIFYs mailroom_email_events), every
// `publish_interval`, on a connection of its own; several collectors may publish at once (the
// function lets one publish at a time and the others publish nothing).
//
// Exports mailroom_collector_pruned_total{table="deliveries"|"tokens"|"lease_batches"|
// "budget_grants"|
// "budget_subscriptions"|"soft_bounces"}. Thread-safe: RunOnce and PublishEvents may be called
// while the loops run; Stop() may be called from any thread.
class Retention {
 public:
  // `budgets` may be null (no refunds); it must outlive the Retention.
  Retention(RetentionOptions options, Metrics* metrics, BudgetStore* budgets = nullptr);
  // Stop(): both loops end (after their current batch) before anything they use is destroyed.
  ~Retention() { Stop(); }
  Retention(const Retention&) = delete;
  Retention& operator=(const Retention&) = delete;

  // One pass over every group. An error (kUnavailable: database unreachable or a statement
  // failed) leaves the rows already pruned pruned; the next pass goes on from where each walk
  // stood.
  absl::StatusOr<PruneReport> RunOnce();

  // Starts two worker threads (common/worker_thread.h): the pruner runs a pass every
  // `interval`, logging each pass that deleted something and each error; the publisher
  // publishes every `publish_interval` on one connection (opened again after an error),
  // logging each error. Nothing after Stop().
  void Start();
  // Stops both loops and returns when they have ended: a pass or a publish in progress ends
  // after its current batch. Idempotent; from any thread but the loops' own.
  void Stop();

  // Publishes the staged events, batch after batch, until none is left; returns how many.
  // kUnavailable: database unreachable or a statement failed (what was published stays).
  absl::StatusOr<int64_t> PublishEvents();

 private:
  // One pass on connections of its own, if this collector gets the turn (else report.ran
  // stays false). Each step adds to `report` and moves `cursors`; an error ends the pass.
  absl::Status RunPass(PruneReport& report, std::map<std::string, int64_t>& cursors);
  // Gives back the unused grants of dead senders (BudgetStore::Refund), logged and counted.
  absl::Status RefundDeadHolders(PruneReport& report);
  // Adds a pass's deletions to mailroom_collector_pruned_total.
  void CountPruned(const PruneReport& report);
  // PublishEvents on `conn`; throws libpqxx's exceptions.
  int64_t PublishOn(pqxx::connection& conn);
  // The pruner's and the publisher's bodies.
  void PruneLoop();
  void PublishLoop();
  // Whether Stop() was called.
  bool stopping() const { return pruner_.stopping() || publisher_.stopping(); }

  const RetentionOptions options_;
  Metrics* const metrics_;
  BudgetStore* const budgets_;
  absl::Mutex mu_;
  // Where each prune function's walk stands between passes ("tokens", "deliveries/<group id>",
  // ...): 0 once a walk reached its end.
  std::map<std::string, int64_t> cursors_ ABSL_GUARDED_BY(mu_);
  // Last: stopped (joined) before the members their bodies use are destroyed.
  WorkerThread pruner_{[this] { PruneLoop(); }};
  WorkerThread publisher_{[this] { PublishLoop(); }};
};

}  // namespace mailroom
