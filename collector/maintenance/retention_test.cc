// Retention (pruning) and the outcome counters (delivery_counts) against a throwaway PostgreSQL:
// back-dated rows are pruned in small batches, nothing unfinished, recent or still counted by
// the abuse limits is touched, and mailroom_stats returns exactly what it returned before.
#include "collector/maintenance/retention.h"

#include <pqxx/pqxx>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "collector/schema/migrate.h"
#include "gtest/gtest.h"
#include "testing/intruder.h"
#include "testing/migrated_database.h"

namespace mailroom {
namespace {

class RetentionTest : public testing::MigratedDatabaseTest {
 protected:
  void SetUp() override {
    MigratedDatabaseTest::SetUp();
    if (HasFatalFailure()) return;
    Exec("UPDATE mailroom_settings SET recovery_limit_per_account = NULL, "
         "recovery_limit_per_address = NULL, activation_limit_per_account = NULL, "
         "activation_limit_per_address = NULL");
  }

  // mailroom_stats of every group, one line per group.
  std::string Stats() {
    pqxx::nontransaction tx(*conn_);
    std::string out;
    for (const auto& row : tx.exec("SELECT * FROM mailroom_stats(NULL)")) {
      for (const auto& f : row) {
        if (std::string(f.name()) == "lag_seconds") continue;  // moves with the clock
        absl::StrAppend(&out, f.name(), "=", f.c_str(), " ");
      }
      out += "\n";
    }
    return out;
  }
  // What mailroom_stats' finished-state columns must equal: the jobs in that state, counted
  // in the per-job picture (deliveries rows and batch jobs).
  int64_t CountState(const std::string& state) {
    return Int(absl::StrCat("SELECT count(*) FROM delivery_states WHERE state = '", state, "'"));
  }
  // Leases `n` jobs of group `group` to owner "o".
  void Dequeue(const std::string& group, int n) {
    Exec(absl::StrCat("SELECT count(*) FROM mailroom_dequeue('", group, "', ", n, ", 'o', 60000)"));
  }
  // Acknowledges the `n` lowest jobs of `group` leased to `owner` with `outcome` (a retry
  // waits 1 h), whether in a batch or in a deliveries row.
  void Ack(const std::string& group, int n, const std::string& outcome,
           const std::string& owner = "o") {
    Exec(absl::StrCat(
        "SELECT count(*) FROM (SELECT array_agg(d.token_id) AS ids, array_agg(d.attempts) AS a,"
        " count(*)::INT AS k FROM (SELECT d.token_id, d.attempts FROM delivery_states d"
        " JOIN consumer_groups g ON g.id = d.group_id WHERE g.name = '",
        group, "' AND d.state = 'leased' AND d.owner = '", owner, "' ORDER BY d.token_id LIMIT ", n,
        ") d) x, mailroom_ack('", group, "', '", owner, "', x.ids, x.a, array_fill('", outcome,
        "'::TEXT, ARRAY[x.k]), array_fill('why'::TEXT, ARRAY[x.k]),"
        " array_fill(CASE WHEN '",
        outcome,
        "' = 'retry' THEN 3600000 ELSE 0 END,"
        " ARRAY[x.k]), array_fill(CASE WHEN '",
        outcome, "' = 'sent' THEN 5 ELSE 0 END::BIGINT, ARRAY[x.k]))"));
  }
  void Accounts(int n, const std::string& prefix) {
    Exec(absl::StrCat("INSERT INTO accounts (email, login) SELECT '", prefix,
                      "' || i || '@example.test', '", prefix, "' || i FROM generate_series(1, ", n,
                      ") i"));
    CollectSignups();  // their tokens, as the collector makes them
  }
  // Moves everything written so far `days` into the past: deliveries rows, lease batches
  // and tokens.
  void BackDate(int days) {
    Exec(
        absl::StrCat("UPDATE deliveries SET updated_at = updated_at - interval '", days, " days'"));
    Exec(absl::StrCat("UPDATE lease_batches SET created_at = created_at - interval '", days,
                      " days', updated_at = updated_at - interval '", days, " days'"));
    Exec(absl::StrCat("UPDATE tokens SET created_at = created_at - ", days, " * 86400, ",
                      "expires_at = expires_at - ", days, " * 86400"));
  }
  // Every lease ran out `ago` (an SQL interval) ago, without an outcome: the per-job rows'
  // and the leased batches'.
  void RunOut(const std::string& ago) {
    Exec(absl::StrCat("UPDATE deliveries SET due_at = now() - INTERVAL '", ago,
                      "' WHERE state = 'leased';"
                      "UPDATE lease_batches SET due_at = now() - INTERVAL '",
                      ago, "' WHERE state = 'leased'"));
  }
  // `n` new accounts whose activation emails were sent `days` ago.
  void SentDaysAgo(int n, const std::string& prefix, int days) {
    Accounts(n, prefix);
    Dequeue("mailroom", n);
    Ack("mailroom", n, "sent");
    BackDate(days);
  }
  RetentionOptions Options(int batch = 7) {
    RetentionOptions o;
    o.database_url = url_;
    o.retention = absl::Hours(24 * 30);
    o.batch = batch;
    return o;
  }
};

TEST_F(RetentionTest, CountersMatchTheRowsThroughEveryTransition) {
  Exec("SELECT mailroom_ensure_group('audit', true)");
  Accounts(40, "a");
  // 5 activations cancelled per group, and 5 account_suspended notices leased.
  Exec("UPDATE accounts SET status = 'suspended' WHERE id > 35");
  Dequeue("mailroom", 100);
  Dequeue("audit", 100);
  Ack("mailroom", 20, "sent");
  Ack("mailroom", 5, "failed");
  Ack("mailroom", 4, "retry");
  Ack("audit", 3, "expired");
  // An operator's Requeue (as PgStore does it): failed -> retry. A failed job always has its
  // deliveries row (every outcome but a plain SENT has one).
  Exec("UPDATE deliveries SET state = 'retry', due_at = now(), failures = 0 "
       "WHERE group_id = 1 AND state = 'failed' AND token_id % 2 = 0");
  for (const char* state : {"sent", "failed", "expired", "cancelled"}) {
    for (const char* group : {"mailroom", "audit"}) {
      EXPECT_EQ(Int(absl::StrCat("SELECT ", state, " FROM mailroom_stats('", group, "')")),
                Int(absl::StrCat("SELECT count(*) FROM delivery_states d JOIN consumer_groups g ON "
                                 "g.id = d.group_id WHERE g.name = '",
                                 group, "' AND d.state = '", state, "'")))
          << state << " " << group;
    }
  }
  EXPECT_EQ(Int("SELECT sent FROM mailroom_stats('mailroom')"), 20);
  EXPECT_EQ(Int("SELECT cancelled FROM mailroom_stats('audit')"), 5);
  EXPECT_EQ(Int("SELECT in_flight FROM mailroom_stats('mailroom')"), 35 + 5 - 20 - 5 - 4);
  EXPECT_EQ(Int("SELECT waiting_retry FROM mailroom_stats('mailroom')"),
            4 + Int("SELECT count(*) FROM delivery_states WHERE group_id = 1 AND "
                    "state = 'retry' AND reason = 'why' AND failures = 0"));

  // Compaction folds the deltas into one row per (group, state) and changes no figure.
  const std::string before = Stats();
  EXPECT_GT(Int("SELECT count(*) FROM delivery_counts"), 5);
  Retention retention(Options(), nullptr);
  auto report = retention.RunOnce();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ran);
  EXPECT_EQ(report->counter_rows,
            Int("SELECT count(DISTINCT (group_id, state)) FROM delivery_states "
                "WHERE state NOT IN ('leased', 'retry')"));
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_counts"), report->counter_rows);
  EXPECT_EQ(Stats(), before);
}

TEST_F(RetentionTest, PrunesOldFinishedRowsOnlyAndKeepsTheCounts) {
  // 50 old jobs. A plain SENT has no deliveries row, only its bit in its lease
  // batch, and a batch goes once it is finished and old: the 30 old SENT jobs are leased in a
  // batch of their own (finished 40 days ago), the 20 others in a second one, still leased.
  Accounts(30, "sent");
  Dequeue("mailroom", 30);
  Ack("mailroom", 30, "sent");
  Accounts(20, "old");
  Dequeue("mailroom", 20);
  Ack("mailroom", 6, "failed");
  Ack("mailroom", 4, "retry");  // 10 left leased, 4 waiting retry: unfinished
  BackDate(40);
  // Recent: finished but younger than the retention, and tokens still queued.
  Accounts(10, "new");
  Dequeue("mailroom", 10);
  Ack("mailroom", 10, "sent");  // the 10 old leased ones (lowest ids) get these outcomes
  Accounts(5, "queued");
  const std::string before = Stats();
  const int64_t tokens_before = Int("SELECT count(*) FROM tokens");
  const int64_t old_finished = Int(
      "SELECT count(*) FROM delivery_states WHERE state NOT IN ('leased', 'retry') "
      "AND updated_at < now() - interval '30 days'");
  ASSERT_EQ(old_finished, 36);

  Metrics metrics;
  Retention retention(Options(7), &metrics);
  auto report = retention.RunOnce();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ran);
  // The 36 old finished jobs: 6 deliveries rows (the failures) and 1 batch (the 30 SENT).
  EXPECT_EQ(report->deliveries, 6);
  EXPECT_EQ(report->lease_batches, 1);
  // The 30 old SENT jobs' tokens. The 6 failures' tokens stay although their rows went: a
  // token is kept while a lease batch holds it, and their batch finished just now.
  EXPECT_EQ(report->tokens, 30);
  EXPECT_GT(report->transactions, 36 / 7);  // small batches
  EXPECT_EQ(metrics.Value("mailroom_collector_pruned_total", {{"table", "deliveries"}}), 6);
  EXPECT_EQ(metrics.Value("mailroom_collector_pruned_total", {{"table", "lease_batches"}}), 1);
  EXPECT_EQ(metrics.Value("mailroom_collector_pruned_total", {{"table", "tokens"}}), 30);
  EXPECT_EQ(Stats(), before);
  EXPECT_EQ(Int("SELECT count(*) FROM tokens"), tokens_before - 30);
  // Nothing unfinished or recent went: the 4 old retries, the 10 old ones acknowledged just
  // now, the 10 new leased ones and the 5 queued tokens.
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states"), 4 + 10 + 10);
  EXPECT_EQ(CountState("retry"), 4);
  EXPECT_EQ(CountState("sent"), 10);  // the pruned failures do not come back as anything
  // The tables themselves: the retries' rows; the second batch (finished just now) and the
  // new one (leased).
  EXPECT_EQ(Int("SELECT count(*) FROM deliveries"), 4);
  EXPECT_EQ(Int("SELECT count(*) FROM lease_batches"), 2);
  EXPECT_EQ(Int("SELECT count(*) FROM tokens t WHERE NOT EXISTS "
                "(SELECT 1 FROM delivery_states d WHERE d.token_id = t.id)"),
            5 + 6);  // the queued ones, and the pruned failures' (kept by their batch)
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states d WHERE NOT EXISTS "
                "(SELECT 1 FROM tokens t WHERE t.id = d.token_id)"),
            0);

  // A second pass finds nothing more.
  auto again = retention.RunOnce();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->deliveries, 0);
  EXPECT_EQ(again->lease_batches, 0);
  EXPECT_EQ(again->tokens, 0);
  EXPECT_EQ(Stats(), before);
}

// A batch job's bit says "its outcome is recorded", not "sent". When the
// per-job row that holds a failure is pruned, the job leaves the per-job picture as a pruned
// row did before; it does not come back as a SENT job of its batch.
TEST_F(RetentionTest, APrunedFailureOfABatchJobDoesNotComeBackAsSent) {
  Accounts(3, "f");
  Dequeue("mailroom", 3);
  Ack("mailroom", 1, "failed");  // the other two stay leased: the batch too
  BackDate(40);
  ASSERT_EQ(CountState("failed"), 1);
  auto report = Retention(Options(), nullptr).RunOnce();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->deliveries, 1);
  EXPECT_EQ(report->lease_batches, 0);
  EXPECT_EQ(report->tokens, 0);  // a leased batch's tokens stay
  EXPECT_EQ(CountState("failed"), 0);
  EXPECT_EQ(CountState("sent"), 0);
  EXPECT_EQ(CountState("leased"), 2);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states"), 2);
  EXPECT_EQ(Int("SELECT sent FROM mailroom_stats('mailroom')"), 0);
  EXPECT_EQ(Int("SELECT failed FROM mailroom_stats('mailroom')"), 1);
}

// A group nobody dequeues for any more (its only subscriber took a batch of 1,000 jobs and
// left; a group paused by the reputation guard is the same to the database) neither keeps its
// lease for ever nor holds back the pruning of newer tokens: with the production batch of 1,000
// rows, the pass expires the group's batch, records its jobs (tokens expired before the
// retention) as expired, walks past the 1,000 tokens it must still keep and deletes the 200
// newer expired tokens no group needs.
TEST_F(RetentionTest, AnAbandonedGroupsLeaseRunsOutAndItsTokensHoldBackNoOthers) {
  Exec("SELECT mailroom_ensure_group('audit', true)");
  Accounts(1000, "a");
  Dequeue("audit", 1000);
  Dequeue("mailroom", 1000);
  Ack("mailroom", 1000, "sent");
  Accounts(200, "n");
  Dequeue("mailroom", 200);
  Ack("mailroom", 200, "sent");
  BackDate(40);
  RunOut("1 hour");  // audit's lease ran out; no dequeue of audit will ever expire it
  const int64_t audit = Int("SELECT id FROM consumer_groups WHERE name = 'audit'");
  ASSERT_EQ(Int("SELECT count(*) FROM lease_batches WHERE state = 'leased'"), 1);

  Retention retention(Options(1000), nullptr);
  auto report = retention.RunOnce();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->tokens, 200);
  EXPECT_EQ(Int("SELECT count(*) FROM tokens"), 1000);
  EXPECT_EQ(Int("SELECT count(*) FROM tokens t JOIN accounts a ON a.id = t.account "
                "WHERE a.login LIKE 'n%'"),
            0);
  // The abandoned batch expired; its jobs end as expired (counted), not leased for ever.
  EXPECT_EQ(Int(absl::StrCat("SELECT count(*) FROM lease_batches WHERE group_id = ", audit,
                             " AND state = 'expired'")),
            1);
  EXPECT_EQ(
      Int(absl::StrCat("SELECT count(*) FROM delivery_states WHERE group_id = ", audit,
                       " AND state = 'expired' AND reason = 'token expired before delivery'")),
      1000);
  EXPECT_EQ(Int("SELECT expired FROM mailroom_stats('audit')"), 1000);
  EXPECT_EQ(Int("SELECT in_flight FROM mailroom_stats('audit')"), 0);
  EXPECT_EQ(Int("SELECT sent FROM mailroom_stats('mailroom')"), 1200);

  // A retention later their rows, the batch and the 1,000 tokens go too: the table is empty.
  BackDate(40);
  auto later = retention.RunOnce();
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ(later->deliveries, 1000);
  EXPECT_EQ(later->lease_batches, 1);
  EXPECT_EQ(later->tokens, 1000);
  EXPECT_EQ(Int("SELECT count(*) FROM tokens"), 0);
  EXPECT_EQ(Int("SELECT expired FROM mailroom_stats('audit')"), 1000);
}

// A token's deliveries rows are looked up by the whole key (group, token), once per group: the
// prune of 300 tokens reads a few pages of deliveries_pkey per token, however many rows other
// tokens have (the key's order makes a lookup by the token alone read all of it: 10,000 rows of
// another group here made it about 40 pages per token).
TEST_F(RetentionTest, ATokensPruneLooksUpItsDeliveriesByTheWholeKey) {
  Exec("SELECT mailroom_ensure_group('audit', true)");
  Accounts(10000, "held");
  Dequeue("audit", 10000);
  Ack("audit", 10000, "failed", "o");  // 10,000 deliveries rows, which hold their tokens
  const int64_t held = Int("SELECT max(id) FROM tokens");
  Accounts(300, "old");
  Dequeue("mailroom", 10300);
  Ack("mailroom", 10300, "sent");  // plain SENT: no rows, only the finished batches
  BackDate(40);
  ASSERT_EQ(Int("SELECT count(*) FROM deliveries"), 10000);
  Exec("SELECT * FROM mailroom_prune_lease_batches(0, now(), 100000)");
  ASSERT_EQ(Int("SELECT count(*) FROM lease_batches"), 0);
  // On a session of its own: a session's counts of earlier transactions not yet reported (the
  // server reports them at most once a second) count as this transaction's too.
  pqxx::connection fresh(url_);
  pqxx::nontransaction measured(fresh);
  const std::string pruned =
      measured
          .exec1(absl::StrCat(
              "WITH p AS MATERIALIZED (SELECT * FROM mailroom.mailroom_prune_tokens(", held,
              ", extract(epoch FROM now())::BIGINT, 300)) SELECT p.pruned || ' '"
              " || pg_stat_get_xact_blocks_fetched('mailroom.deliveries_pkey'::regclass) FROM p"))
              [0]
          .as<std::string>();
  const std::vector<std::string> parts = absl::StrSplit(pruned, ' ');
  ASSERT_EQ(parts.size(), 2u) << pruned;
  EXPECT_EQ(parts[0], "300");
  int64_t pages = 0;
  ASSERT_TRUE(absl::SimpleAtoi(parts[1], &pages)) << pruned;
  // Two groups, an index two levels deep: 4 pages per token; at most 6.
  EXPECT_LE(pages, 300 * 6) << pruned;
  EXPECT_EQ(Int("SELECT count(*) FROM tokens"), 10000);
}

TEST_F(RetentionTest, TokensInsideTheAbuseLimitWindowStay) {
  SentDaysAgo(12, "w", 40);
  // The limits count requests over 60 days here: the tokens still count, so they stay; their
  // finished deliveries go (the one batch the 12 SENT jobs were leased in).
  Exec("UPDATE mailroom_settings SET limit_window_seconds = 60 * 86400");
  Retention retention(Options(5), nullptr);
  auto report = retention.RunOnce();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->deliveries, 0);
  EXPECT_EQ(report->lease_batches, 1);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states"), 0);
  EXPECT_EQ(report->tokens, 0);
  EXPECT_EQ(Int("SELECT count(*) FROM tokens"), 12);
  EXPECT_EQ(Int("SELECT sent FROM mailroom_stats('mailroom')"), 12);
}

// The pool of wrong-code counters grows in the pass, never in a request: with 60 of its 64
// counters held by live sign-in codes, the pass adds 60 (64 free again); a pass with enough
// free adds none. Every counter has its sequence.
TEST_F(RetentionTest, ThePassGrowsTheWrongCodeCountersAheadOfTheRequests) {
  Exec("INSERT INTO accounts (email, login, status, activated_at) SELECT 'code' || i ||"
       " '@example.test', 'code' || i, 'active', 1 FROM generate_series(1, 60) i");
  Exec("INSERT INTO tokens (account, action) SELECT id, 'login_code' FROM accounts");
  ASSERT_EQ(Int("SELECT count(*) FROM tokens WHERE code_slot > 0"), 60);
  auto report = Retention(Options(), nullptr).RunOnce();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->code_counters_added, 60);
  EXPECT_EQ(Int("SELECT count(*) FROM code_counters"), 124);
  EXPECT_EQ(Int("SELECT count(*) FROM pg_class WHERE relkind = 'S'"
                " AND relname LIKE 'mailroom\\_code\\_attempts\\_%'"),
            124);
  report = Retention(Options(), nullptr).RunOnce();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->code_counters_added, 0);
}

// The publisher moves the staged events into the application's feed, batch after batch, once
// by itself every interval; each pass prunes the feed's events older than
// mailroom_settings.event_retention_days and the operator audit's entries older than
// audit_retention_days, whatever MAILROOM_RETENTION says.
TEST_F(RetentionTest, ThePublisherFeedsTheEventsAndThePassPrunesTheOldOnes) {
  Accounts(5, "ev");
  Dequeue("mailroom", 5);
  Ack("mailroom", 5, "sent");
  RetentionOptions o = Options();
  o.publish_batch = 2;
  o.retention = absl::ZeroDuration();
  Retention retention(o, nullptr);
  auto published = retention.PublishEvents();
  ASSERT_TRUE(published.ok()) << published.status();
  EXPECT_EQ(*published, 5);
  EXPECT_EQ(Int("SELECT count(*) FROM email_events WHERE event = 'sent'"), 5);
  EXPECT_EQ(Int("SELECT count(*) FROM email_events_staged"), 0);
  EXPECT_EQ(Int("SELECT count(*) FROM email_events_staged_sent"), 0);  // the packed SENTs too

  Exec("UPDATE email_events SET at = now() - interval '8 days' WHERE event_id <= 3");
  // And the operator audit after audit_retention_days (365 by default).
  Exec("INSERT INTO operator_audit (at, credential, method) VALUES"
       " (now() - interval '366 days', 'token 1', 'FindEmails'),"
       " (now() - interval '364 days', 'token 1', 'FindEmails')");
  auto report = retention.RunOnce();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->email_events, 3);
  EXPECT_EQ(Int("SELECT min(event_id) FROM email_events"), 4);
  EXPECT_EQ(report->operator_audit, 1);
  EXPECT_EQ(Int("SELECT count(*) FROM operator_audit"), 1);

  o.publish_interval = absl::Milliseconds(20);
  Retention looping(o, nullptr);
  looping.Start();
  Accounts(2, "later");
  Dequeue("mailroom", 2);
  Ack("mailroom", 2, "failed");
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (Int("SELECT count(*) FROM email_events WHERE event = 'failed'") < 2 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  looping.Stop();
  EXPECT_EQ(Int("SELECT count(*) FROM email_events WHERE event = 'failed'"), 2);
}

TEST_F(RetentionTest, ZeroRetentionKeepsEverything) {
  SentDaysAgo(8, "z", 400);
  RetentionOptions o = Options();
  o.retention = absl::ZeroDuration();
  auto report = Retention(o, nullptr).RunOnce();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->deliveries, 0);
  EXPECT_EQ(report->lease_batches, 0);
  EXPECT_EQ(report->tokens, 0);
  EXPECT_EQ(report->counter_rows, 1);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE state = 'sent'"), 8);
  EXPECT_EQ(Int("SELECT count(*) FROM lease_batches"), 1);
}

TEST_F(RetentionTest, ReputationDeltasFoldIntoOneRowPerHourAndOldHoursGo) {
  // Acknowledgements and feedback add one delta row each (no shared row to wait on).
  // Per provider: '' for acknowledgements, the feedback path's name for feedback.
  Exec("SELECT mailroom_reputation_add(id, '', 3, 1, 0, 0) FROM consumer_groups");
  Exec("SELECT mailroom_reputation_add(id, '', 1, 0, 0, 0) FROM consumer_groups");
  Exec("SELECT mailroom_reputation_add(id, 'ses', 2, 0, 1, 0) FROM consumer_groups");
  Exec("SELECT mailroom_reputation_add(id, 'postmark', 5, 0, 0, 1) FROM consumer_groups");
  Exec("INSERT INTO reputation_hourly (group_id, hour, sent) SELECT id, date_trunc('hour', "
       "now()) - interval '2 hours', 7 FROM consumer_groups");
  Exec("INSERT INTO reputation_hourly (group_id, hour, sent) SELECT id, date_trunc('hour', "
       "now()) - interval '92 days', 11 FROM consumer_groups");
  const int64_t groups = Int("SELECT count(*) FROM consumer_groups");
  ASSERT_GE(groups, 1);
  ASSERT_EQ(Int("SELECT count(*) FROM reputation_hourly"), 6 * groups);
  auto window = [&] {
    return Int("SELECT sum(sent) * 1000000 + sum(delivered) * 10000 + sum(bounced) * 100 + "
               "sum(complained) FROM mailroom_reputation(7 * 86400)");
  };
  const int64_t before = window();
  EXPECT_EQ(before, groups * (18 * 1000000 + 1 * 10000 + 1 * 100 + 1));
  auto report = Retention(Options(), nullptr).RunOnce();
  ASSERT_TRUE(report.ok()) << report.status();
  // The current hour (one row per provider: '', ses, postmark) and the one two hours ago stay;
  // 92 days ago is gone.
  EXPECT_EQ(report->reputation_rows, 4 * groups);
  EXPECT_EQ(Int("SELECT count(*) FROM reputation_hourly"), 4 * groups);
  EXPECT_EQ(Int("SELECT count(*) FROM reputation_hourly WHERE provider = ''"), 2 * groups);
  EXPECT_EQ(Int("SELECT count(*) FROM reputation_hourly WHERE hour < now() - interval '91 days'"),
            0);
  EXPECT_EQ(window(), before);
}

TEST_F(RetentionTest, OnePassAtATimeAcrossCollectors) {
  SentDaysAgo(3, "l", 40);
  // Another collector's pass has the turn.
  pqxx::connection other(url_);
  pqxx::nontransaction(other).exec(
      "BEGIN; LOCK TABLE mailroom.mailroom_retention_turn IN EXCLUSIVE MODE");
  auto skipped = Retention(Options(), nullptr).RunOnce();
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_FALSE(skipped->ran);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states"), 3);
  pqxx::nontransaction(other).exec("COMMIT");
  auto done = Retention(Options(), nullptr).RunOnce();
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(done->ran);
  // The 3 SENT jobs went with their batch (no deliveries row).
  EXPECT_EQ(done->lease_batches, 1);
  EXPECT_EQ(done->deliveries, 0);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states"), 0);
}

// The pass's turn is a lock only mailroom's roles may take: a role that can only connect and
// holds every advisory key mailroom ever used stops no pass.
TEST_F(RetentionTest, AnAdvisoryLockSquatterStopsNoPass) {
  SentDaysAgo(3, "q", 40);
  testing::AdvisoryLockSquatter squatter(url_, "prune_squatter");
  ASSERT_EQ(squatter.Held(), static_cast<int>(testing::MailroomAdvisoryKeys().size()));
  auto done = Retention(Options(), nullptr).RunOnce();
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(done->ran);
  EXPECT_EQ(done->lease_batches, 1);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states"), 0);
}

TEST_F(RetentionTest, UnreachableDatabaseIsUnavailable) {
  RetentionOptions o = Options();
  o.database_url = absl::StrCat("postgresql://postgres@127.0.0.1:", testing::FreePort(),
                                "/postgres?connect_timeout=2");
  auto report = Retention(o, nullptr).RunOnce();
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(RetentionTest, APassRefundsDeadHoldersLogsAndCountsThem) {
  // Holder "h" of group g was granted 9 emails, linked to a subscription handed 4 jobs of
  // which 1 came back unsent; its grant expired a minute ago: 9 - (4 - 1) = 6 come back.
  Exec("SELECT mailroom_ensure_group('g', false)");
  auto budgets = NewPgBudgetStore(url_, {});
  auto grant = budgets->Acquire({"g", "h", 9, false, 100});
  ASSERT_TRUE(grant.ok()) << grant.status();
  ASSERT_EQ(grant->emails, 9);
  Exec("SELECT mailroom_budget_handed('g', 'sub-1', 'h', 4)");
  Exec("SELECT mailroom_budget_settled('g', 'sub-1', 1)");
  Exec("UPDATE budget_grants SET expires_at = now() - INTERVAL '1 minute'");

  Metrics metrics;
  Retention retention(Options(), &metrics, budgets.get());
  auto report = retention.RunOnce();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->refunded_emails, 6);
  EXPECT_EQ(metrics.Value("mailroom_budget_refunded_emails_total", {{"group", "g"}}), 6);
  EXPECT_EQ(Int("SELECT returned_micros FROM budget_months"), 600);
  report = retention.RunOnce();  // nothing twice
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->refunded_emails, 0);
  EXPECT_EQ(metrics.Value("mailroom_budget_refunded_emails_total", {{"group", "g"}}), 6);
}

// Budget grants, budget subscriptions and soft bounces stay bounded.
class BudgetRetentionTest : public RetentionTest {
 protected:
  void SetUp() override {
    RetentionTest::SetUp();
    if (HasFatalFailure()) return;
    Exec("SELECT mailroom_ensure_group('g', false)");
    budgets_ = NewPgBudgetStore(url_, {});
  }
  // A grant of `emails` to `holder` in group g (unlimited budget: all of them), its id.
  int64_t Grant(const std::string& holder, int emails) {
    return Int(absl::StrCat("SELECT grant_id FROM mailroom_budget_grant('g', '", holder, "', ",
                            emails, ", false, 100, 60000, NULL, 0)"));
  }
  // Links subscription `owner` to `holder`, counting `handed` jobs and `unsent` settled.
  void Link(const std::string& owner, const std::string& holder, int handed, int unsent = 0) {
    Exec(absl::StrCat("SELECT mailroom_budget_handed('g', '", owner, "', '", holder, "', ", handed,
                      ")"));
    Exec(absl::StrCat("SELECT mailroom_budget_settled('g', '", owner, "', ", unsent, ")"));
  }
  void ExpireGrant(int64_t id, const std::string& ago) {
    Exec(absl::StrCat("UPDATE budget_grants SET expires_at = now() - INTERVAL '", ago,
                      "' WHERE id = ", id));
  }
  // What mailroom_budget_refund would give back now, per holder ("holder=emails "), in a
  // transaction rolled back (the margin is 0), after `first` (SQL, optional) in it.
  std::string RefundFigures(const std::string& first = "") {
    pqxx::work tx(*conn_);
    if (!first.empty()) tx.exec(first);
    std::string out;
    for (const auto& row : tx.exec("SELECT holder, emails FROM mailroom_budget_refund(0) "
                                   "ORDER BY holder")) {
      absl::StrAppend(&out, row[0].c_str(), "=", row[1].c_str(), " ");
    }
    tx.abort();
    return out;
  }
  int64_t Grants(const std::string& holder) {
    return Int(absl::StrCat("SELECT count(*) FROM budget_grants WHERE holder = '", holder, "'"));
  }
  // Calls `sql` (a prune function returning pruned, last_id, more) as RetentionOptions' pass
  // does until it says there is no more; returns "pruned/calls".
  std::string PruneCalls(const std::function<std::string(int64_t)>& sql) {
    int64_t after = 0, pruned = 0;
    int calls = 0;
    for (;;) {
      pqxx::nontransaction tx(*conn_);
      pqxx::row r = tx.exec1(sql(after));
      ++calls;
      pruned += r[0].as<int64_t>();
      after = r[1].as<int64_t>();
      if (!r[2].as<bool>()) break;
    }
    return absl::StrCat(pruned, "/", calls);
  }

  std::unique_ptr<BudgetStore> budgets_;
};

TEST_F(BudgetRetentionTest, OldGrantsGoOnlyWhenTheyCanNoLongerMatter) {
  // "refunded": a dead holder refunded long ago (10 - 3 handed = 7 came back).
  const int64_t refunded = Grant("refunded", 10);
  Link("sub-refunded", "refunded", 3);
  ExpireGrant(refunded, "1 minute");
  ASSERT_EQ(RefundFigures(), "refunded=7 ");
  ASSERT_EQ(budgets_->Refund()->size(), 1u);
  ExpireGrant(refunded, "40 days");
  // "returned": a live holder that gave back all of an old grant and holds a live one.
  const int64_t returned = Grant("returned", 5);
  ASSERT_EQ(Int(absl::StrCat("SELECT mailroom_budget_return('g', 'returned', ", returned, ", 5)")),
            5);
  ExpireGrant(returned, "40 days");
  Grant("returned", 4);
  Link("sub-returned", "returned", 2);
  // "unlinked": no subscription ever linked to it, so no refund can ever come.
  ExpireGrant(Grant("unlinked", 7), "40 days");
  // "spent": a dead linked holder that may have spent more than it was granted.
  ExpireGrant(Grant("spent", 3), "40 days");
  Link("sub-spent", "spent", 5, 1);
  // "leased": dead long ago, but its subscription still holds a lease: not refunded yet.
  ExpireGrant(Grant("leased", 6), "40 days");
  Link("sub-leased", "leased", 2);
  Accounts(2, "l");
  Exec("SELECT count(*) FROM mailroom_dequeue('g', 2, 'sub-leased', 3600000)");
  // "recent": refunded, but expired within the retention.
  const int64_t recent = Grant("recent", 8);
  Link("sub-recent", "recent", 0);
  ExpireGrant(recent, "1 minute");
  ASSERT_EQ(budgets_->Refund()->size(), 1u);  // "recent" gets its 8 back
  ExpireGrant(recent, "1 day");
  const std::string refunds_before = RefundFigures();
  // "leased" waits for its lease; "spent" has nothing to give back (3 - (5 - 1) < 0).
  ASSERT_EQ(refunds_before, "");

  Metrics metrics;
  auto report = Retention(Options(3), &metrics).RunOnce();  // no BudgetStore: no refund
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->budget_grants, 4);  // refunded, returned, unlinked, spent
  EXPECT_EQ(Grants("refunded"), 0);
  EXPECT_EQ(Grants("returned"), 1);  // the live one
  EXPECT_EQ(Grants("unlinked"), 0);
  EXPECT_EQ(Grants("spent"), 0);
  EXPECT_EQ(Grants("leased"), 1);  // kept until refunded
  EXPECT_EQ(Grants("recent"), 1);
  EXPECT_EQ(metrics.Value("mailroom_collector_pruned_total", {{"table", "budget_grants"}}), 4);
  // The subscriptions of the holders left without grants go too (not updated in 40 days).
  EXPECT_EQ(report->budget_subscriptions, 0);  // they were updated just now
  EXPECT_EQ(RefundFigures(), refunds_before);

  // The lease runs out: "leased" is refunded (6 - 2) and, expired 40 days ago, pruned in the
  // same pass; then the subscriptions of holders without grants, idle for 40 days, go.
  RunOut("1 second");
  ASSERT_EQ(RefundFigures(), "leased=4 ");
  // The jobs get their outcome, expired (as the SQL records it, without the Store's budget
  // counting): the subscription no longer holds a lease, in a deliveries row or a batch.
  Ack("g", 2, "expired", "sub-leased");
  ASSERT_EQ(Int("SELECT count(*) FROM delivery_states WHERE state = 'expired'"), 2);
  Exec("UPDATE budget_subscriptions SET updated_at = now() - INTERVAL '40 days'");
  report = Retention(Options(3), &metrics, budgets_.get()).RunOnce();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->refunded_emails, 4);
  EXPECT_EQ(report->budget_grants, 1);
  EXPECT_EQ(Grants("leased"), 0);
  // refunded, unlinked (none), spent, leased: no grant left; returned and recent keep theirs.
  EXPECT_EQ(report->budget_subscriptions, 3);
  EXPECT_EQ(Text("SELECT string_agg(owner, ',' ORDER BY owner) FROM budget_subscriptions"),
            "sub-recent,sub-returned");
  EXPECT_EQ(metrics.Value("mailroom_collector_pruned_total", {{"table", "budget_grants"}}), 5);
  EXPECT_EQ(metrics.Value("mailroom_collector_pruned_total", {{"table", "budget_subscriptions"}}),
            3);
}

TEST_F(BudgetRetentionTest, PruningNeverRaisesARefund) {
  // Holder "h" (dead, linked): an old fully returned grant, an old grant it was never
  // refunded for because its lease was held, and a recent one. Refund: 4 + 6 - (5 - 2) = 7.
  const int64_t old_returned = Grant("h", 5);
  ASSERT_EQ(Int(absl::StrCat("SELECT mailroom_budget_return('g', 'h', ", old_returned, ", 5)")), 5);
  ExpireGrant(old_returned, "50 days");
  ExpireGrant(Grant("h", 4), "45 days");
  ExpireGrant(Grant("h", 6), "1 hour");
  Link("sub-h", "h", 5, 2);
  // Holder "k" gave back part of an old grant: 9 - 3 returned - 2 handed = 4.
  const int64_t partly = Grant("k", 9);
  ASSERT_EQ(Int(absl::StrCat("SELECT mailroom_budget_return('g', 'k', ", partly, ", 3)")), 3);
  ExpireGrant(partly, "45 days");
  Link("sub-k", "k", 2);
  const std::string before = RefundFigures();
  ASSERT_EQ(before, "h=7 k=4 ");

  // Deleting any of h's grants only lowers it (by that grant's unused emails).
  {
    pqxx::work tx(*conn_);
    tx.exec("DELETE FROM budget_grants WHERE holder = 'h' AND emails = 6");
    EXPECT_EQ(tx.exec1("SELECT string_agg(holder || '=' || emails, ' ' ORDER BY holder) "
                       "FROM mailroom_budget_refund(0)")[0]
                  .as<std::string>(),
              "h=1 k=4");
    tx.abort();
  }

  auto report = Retention(Options(2), nullptr).RunOnce();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->budget_grants, 1);  // only the fully returned one
  // h's other two grants (expired 45 days and an hour ago) are folded into one: 4 + 6 emails.
  EXPECT_EQ(report->budget_grants_folded, 1);
  EXPECT_EQ(Grants("h"), 1);
  EXPECT_EQ(Int("SELECT emails FROM budget_grants WHERE holder = 'h'"), 10);
  EXPECT_EQ(Grants("k"), 1);
  EXPECT_EQ(RefundFigures(), before);
}

TEST_F(BudgetRetentionTest, GrantsArePrunedInBoundedBatches) {
  // 22 unlinked grants expired long ago and 2 recent ones, batches of 5: ceil(24 / 5) = 5
  // windows, one transaction each; the last one is short and ends the walk.
  for (int i = 0; i < 22; ++i) Grant("old", 1);
  Exec("UPDATE budget_grants SET expires_at = now() - INTERVAL '31 days'");
  Grant("new", 1);
  Grant("new", 1);
  auto prune = [](int64_t after) {
    return absl::StrCat("SELECT * FROM mailroom_prune_budget_grants(", after,
                        ", now() - INTERVAL '30 days', 5)");
  };
  EXPECT_EQ(PruneCalls(prune), "22/5");
  EXPECT_EQ(Grants("old"), 0);
  EXPECT_EQ(Grants("new"), 2);
  // A full window of recent grants that deletes nothing ends the walk (old grants after it
  // wait for a later pass)...
  for (int i = 0; i < 3; ++i) Grant("new", 1);
  for (int i = 0; i < 3; ++i) Grant("old", 1);
  Exec("UPDATE budget_grants SET expires_at = now() - INTERVAL '31 days', id = id + 1000 "
       "WHERE holder = 'old'");
  EXPECT_EQ(PruneCalls(prune), "0/1");
  EXPECT_EQ(Grants("old"), 3);
  // ...a window of old grants kept (a linked holder not refunded yet) does not.
  Exec("DELETE FROM budget_grants WHERE holder <> 'old'");
  for (int i = 0; i < 6; ++i) Grant("kept", 1);
  Link("sub-kept", "kept", 0);
  Exec("UPDATE budget_grants SET expires_at = now() - INTERVAL '31 days'");
  EXPECT_EQ(PruneCalls(prune), "3/2");  // {kept x5}, {kept, old x3}
  EXPECT_EQ(Grants("old"), 0);
  EXPECT_EQ(Grants("kept"), 6);
}

TEST_F(BudgetRetentionTest, SubscriptionsGoOnlyWithoutGrantsLeasesOrRecentUse) {
  // 7 subscriptions of holders without grants, idle for 40 days: pruned 3 at a time.
  for (int i = 0; i < 7; ++i) Link(absl::StrCat("idle-", i), absl::StrCat("gone-", i), 4, 1);
  // Kept: one whose holder still has a grant, one holding a lease, one used recently.
  Grant("alive", 3);
  Link("with-grant", "alive", 1);
  Link("with-lease", "gone-lease", 1);
  Accounts(1, "s");
  Exec("SELECT count(*) FROM mailroom_dequeue('g', 1, 'with-lease', 1)");
  RunOut("1 hour");  // run out, not settled
  Exec("UPDATE budget_subscriptions SET updated_at = now() - INTERVAL '40 days'");
  Link("recent", "gone-recent", 1);
  EXPECT_EQ(PruneCalls([](int64_t) {
              return "SELECT * FROM mailroom_prune_budget_subscriptions("
                     "now() - INTERVAL '30 days', 3)";
            }),
            "7/3");
  EXPECT_EQ(Text("SELECT string_agg(owner, ',' ORDER BY owner) FROM budget_subscriptions"),
            "recent,with-grant,with-lease");
}

TEST_F(BudgetRetentionTest, SoftBouncesOlderThanTheirWeekGoInBatches) {
  Exec("INSERT INTO soft_bounces (address, bounced_at) SELECT 'old' || i || '@example.test', "
       "now() - INTERVAL '8 days' FROM generate_series(1, 9) i");
  Exec("INSERT INTO soft_bounces (address, bounced_at) SELECT 'new' || i || '@example.test', "
       "now() - INTERVAL '6 days' FROM generate_series(1, 2) i");
  auto report = Retention(Options(4), nullptr).RunOnce();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->soft_bounces, 9);
  EXPECT_EQ(Int("SELECT count(*) FROM soft_bounces WHERE address LIKE 'new%'"), 2);
  EXPECT_EQ(Int("SELECT count(*) FROM soft_bounces"), 2);
  EXPECT_EQ(PruneCalls([](int64_t) { return "SELECT * FROM mailroom_prune_soft_bounces(4)"; }),
            "0/1");
}

// The abuse limits' counter of an address whose newest request left the window goes in every
// pass, even with retention 0 (it is the limits' state, not history); a live one stays.
TEST_F(BudgetRetentionTest, IdleAddressCountersGoEveryPass) {
  Exec("INSERT INTO mailroom_address_requests (address, action, times)"
       " SELECT 'idle' || i || '@example.test', 'activation',"
       "        ARRAY[EXTRACT(EPOCH FROM now())::BIGINT - 86401] FROM generate_series(1, 5) i");
  Exec("INSERT INTO mailroom_address_requests (address, action, times)"
       " VALUES ('live@example.test', 'activation', ARRAY[EXTRACT(EPOCH FROM now())::BIGINT])");
  RetentionOptions o = Options(2);
  o.retention = absl::ZeroDuration();
  auto report = Retention(o, nullptr).RunOnce();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->address_requests, 5);
  EXPECT_EQ(Text("SELECT string_agg(address, ',') FROM mailroom_address_requests"),
            "live@example.test");
}

TEST_F(BudgetRetentionTest, ZeroRetentionKeepsBudgetRowsAndSoftBounces) {
  ExpireGrant(Grant("unlinked", 2), "400 days");
  Link("idle", "nobody", 1);
  Exec("UPDATE budget_subscriptions SET updated_at = now() - INTERVAL '400 days'");
  Exec("INSERT INTO soft_bounces (address, bounced_at) "
       "VALUES ('a@example.test', now() - INTERVAL '400 days')");
  RetentionOptions o = Options();
  o.retention = absl::ZeroDuration();
  auto report = Retention(o, nullptr).RunOnce();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->budget_grants + report->budget_subscriptions + report->soft_bounces, 0);
  EXPECT_EQ(Int("SELECT count(*) FROM budget_grants") +
                Int("SELECT count(*) FROM budget_subscriptions") +
                Int("SELECT count(*) FROM soft_bounces"),
            3);
}

TEST_F(BudgetRetentionTest, ALiveSendersGrantsAreFoldedAndItsRefundIsUnchanged) {
  // A sender at work for a long time: 40 grants of 5 emails, 3 of them given back in part,
  // expired over the last days, its newest grant live; one subscription handed 150 jobs, 20
  // settled unsent. Another holder's grants are not mixed in.
  for (int i = 0; i < 40; ++i) Grant("live", 5);
  Exec("UPDATE budget_grants SET returned_emails = 2 WHERE id IN (3, 17, 30)");
  Exec("UPDATE budget_grants SET expires_at = now() - make_interval(hours => 2 + id::INT)");
  const int64_t newest = Grant("live", 5);
  Link("sub-live", "live", 150, 20);
  ExpireGrant(Grant("other", 7), "3 hours");
  ExpireGrant(Grant("other", 7), "3 hours");
  Link("sub-other", "other", 1);
  Exec("UPDATE budget_grants SET price_micros = 200 WHERE holder = 'other' AND id = (SELECT "
       "max(id) FROM budget_grants WHERE holder = 'other')");  // another price: not folded
  // Once the sender is dead, it would get 41 * 5 - 6 - (150 - 20) = 69 back; other 14 - 1.
  auto dead_refund = [&] {
    return RefundFigures(absl::StrCat(
        "UPDATE budget_grants SET expires_at = now() - INTERVAL '1 minute' WHERE id = ", newest));
  };
  ASSERT_EQ(dead_refund(), "live=69 other=13 ");
  ASSERT_EQ(RefundFigures(), "other=13 ");  // the live sender gets nothing while it lives

  auto report = Retention(Options(7), nullptr).RunOnce();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->budget_grants, 0);
  // Windows of 7 ids: 40 expired grants of "live" fold to one row per window (6), then the
  // next pass folds those 6 into 1.
  EXPECT_EQ(report->budget_grants_folded, 40 - 6);
  report = Retention(Options(7), nullptr).RunOnce();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->budget_grants_folded, 5);
  EXPECT_EQ(Grants("live"), 2);  // the folded row and the live grant
  EXPECT_EQ(Int("SELECT emails * 1000 + returned_emails FROM budget_grants "
                "WHERE holder = 'live' AND id <> " +
                std::to_string(newest)),
            200 * 1000 + 6);
  EXPECT_EQ(Grants("other"), 2);
  EXPECT_EQ(RefundFigures(), "other=13 ");
  EXPECT_EQ(dead_refund(), "live=69 other=13 ");
  EXPECT_EQ(Int("SELECT sum(emails) * 1000 + sum(returned_emails) FROM budget_grants"),
            (41 * 5 + 14) * 1000 + 6);
}

}  // namespace
}  // namespace mailroom
