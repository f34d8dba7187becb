// The schema's behaviour (seeds 000/001 "Let's Try It Out", with the seeds' defects fixed),
// against a throwaway PostgreSQL, one fresh database per test.
#include <algorithm>
#include <functional>
#include <iostream>
#include <pqxx/pqxx>
#include <regex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collector/schema/migrate.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/intruder.h"
#include "testing/migrated_database.h"
#include "testing/pg_server.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;

// Counts the notifications of one channel a connection receives.
class CountingReceiver : public pqxx::notification_receiver {
 public:
  CountingReceiver(pqxx::connection_base& c, const std::string& channel)
      : pqxx::notification_receiver(c, channel) {}
  void operator()(const std::string&, int) override { ++count; }
  int count = 0;
};

class SchemaTest : public testing::MigratedDatabaseTest {
 protected:
  pqxx::row Row(const std::string& sql) {
    pqxx::nontransaction tx(*conn_);
    return tx.exec1(sql);
  }
  int64_t Now() { return Int("SELECT EXTRACT(EPOCH FROM now())::BIGINT"); }
};

TEST_F(SchemaTest, ProvisioningCreatesAnActivationToken) {
  Exec("INSERT INTO accounts (email, login) VALUES ('user@example.com', 'user123')");
  CollectSignups();
  pqxx::row a = Row("SELECT id, status, created_at, activated_at IS NULL FROM accounts");
  EXPECT_EQ(a[1].as<std::string>(), "provisioned");
  EXPECT_NEAR(a[2].as<int64_t>(), Now(), 5);
  EXPECT_TRUE(a[3].as<bool>());
  pqxx::row t = Row("SELECT action, octet_length(secret), code, account, expires_at, "
                    "consumed_at IS NULL FROM tokens");
  EXPECT_EQ(t[0].as<std::string>(), "activation");
  EXPECT_EQ(t[1].as<int>(), 32);
  EXPECT_TRUE(std::regex_match(t[2].as<std::string>(), std::regex("[0-9]{5}")));
  EXPECT_EQ(t[3].as<int64_t>(), a[0].as<int64_t>());
  EXPECT_NEAR(t[4].as<int64_t>(), Now() + 15 * 60, 5);
  EXPECT_TRUE(t[5].as<bool>());
}

TEST_F(SchemaTest, ConsumingTheActivationTokenActivatesTheAccount) {
  Exec("INSERT INTO accounts (email, login) VALUES ('user@example.com', 'user123')");
  CollectSignups();
  Exec("UPDATE tokens SET consumed_at = EXTRACT(EPOCH FROM now()) WHERE action = 'activation'");
  pqxx::row a = Row("SELECT status, activated_at, status_changed_at FROM accounts");
  EXPECT_EQ(a[0].as<std::string>(), "active");
  EXPECT_NEAR(a[1].as<int64_t>(), Now(), 5);
  EXPECT_EQ(a[2].as<int64_t>(), a[1].as<int64_t>());
}

TEST_F(SchemaTest, SuspendAndUnsuspendMaintainTimestamps) {
  Exec("INSERT INTO accounts (email, login) VALUES ('user@example.com', 'user123')");
  CollectSignups();
  Exec("UPDATE tokens SET consumed_at = EXTRACT(EPOCH FROM now())");
  Exec("UPDATE accounts SET status = 'suspended'");
  pqxx::row s = Row(
      "SELECT status, suspended_at IS NOT NULL, unsuspended_at IS NULL FROM accounts");
  EXPECT_EQ(s[0].as<std::string>(), "suspended");
  EXPECT_TRUE(s[1].as<bool>());
  EXPECT_TRUE(s[2].as<bool>());
  Exec("UPDATE accounts SET status = 'active'");
  pqxx::row u = Row("SELECT status, suspended_at IS NULL, unsuspended_at IS NOT NULL, "
                    "activated_at IS NOT NULL FROM accounts");
  EXPECT_EQ(u[0].as<std::string>(), "active");
  EXPECT_TRUE(u[1].as<bool>());
  EXPECT_TRUE(u[2].as<bool>());
  EXPECT_TRUE(u[3].as<bool>());
}

TEST_F(SchemaTest, NeverActivatedUnsuspendGoesBackToProvisionedWithALiveToken) {
  Exec("INSERT INTO accounts (email, login) VALUES ('user@example.com', 'user123')");
  CollectSignups();
  Exec("UPDATE tokens SET expires_at = 1");  // its first token has long expired
  Exec("UPDATE accounts SET status = 'suspended'");
  Exec("UPDATE accounts SET status = 'active'");
  EXPECT_EQ(Row("SELECT status FROM accounts")[0].as<std::string>(), "provisioned");
  EXPECT_EQ(Int("SELECT count(*) FROM tokens WHERE action = 'activation' AND consumed_at IS NULL "
                "AND expires_at > EXTRACT(EPOCH FROM now())"),
            1);
  // The first activation and the fresh one, and the suspension's notice.
  EXPECT_EQ(Int("SELECT count(*) FROM tokens WHERE action = 'activation'"), 2);
  EXPECT_EQ(Int("SELECT count(*) FROM tokens WHERE action = 'account_suspended'"), 1);
}

TEST_F(SchemaTest, UnsuspendKeepsAStillLiveTokenInsteadOfIssuingAnother) {
  Exec("INSERT INTO accounts (email, login) VALUES ('user@example.com', 'user123')");
  CollectSignups();
  Exec("UPDATE accounts SET status = 'suspended'");
  Exec("UPDATE accounts SET status = 'active'");
  EXPECT_EQ(Row("SELECT status FROM accounts")[0].as<std::string>(), "provisioned");
  EXPECT_EQ(Int("SELECT count(*) FROM tokens WHERE action = 'activation'"), 1);
}

// An application that predates mailroom's interface signs up users with a role of its own, with
// the usual grants on mailroom's schema: rights on its tables and USAGE on the sequences
// (nextval), not SELECT. The triggers that run in its transaction must work for it, the
// wake-up's read of the collectors' mark included.
TEST_F(SchemaTest, AnApplicationRoleWithTheUsualGrantsSignsUpAndAsksForARecovery) {
  Exec("DROP ROLE IF EXISTS mailroom_test_app");
  Exec("CREATE ROLE mailroom_test_app");
  Exec("GRANT USAGE ON SCHEMA mailroom TO mailroom_test_app");
  Exec(
      "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA mailroom TO mailroom_test_app");
  Exec("GRANT USAGE ON ALL SEQUENCES IN SCHEMA mailroom TO mailroom_test_app");
  pqxx::connection c(url_);
  pqxx::nontransaction app(c);
  app.exec("SET ROLE mailroom_test_app");
  app.exec("INSERT INTO accounts (email, login) VALUES ('app@example.com', 'app')");
  CollectSignups();
  app.exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts "
           "WHERE login = 'app'");
  // USAGE on every sequence lets it call nextval, which cannot walk the collection's mark (the
  // id of a transaction whose tokens skip the limits trigger) to its own transaction's id: the
  // increment is the largest there is. Setting it needs UPDATE.
  EXPECT_THROW(app.exec("SELECT count(nextval('mailroom_collection_xact'))"
                        "  FROM generate_series(1, 3)"),
               pqxx::sql_error);
  EXPECT_THROW(app.exec("SELECT setval('mailroom_collection_xact',"
                        " pg_current_xact_id()::TEXT::BIGINT)"),
               pqxx::insufficient_privilege);
  app.exec("RESET ROLE");
  EXPECT_EQ(Row("SELECT count(*) FROM tokens t JOIN accounts a ON a.id = t.account "
                "WHERE a.login = 'app'")[0]
                .as<int>(),
            2);
}

// The rights an application that predates mailroom's interface was told to grant its role are
// still enough for a signup, a recovery and an activation by hand, and leave the rest of
// mailroom's tables and functions out of its reach.
TEST_F(SchemaTest, AnApplicationRoleWithTheListedRightsOnlySignsUpAndActivates) {
  Exec("DROP ROLE IF EXISTS mailroom_test_narrow");
  Exec("CREATE ROLE mailroom_test_narrow");
  Exec("GRANT USAGE ON SCHEMA mailroom TO mailroom_test_narrow");
  Exec("GRANT SELECT, INSERT, UPDATE ON accounts, tokens, mailroom_address_requests"
       " TO mailroom_test_narrow");
  Exec("GRANT INSERT ON mailroom_signups TO mailroom_test_narrow");
  Exec("GRANT SELECT ON mailroom_settings TO mailroom_test_narrow");
  Exec("GRANT USAGE ON SEQUENCE accounts_id_seq, tokens_id_seq TO mailroom_test_narrow");
  pqxx::connection c(url_);
  pqxx::nontransaction app(c);
  app.exec("SET ROLE mailroom_test_narrow");
  app.exec("INSERT INTO accounts (email, login) VALUES ('narrow@example.com', 'narrow')");
  CollectSignups();
  app.exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts"
           " WHERE login = 'narrow'");
  app.exec("UPDATE tokens SET consumed_at = EXTRACT(EPOCH FROM now())"
           " WHERE action = 'activation'");
  EXPECT_THROW(app.exec("SELECT count(*) FROM group_budgets"), pqxx::insufficient_privilege);
  EXPECT_THROW(app.exec("SELECT count(*) FROM suppressions"), pqxx::insufficient_privilege);
  // mailroom's own calls run with the caller's rights: the application's role can neither
  // mark a collector (so that commits skip their NOTIFY), take or expire leases, nor collect
  // signups.
  EXPECT_THROW(app.exec("SELECT mailroom_collector_mark(false)"), pqxx::insufficient_privilege);
  EXPECT_THROW(app.exec("SELECT * FROM mailroom_dequeue('mailroom', 10, 'app', 60000)"),
               pqxx::insufficient_privilege);
  EXPECT_THROW(app.exec("SELECT * FROM mailroom_expire_leases(1, 0, 10)"),
               pqxx::insufficient_privilege);
  EXPECT_THROW(app.exec("SELECT mailroom_collect_signups(10)"), pqxx::insufficient_privilege);
  // Nor can it make the limits trigger skip its tokens as it skips a collection's: the
  // collection's mark is a sequence the role may read and not set.
  EXPECT_THROW(app.exec("SELECT setval('mailroom_collection_xact',"
                        " pg_current_xact_id()::TEXT::BIGINT)"),
               pqxx::insufficient_privilege);
  // Nor hold back every collection: they take turns on the settings' row, which it may read,
  // not lock.
  EXPECT_THROW(app.exec("SELECT 1 FROM mailroom_settings FOR SHARE"), pqxx::insufficient_privilege);
  app.exec("RESET ROLE");
  EXPECT_EQ(Text("SELECT status FROM accounts WHERE login = 'narrow'"), "active");
  EXPECT_EQ(Int("SELECT count(*) FROM tokens WHERE NOT rate_limited"), 2);
}

// Every signup writes an entry in each index of tokens: only those a reader needs (the primary
// key; the secret, the application's look-up; the dequeue's window per class; the account's
// tokens by action and time; the account's pending token per action). The idempotency keys'
// index holds keyed tokens only: a signup writes no entry in it.
TEST_F(SchemaTest, TokensHaveOnlyTheIndexesTheirReadersNeed) {
  EXPECT_EQ(Text("SELECT string_agg(indexname, ',' ORDER BY indexname) FROM pg_indexes"
                 " WHERE tablename = 'tokens'"),
            "tokens_account_action_idx,tokens_idempotency_key_idx,tokens_pending_idx,tokens_pkey,"
            "tokens_priority_txid_id_idx,tokens_secret_key");
  EXPECT_EQ(Text("SELECT indexdef LIKE '%WHERE (idempotency_key IS NOT NULL)' FROM pg_indexes"
                 " WHERE indexname = 'tokens_idempotency_key_idx'"),
            "t");
}

// A signup wakes the collector itself (its queued row's statement NOTIFYs), as a token the
// application inserts does.
TEST_F(SchemaTest, TokenInsertNotifiesTheConfiguredChannel) {
  pqxx::connection listener(url_);
  CountingReceiver r(listener, Text("SELECT channel FROM mailroom_settings"));
  // Commits notify while some collector is idle: this listener registers as an idle one.
  pqxx::nontransaction(listener).exec("SELECT mailroom_collector_mark(true)");
  Exec("INSERT INTO accounts (email, login) VALUES ('a@example.com', 'a')");
  listener.await_notification(5, 0);
  EXPECT_EQ(r.count, 1);

  // 1,000 accounts in one transaction: PostgreSQL folds the identical notifications, so the
  // listener may be woken only once. The collector treats NOTIFY as a wake-up, not a count.
  r.count = 0;
  Exec("INSERT INTO accounts (email, login) SELECT 'b' || i || '@example.com', 'b' || i "
       "FROM generate_series(1, 1000) i");
  listener.await_notification(5, 0);
  while (listener.get_notifs() > 0) {
  }
  EXPECT_GE(r.count, 1);
  EXPECT_LT(r.count, 1000);

  // A password recovery the application inserts.
  r.count = 0;
  Exec("INSERT INTO tokens (account, action) SELECT min(id), 'password_recovery' FROM accounts");
  listener.await_notification(5, 0);
  EXPECT_EQ(r.count, 1);

  // The channel is one setting: change it and the trigger follows.
  Exec("UPDATE mailroom_settings SET channel = 'other_channel'");
  CountingReceiver other(listener, "other_channel");
  Exec("INSERT INTO accounts (email, login) VALUES ('c@example.com', 'c')");
  listener.await_notification(5, 0);
  EXPECT_EQ(other.count, 1);
}

TEST_F(SchemaTest, CodesAreAlwaysFiveDigitsFromACryptographicSource) {
  pqxx::nontransaction tx(*conn_);
  std::set<char> first_digits;
  int leading_zero = 0;
  pqxx::result r = tx.exec("SELECT mailroom_random_code() FROM generate_series(1, 20000)");
  std::vector<int> counts(10, 0);
  for (const auto& row : r) {
    std::string code = row[0].as<std::string>();
    ASSERT_TRUE(std::regex_match(code, std::regex("[0-9]{5}"))) << code;
    counts[code[0] - '0']++;
    leading_zero += code[0] == '0';
  }
  // Uniform first digit: chi-square with 9 degrees of freedom below 27.9 (p = 0.001).
  double chi = 0;
  for (int c : counts) chi += (c - 2000.0) * (c - 2000.0) / 2000.0;
  EXPECT_LT(chi, 27.9);
  EXPECT_GT(leading_zero, 0);  // leading zeros are kept
  std::string def =
      tx.exec1("SELECT pg_get_functiondef('mailroom_random_code'::regproc)")[0].as<std::string>();
  // PostgreSQL's gen_random_uuid (pg_strong_random), never random().
  EXPECT_THAT(def, HasSubstr("gen_random_uuid()"));
  EXPECT_EQ(def.find(" random()"), std::string::npos);
  EXPECT_EQ(def.find("(random()"), std::string::npos);
}

TEST_F(SchemaTest, NullOrShortCodesAreRejected) {
  Exec("INSERT INTO accounts (email, login) VALUES ('a@example.com', 'a')");
  CollectSignups();
  EXPECT_THROW(Exec("INSERT INTO tokens (account, action, code) SELECT id, 'activation', NULL "
                    "FROM accounts"),
               pqxx::not_null_violation);
  EXPECT_THROW(Exec("INSERT INTO tokens (account, action, code) SELECT id, 'activation', '1234' "
                    "FROM accounts"),
               pqxx::check_violation);
}

TEST_F(SchemaTest, TimestampsGoPast2038) {
  Exec("INSERT INTO accounts (email, login, created_at) VALUES ('a@example.com', 'a', 4102444800)");
  CollectSignups();
  Exec("UPDATE tokens SET expires_at = 4102444800, consumed_at = 4102444800");
  EXPECT_EQ(Int("SELECT created_at FROM accounts"), 4102444800);  // 2100-01-01
  EXPECT_EQ(Int("SELECT expires_at FROM tokens"), 4102444800);
  EXPECT_EQ(Int("SELECT count(*) FROM information_schema.columns WHERE table_name IN "
                "('accounts', 'tokens') AND column_name LIKE '%_at' AND data_type <> 'bigint'"),
            0);
}

TEST_F(SchemaTest, TokenMayPrecedeItsAccountInOneTransaction) {
  pqxx::work tx(*conn_);
  tx.exec("INSERT INTO tokens (id, account, action) VALUES (1000, 77, 'activation')");
  tx.exec("INSERT INTO accounts (id, email, login, status) "
          "VALUES (77, 'x@example.com', 'x', 'active')");
  EXPECT_NO_THROW(tx.commit());
}

TEST_F(SchemaTest, StatsOfNullListsEveryGroup) {
  Exec("SELECT mailroom_ensure_group('audit')");
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom_stats(NULL)"), 2);
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom_stats('')"), 2);
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom_stats('audit')"), 1);
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom_stats('nope')"), 0);
}

TEST_F(SchemaTest, AGroupFromTheEarliestUnexpiredTokenGetsEverySendableToken) {
  Exec("INSERT INTO accounts (email, login) SELECT 'e' || i || '@example.com', 'e' || i"
       "  FROM generate_series(1, 3) i");
  CollectSignups();
  Exec("UPDATE tokens SET expires_at = 1 WHERE id = (SELECT min(id) FROM tokens)");
  Exec("INSERT INTO accounts (email, login) VALUES ('f@example.com', 'f')");
  CollectSignups();
  // A token whose transaction is still open while the groups are created.
  pqxx::connection other(url_);
  pqxx::work open_tx(other);
  open_tx.exec("INSERT INTO accounts (email, login) VALUES ('g@example.com', 'g')");
  Exec("SELECT mailroom_ensure_group('early', true)");
  Exec("SELECT mailroom_ensure_group('late', false)");
  Exec("SELECT mailroom_ensure_group('late2')");
  open_tx.commit();
  CollectSignups();
  // Existing groups are left alone.
  const std::string cursors =
      "SELECT string_agg(c.priority || ' ' || c.prev_snapshot, ', ' ORDER BY c.priority)"
      "  FROM group_cursors c JOIN consumer_groups g ON g.id = c.group_id WHERE g.name = 'early'";
  const std::string before = Row(cursors)[0].as<std::string>();
  Exec("SELECT mailroom_ensure_group('early', true)");
  EXPECT_EQ(Row(cursors)[0].as<std::string>(), before);
  auto dequeue = [&](const std::string& group) {
    pqxx::work tx(*conn_);
    int64_t n = tx.exec1("SELECT count(*) FROM mailroom_dequeue('" + group +
                         "', 100, 'o', 60000)")[0]
                    .as<int64_t>();
    tx.commit();
    return n;
  };
  EXPECT_EQ(dequeue("early"), 4);  // 2 + f + g; the expired one is recorded as expired
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states d JOIN consumer_groups g ON g.id = d.group_id"
                " WHERE g.name = 'early' AND d.state = 'expired'"),
            1);
  EXPECT_EQ(dequeue("late"), 1);  // only g, made a token after the group was created
  EXPECT_EQ(dequeue("late2"), 1);
}

// Collects the server's notices (here: auto_explain's plans sent with client_min_messages=log).
class NoticeCollector : public pqxx::errorhandler {
 public:
  explicit NoticeCollector(pqxx::connection_base& c) : pqxx::errorhandler(c) {}
  bool operator()(const char msg[]) noexcept override {
    notices.emplace_back(msg);
    return false;
  }
  std::vector<std::string> notices;
};

// Makes every statement `c` runs, nested ones included, send its plan as a notice (auto_explain,
// custom and generic plans alike); `actual_rows` adds the rows each node really read.
void ExplainEveryStatement(pqxx::connection_base& c, bool actual_rows) {
  pqxx::nontransaction tx(c);
  tx.exec("LOAD 'auto_explain'");
  tx.exec("SET auto_explain.log_min_duration = 0");
  tx.exec("SET auto_explain.log_nested_statements = on");
  tx.exec(absl::StrCat("SET auto_explain.log_analyze = ", actual_rows ? "on" : "off"));
  tx.exec("SET client_min_messages = log");
}

// The dequeue's window read must be an index range scan from the cursor on tokens (txid, id)
// whatever the statistics say: on a fresh, never ANALYZEd queue the planner used to read the
// whole queue (and all accounts) on each connection's first calls. auto_explain shows the plans
// the function really runs (nested statements, custom and generic plans alike).
TEST_F(SchemaTest, DequeueWindowIsAnIndexRangeScanWithoutStatistics) {
  Exec("ALTER TABLE tokens SET (autovacuum_enabled = false);"
       "ALTER TABLE accounts SET (autovacuum_enabled = false);"
       "ALTER TABLE deliveries SET (autovacuum_enabled = false)");
  Exec("INSERT INTO accounts (email, login) SELECT 'u' || i || '@example.com', 'u' || i"
       " FROM generate_series(1, 20000) i");
  CollectSignups();
  // Recoveries too (one per active account), so that both cursors read windows.
  Exec("INSERT INTO accounts (email, login, status) SELECT 'r' || i || '@example.com', 'r' || i,"
       " 'active' FROM generate_series(1, 3000) i");
  CollectSignups();
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts"
       " WHERE status = 'active'");
  ASSERT_EQ(Int("SELECT count(*) FROM pg_stats WHERE tablename IN ('tokens', 'accounts')"), 0)
      << "the test needs a queue without planner statistics";

  pqxx::connection c(url_);
  NoticeCollector plans(c);
  ExplainEveryStatement(c, /*actual_rows=*/false);
  // More calls than plpgsql's five custom plans, so that a generic plan is checked too.
  int64_t jobs = 0;
  for (int i = 0; i < 8; ++i) {
    pqxx::work tx(c);
    jobs += tx.exec1(
                  "SELECT count(*) FROM mailroom_dequeue('mailroom', 1000, 'plan-test', 60000)")[0]
                .as<int64_t>();
    tx.commit();
  }
  EXPECT_EQ(jobs, 8000);
  // Recoveries first across the whole backlog: the first three batches are the 3000 of them.
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
                " WHERE t.action = 'password_recovery' AND d.recovery"),
            3000);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE NOT recovery"), 5000);
  // The recovery lane: recoveries only, in more calls than five here too.
  Exec("INSERT INTO accounts (email, login, status) SELECT 'q' || i || '@example.com', 'q' || i,"
       " 'active' FROM generate_series(1, 500) i");
  CollectSignups();
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts"
       " WHERE login LIKE 'q%'");
  int64_t lane = 0;
  for (int i = 0; i < 7; ++i) {
    pqxx::work tx(c);
    lane += tx.exec1("SELECT count(*) FROM mailroom_dequeue('mailroom', 100, 'plan-test', 60000,"
                     " true)")[0]
                .as<int64_t>();
    tx.commit();
  }
  EXPECT_EQ(lane, 500);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE NOT recovery"), 5000);
  // Jobs due again: both classes' scans of deliveries, with leases run out (a fresh, never
  // ANALYZEd deliveries table too). The fresh jobs are in lease batches: their
  // leases run out there, and the next dequeue of each class turns them into deliveries rows.
  Exec("UPDATE deliveries SET due_at = now() - interval '1 second'");
  Exec("UPDATE lease_batches SET due_at = now() - interval '1 second' WHERE state = 'leased'");
  {
    pqxx::work tx(c);
    EXPECT_EQ(tx.exec1("SELECT count(*) FROM mailroom_dequeue('mailroom', 100, 'plan-test',"
                       " 60000, true)")[0]
                  .as<int64_t>(),
              100);
    tx.commit();
  }
  {
    pqxx::work tx(c);
    EXPECT_EQ(
        tx.exec1("SELECT count(*) FROM mailroom_dequeue('mailroom', 1000, 'plan-test', 60000)")[0]
            .as<int64_t>(),
        1000);
    tx.commit();
  }
  // mailroom_ack writes each acknowledged row by ctid after a primary-key probe: it never
  // reads the subscriber's other leases (before 0020 it read them all through
  // deliveries_owner_idx when deliveries had no statistics).
  // The activations below were handed out fresh, so they are batch jobs (the
  // dequeue above took recoveries only): released first, they get their per-job rows (leased,
  // attempt 1), so that the acknowledgement takes 0020's per-job write whose plan this checks.
  ASSERT_EQ(Int("SELECT mailroom_release('mailroom', 'plan-test', (SELECT array_agg(token_id)"
                " FROM delivery_states WHERE state = 'leased' AND token_id < 500))"),
            499);
  {
    pqxx::work tx(c);
    EXPECT_EQ(tx.exec1("SELECT count(*) FROM mailroom_ack('mailroom', 'plan-test',"
                       " (SELECT array_agg(token_id ORDER BY token_id) FROM deliveries"
                       "   WHERE state = 'leased' AND token_id < 500),"
                       " (SELECT array_agg(attempts ORDER BY token_id) FROM deliveries"
                       "   WHERE state = 'leased' AND token_id < 500),"
                       " array_fill('sent'::TEXT, ARRAY[499]), array_fill(''::TEXT, ARRAY[499]),"
                       " array_fill(0, ARRAY[499]), array_fill(100::BIGINT, ARRAY[499]))")[0]
                  .as<int64_t>(),
              499);
    tx.commit();
  }
  int windows = 0, due = 0, acks = 0;
  for (const std::string& n : plans.notices) {
    if (n.find("UPDATE deliveries d") != std::string::npos &&
        n.find("u.outcome") != std::string::npos) {
      ++acks;
      EXPECT_THAT(n, HasSubstr("TID Cond: (ctid = u.tid)")) << n;
      EXPECT_THAT(n, ::testing::Not(HasSubstr("deliveries_owner_idx"))) << n;
      continue;
    }
    if (n.find("NOT pg_visible_in_snapshot(t.txid, p_prev)") != std::string::npos) {
      ++windows;
      EXPECT_THAT(n, HasSubstr("Index Scan using tokens_priority_txid_id_idx on tokens")) << n;
    } else if (n.find("FOR UPDATE SKIP LOCKED") != std::string::npos &&
               n.find("d.due_at <= now()") != std::string::npos) {
      ++due;
      EXPECT_THAT(n, HasSubstr(n.find("NOT d.recovery") != std::string::npos
                                   ? "Index Scan using deliveries_due_idx on deliveries"
                                   : "Index Scan using deliveries_due_recovery_idx on deliveries"))
          << n;
    } else {
      continue;
    }
    EXPECT_THAT(n, ::testing::Not(HasSubstr("Seq Scan"))) << n;
    EXPECT_THAT(n, ::testing::Not(HasSubstr("Bitmap Heap Scan"))) << n;
    EXPECT_THAT(n, ::testing::Not(HasSubstr("Sort Key"))) << n;
  }
  EXPECT_GE(windows, 15) << "auto_explain showed no window read";
  EXPECT_GE(due, 17) << "auto_explain showed no read of jobs due again";
  EXPECT_EQ(acks, 1) << "auto_explain showed no acknowledgement";
}

// The window read starts at the cursor, not at the class's first token: late in a long drain it
// reads the index pages of its own window only. Since 0022 the dequeue runs its generic plans
// from the first call; a window written as `t.action = class AND (action, txid, id) > (class,
// cursor)` still showed "Index Scan using tokens_priority_txid_id_idx" (the test above passes),
// but the scan began at the class's first token on every call: a 1,000,000 drain fell to 14,000
// jobs/s in its last tenth. Here the 30th call of 1000 jobs would read the 29,000 index entries
// before its window (over 100 pages) instead of about 30 pages of index and heap.
TEST_F(SchemaTest, DequeueWindowStartsAtTheCursorLateInADrain) {
  // 10,000 per transaction: each token takes an advisory lock on its address until commit.
  for (int from = 1; from <= 30000; from += 10000) {
    Exec(absl::StrCat("INSERT INTO accounts (email, login) SELECT 'u' || i || '@example.com',"
                      " 'u' || i FROM generate_series(",
                      from, ", ", from + 9999, ") i"));
    CollectSignups();
  }
  pqxx::connection c(url_);
  auto dequeue = [&c]() {
    pqxx::work tx(c);
    int64_t n = tx.exec1("SELECT count(*) FROM mailroom_dequeue('mailroom', 1000, 'cursor-test',"
                         " 60000)")[0]
                    .as<int64_t>();
    tx.commit();
    return n;
  };
  for (int i = 0; i < 29; ++i) ASSERT_EQ(dequeue(), 1000);
  NoticeCollector plans(c);
  ExplainEveryStatement(c, /*actual_rows=*/true);
  {
    pqxx::nontransaction tx(c);
    tx.exec("SET auto_explain.log_buffers = on");
  }
  EXPECT_EQ(dequeue(), 1000);
  // The buffers of the window's scan of tokens (the node itself: index and heap pages), in the
  // window read that found the 1000 activations.
  const std::regex buffers(R"(Buffers: shared(?: hit=(\d+))?(?: read=(\d+))?)");
  int windows = 0;
  for (const std::string& n : plans.notices) {
    if (n.find("NOT pg_visible_in_snapshot(t.txid, p_prev)") == std::string::npos ||
        n.find("rows=1000 loops=1") == std::string::npos) {
      continue;
    }
    std::vector<std::string> lines = absl::StrSplit(n, '\n');
    for (size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].find("Index Scan using tokens_priority_txid_id_idx on tokens") ==
          std::string::npos) {
        continue;
      }
      ++windows;
      int64_t pages = -1;
      for (size_t j = i + 1; j < lines.size() && lines[j].find("->") == std::string::npos; ++j) {
        std::smatch m;
        if (std::regex_search(lines[j], m, buffers)) {
          pages = (m[1].matched ? std::stoll(m[1]) : 0) + (m[2].matched ? std::stoll(m[2]) : 0);
        }
      }
      EXPECT_GE(pages, 0) << "no Buffers line: " << n;
      EXPECT_LT(pages, 60) << n;
    }
  }
  EXPECT_EQ(windows, 1) << "auto_explain showed no window read of 1000 tokens";
}

// Every table the dequeue reads besides the window (accounts and suppressions for
// each token, tokens and deliveries for jobs due again) must be read by a per-row probe, whatever
// the statistics said when the plan was made. A session that plans while the tables are analysed
// empty keeps plpgsql's generic plans after the fifth call; if those read accounts under a
// Materialize or a Hash, every later batch reads every account (10.4 million rows thrown away for
// 1,000 jobs in collector_bench's latency run). Checks every scan of accounts, tokens and
// deliveries in every statement the function runs once the tables have grown (auto_explain with
// actual rows). Fails on 0014: the due-again statements read the group's whole deliveries per
// lookup (3,016 rows removed by a filter) and per job (3.5 million rows removed by a join filter).
TEST_F(SchemaTest, DequeueJoinsStayPerRowProbesWhenTablesGrowAfterAnEmptyAnalyze) {
  for (const char* t : {"tokens", "accounts", "deliveries", "suppressions"}) {
    Exec(absl::StrCat("ALTER TABLE ", t, " SET (autovacuum_enabled = false)"));
  }
  {
    pqxx::nontransaction tx(*conn_);
    tx.exec("VACUUM ANALYZE tokens, accounts, deliveries, suppressions");
  }
  pqxx::connection c(url_);
  NoticeCollector plans(c);
  ExplainEveryStatement(c, /*actual_rows=*/true);
  auto dequeue = [&c](int limit, bool recoveries_only) {
    pqxx::work tx(c);
    int64_t n = tx.exec1(absl::StrCat("SELECT count(*) FROM mailroom_dequeue('mailroom', ", limit,
                                      ", 'plan-test', 60000, ", recoveries_only ? "true" : "false",
                                      ")"))[0]
                    .as<int64_t>();
    tx.commit();
    return n;
  };
  // Small tables: every statement of the function runs more than five times (plpgsql then
  // keeps a generic plan made for tables of a page or two), new jobs and jobs due again alike.
  int64_t small = 0;
  for (int i = 0; i < 8; ++i) {
    Exec(absl::StrCat("INSERT INTO accounts (email, login) VALUES ('s", i, "@example.com', 's", i,
                      "')"));
    CollectSignups();
    Exec(absl::StrCat("INSERT INTO accounts (email, login, status) VALUES ('t", i,
                      "@example.com', 't", i, "', 'active')"));
    CollectSignups();
    Exec(absl::StrCat("INSERT INTO tokens (account, action) SELECT id, 'password_recovery'"
                      " FROM accounts WHERE login = 't",
                      i, "'"));
    small += dequeue(1000, false);
    small += dequeue(1000, true);
    Exec("UPDATE deliveries SET due_at = now() - interval '1 second' WHERE state = 'leased'");
    Exec("UPDATE lease_batches SET due_at = now() - interval '1 second' WHERE state = 'leased'");
  }
  // Each token is handed out new, then again at each later call until its lease has run out
  // 5 times (max_lost_leases): 2 tokens a round, 2 x (5 + 5 + 5 + 5 + 4 + 3 + 2 + 1).
  EXPECT_EQ(small, 60);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states"), 16);
  // Those still leased stay out of the way: not due again below.
  Exec("UPDATE deliveries SET due_at = now() + interval '1 hour' WHERE state = 'leased'");
  Exec("UPDATE lease_batches SET due_at = now() + interval '1 hour' WHERE state = 'leased'");
  const int64_t last_small_token = Int("SELECT max(id) FROM tokens");

  // The tables grow; nothing ANALYZEs them.
  Exec("INSERT INTO accounts (email, login) SELECT 'u' || i || '@example.com', 'u' || i"
       " FROM generate_series(1, 20000) i");
  CollectSignups();
  Exec("INSERT INTO accounts (email, login, status) SELECT 'r' || i || '@example.com', 'r' || i,"
       " 'active' FROM generate_series(1, 2000) i");
  CollectSignups();
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts"
       " WHERE login LIKE 'r%'");
  Exec("INSERT INTO suppressions (address, reason) SELECT 'x' || i || '@example.com', 'manual'"
       " FROM generate_series(1, 5000) i");
  plans.notices.clear();
  int64_t jobs = 0;
  for (int i = 0; i < 4; ++i) jobs += dequeue(1000, false);
  EXPECT_EQ(jobs, 4000);
  EXPECT_EQ(dequeue(100, true), 0);  // the recoveries went first
  EXPECT_EQ(Int(absl::StrCat("SELECT count(*) FROM delivery_states WHERE recovery"
                             " AND state = 'leased' AND token_id > ",
                             last_small_token)),
            2000);
  // Jobs due again, 2000 recoveries and 1000 activations, with their tokens and accounts looked
  // up again; 10 of them are finished instead (expired tokens).
  Exec(absl::StrCat("UPDATE deliveries SET due_at = now() - interval '1 second'"
                    " WHERE state = 'leased' AND token_id > ",
                    last_small_token));
  Exec(absl::StrCat("UPDATE lease_batches SET due_at = now() - interval '1 second'"
                    " WHERE state = 'leased' AND lo_id > ",
                    last_small_token));
  Exec(absl::StrCat("UPDATE tokens SET expires_at = 1 WHERE id IN (SELECT token_id"
                    " FROM delivery_states WHERE recovery AND token_id > ",
                    last_small_token, " ORDER BY token_id LIMIT 10)"));
  EXPECT_EQ(dequeue(1000, true) + dequeue(1000, false), 1990);  // recoveries
  EXPECT_EQ(dequeue(1000, false), 1000);                        // activations
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE state = 'expired'"), 10);

  // Scans of these tables must carry an index condition (a probe or the window's range), not
  // sit under a Materialize or a Hash (read whole, once per batch), and no join may throw away
  // thousands of rows.
  const std::regex scan(
      R"(->  (Seq Scan|Index Scan|Index Only Scan|Bitmap Heap Scan)(?: Backward)?(?: using (\S+))?)"
      R"( on (accounts|tokens|deliveries|suppressions)\b)");
  const std::regex removed(R"(Rows Removed by (?:Join )?Filter: (\d+))");
  int probes_of_accounts = 0, checked = 0;
  for (const std::string& n : plans.notices) {
    if (n.find("Query Text:") == std::string::npos) continue;
    std::vector<std::string> lines = absl::StrSplit(n, '\n');
    bool any = false, in_scan = false;
    for (size_t i = 0; i < lines.size(); ++i) {
      std::smatch m;
      // Rows a join threw away, or a scan of these tables read in vain.
      if (std::regex_search(lines[i], m, removed) &&
          (in_scan || lines[i].find("Join Filter") != std::string::npos)) {
        EXPECT_LT(std::stoll(m[1]), 100) << lines[i] << "\n" << n;
      }
      if (lines[i].find("->") != std::string::npos) in_scan = false;
      if (!std::regex_search(lines[i], m, scan)) continue;
      in_scan = true;
      any = true;
      const std::string kind = m[1], table = m[3];
      EXPECT_TRUE(kind == "Index Scan" || kind == "Index Only Scan") << lines[i] << "\n" << n;
      const size_t arrow = lines[i].find("->");
      // Its details: the lines up to the next node.
      std::string cond;
      for (size_t j = i + 1; j < lines.size() && lines[j].find("->") == std::string::npos; ++j) {
        if (lines[j].find("Index Cond:") != std::string::npos) cond = lines[j];
      }
      EXPECT_NE(cond, "") << "a whole-index read of " << table << ": " << lines[i] << "\n" << n;
      if (table == "accounts") {
        EXPECT_THAT(cond, HasSubstr("account")) << lines[i] << "\n" << n;
        ++probes_of_accounts;
      }
      if (table == "suppressions") {
        EXPECT_THAT(cond, HasSubstr("address")) << lines[i] << "\n" << n;
      }
      // Its parent node: the nearest line above whose arrow is further left.
      for (size_t j = i; j-- > 0;) {
        const size_t a = lines[j].find("->");
        if (a != std::string::npos && a >= arrow) continue;
        EXPECT_THAT(lines[j], ::testing::Not(HasSubstr("Materialize"))) << lines[i] << "\n" << n;
        EXPECT_THAT(lines[j], ::testing::Not(::testing::ContainsRegex("->  Hash  ")))
            << lines[i] << "\n"
            << n;
        break;
      }
    }
    checked += any;
  }
  // The window read twice per class and call, the due-again lookups, the hand-outs.
  EXPECT_GE(checked, 15) << "auto_explain showed too few statements";
  EXPECT_GE(probes_of_accounts, 8) << "auto_explain showed too few reads of accounts";
}

// 0017: mailroom_renew probes each id on the primary key and updates by ctid, whatever the
// statistics. On 0003's plan, with deliveries analysed while empty and 4,000 leases held since,
// renewing 1000 of them nested-looped all the subscriber's leases with the ids (3,999,000 rows
// removed by the join filter, ~0.85 s).
class RenewTest : public SchemaTest {
 protected:
  // Leases `n` activations to 'plan-test' (the dequeue's own plans are 0016's business) with
  // per-job deliveries rows, attempt 2: a fresh dequeue leases them as one batch,
  // so the batch's lease is let run out and the jobs are handed out again (this fixture's
  // tests are about the per-job path; the batch path is BatchPlanTest's).
  void Lease(int n) {
    Exec(absl::StrCat("INSERT INTO accounts (email, login) SELECT 'u' || i || '@example.com',"
                      " 'u' || i FROM generate_series(1, ",
                      n, ") i"));
    CollectSignups();
    for (int attempt = 1; attempt <= 2; ++attempt) {
      if (attempt == 2) {
        Exec("UPDATE lease_batches SET due_at = now() - interval '1 second'"
             " WHERE state = 'leased'");
      }
      pqxx::work tx(*conn_);
      ASSERT_EQ(tx.exec1(absl::StrCat("SELECT count(*) FROM mailroom_dequeue('mailroom', ", n,
                                      ", 'plan-test', 60000) WHERE attempt = ", attempt))[0]
                    .as<int64_t>(),
                n);
      tx.commit();
    }
    ASSERT_EQ(Int("SELECT count(*) FROM deliveries WHERE state = 'leased' AND attempts = 2"), n);
  }
  // Whether the backend `pid` comes to wait for a lock (within 5 s).
  bool WaitsForALock(int pid) {
    for (int i = 0; i < 500; ++i) {
      if (Int(absl::StrCat("SELECT count(*) FROM pg_stat_activity WHERE pid = ", pid,
                           " AND wait_event_type = 'Lock'")) == 1) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  // Runs `call` on its own connection while another transaction holds an update of the first
  // lease: waits until `call` waits for that row, commits the update (which moves the row), and
  // returns what `call` returned.
  int64_t PastAConcurrentUpdate(const std::function<int64_t(pqxx::connection_base&)>& call) {
    pqxx::connection other(url_);
    pqxx::work blocker(other);
    blocker.exec("UPDATE deliveries SET due_at = now() + interval '1 minute'"
                 " WHERE token_id = (SELECT min(token_id) FROM deliveries)");
    pqxx::connection c(url_);
    const int pid = c.backendpid();
    int64_t result = -1;
    std::thread t([&] { result = call(c); });
    EXPECT_TRUE(WaitsForALock(pid)) << "the call never waited for the blocker's row";
    blocker.commit();
    t.join();
    return result;
  }
  // The auto_explain plans of the statements that read deliveries (not the counters'
  // statement trigger); each is checked for a read of the whole table.
  static std::vector<std::string> DeliveriesPlans(const std::vector<std::string>& notices) {
    std::vector<std::string> out;
    for (const std::string& n : notices) {
      if (n.find("Query Text:") == std::string::npos ||
          n.find("deliveries d") == std::string::npos ||
          n.find("delivery_counts") != std::string::npos) {
        continue;
      }
      EXPECT_THAT(n, ::testing::Not(HasSubstr("Seq Scan on deliveries"))) << n;
      EXPECT_THAT(n, ::testing::Not(HasSubstr("deliveries_owner_idx"))) << n;
      EXPECT_THAT(n, ::testing::Not(HasSubstr("Materialize"))) << n;
      out.push_back(n);
    }
    return out;
  }
  // Renews the first `n` leases (by id) as `owner` with `attempts` ('NULL': any) on `c`.
  static int64_t Renew(pqxx::connection_base& c, int n, const std::string& owner = "plan-test",
                       const std::string& attempts = "NULL") {
    pqxx::work tx(c);
    int64_t r = tx.exec1(absl::StrCat(
        "SELECT count(*) FROM mailroom_renew('mailroom', '", owner,
        "',"
        " (SELECT array_agg(token_id ORDER BY token_id) FROM (SELECT token_id"
        "    FROM deliveries ORDER BY token_id LIMIT ",
        n, ") x), ", attempts, ", 120000)"))[0]
                    .as<int64_t>();
    tx.commit();
    return r;
  }
};

TEST_F(RenewTest, RenewalsStayPerRowProbesWhenDeliveriesGrowAfterAnEmptyAnalyze) {
  Exec("ALTER TABLE deliveries SET (autovacuum_enabled = false)");
  {
    pqxx::nontransaction tx(*conn_);
    tx.exec("VACUUM ANALYZE deliveries");
  }
  Lease(4000);
  pqxx::connection c(url_);
  NoticeCollector plans(c);
  ExplainEveryStatement(c, /*actual_rows=*/true);
  // More calls than plpgsql's five custom plans: generic plans are checked too.
  for (int i = 0; i < 7; ++i) EXPECT_EQ(Renew(c, 1000), 1000);
  EXPECT_EQ(Renew(c, 1000, "someone-else"), 0);
  EXPECT_EQ(Renew(c, 1000, "plan-test", "array_fill(1, ARRAY[1000])"), 0);  // wrong attempt
  EXPECT_EQ(Renew(c, 1000, "plan-test", "array_fill(2, ARRAY[1000])"), 1000);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states"
                " WHERE due_at > now() + interval '100 seconds'"),
            1000);

  const std::regex removed(R"(Rows Removed by (?:Join )?Filter: (\d+))");
  const std::vector<std::string> renewals = DeliveriesPlans(plans.notices);
  for (const std::string& n : renewals) {
    for (std::sregex_iterator it(n.begin(), n.end(), removed), end; it != end; ++it) {
      EXPECT_LT(std::stoll((*it)[1]), 100) << n;
    }
  }
  // 8 calls that renew (probe + write) and 2 that renew nothing (probe only).
  EXPECT_EQ(renewals.size(), 18u) << "auto_explain showed no renewal";
}

// An update between the renewal's probe and its write (here: another transaction renewing one
// of the rows and committing while the renewal waits for it) moves the row; the renewal probes
// it again instead of skipping it, so a live lease is never reported lost.
TEST_F(RenewTest, ARowMovedByAConcurrentUpdateIsRenewedAllTheSame) {
  Lease(50);
  EXPECT_EQ(PastAConcurrentUpdate([](pqxx::connection_base& c) { return Renew(c, 50); }), 50);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states"
                " WHERE due_at > now() + interval '100 seconds'"),
            50);
}

// 0020: mailroom_ack probes each id on the primary key and updates by ctid, whatever the
// statistics. On 0003's plan, with deliveries analysed while empty and leases held since, an
// acknowledgement joined the batch with all the subscriber's leases (collector_bench: 1,000,000
// queued without statistics drained at 2,781 jobs/s instead of 55,618).
class AckPlanTest : public RenewTest {
 protected:
  // Acknowledges the first `n` leases still held (by id) as `owner` with `outcome` and
  // `attempts` (default: 2, Lease's) on `c`; returns how many were recorded.
  static int64_t Ack(pqxx::connection_base& c, int n, const std::string& owner = "plan-test",
                     const std::string& attempts = "", const std::string& outcome = "sent") {
    pqxx::work tx(c);
    const std::string ids = absl::StrCat(
        "(SELECT array_agg(token_id ORDER BY token_id) FROM (SELECT token_id FROM deliveries"
        " WHERE state = 'leased' ORDER BY token_id LIMIT ",
        n, ") x)");
    int64_t r = tx.exec1(absl::StrCat(
        "SELECT count(*) FROM mailroom_ack('mailroom', '", owner, "', ", ids, ", ",
        attempts.empty() ? absl::StrCat("array_fill(2, ARRAY[", n, "])") : attempts,
        ", array_fill('", outcome, "'::text, ARRAY[", n,
        "]),"
        " array_fill(''::text, ARRAY[",
        n, "]), array_fill(1000, ARRAY[", n, "]), array_fill(7::bigint, ARRAY[", n, "]))"))[0]
                    .as<int64_t>();
    tx.commit();
    return r;
  }
};

TEST_F(AckPlanTest, AcknowledgementsStayPerRowProbesWhenDeliveriesGrowAfterAnEmptyAnalyze) {
  Exec("ALTER TABLE deliveries SET (autovacuum_enabled = false)");
  {
    pqxx::nontransaction tx(*conn_);
    tx.exec("VACUUM ANALYZE deliveries");
  }
  Lease(8000);
  pqxx::connection c(url_);
  NoticeCollector plans(c);
  ExplainEveryStatement(c, /*actual_rows=*/true);
  EXPECT_EQ(Ack(c, 500, "someone-else"), 0);                            // another holder's leases
  EXPECT_EQ(Ack(c, 500, "plan-test", "array_fill(1, ARRAY[500])"), 0);  // a wrong attempt
  // More calls than plpgsql's five custom plans: generic plans are checked too.
  for (int i = 0; i < 7; ++i) EXPECT_EQ(Ack(c, 1000), 1000);
  EXPECT_EQ(Ack(c, 500, "plan-test", "", "retry"), 500);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE state = 'sent' AND cost_micros = 7"),
            7000);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE state = 'retry' AND failures = 1"),
            500);
  EXPECT_EQ(Int("SELECT sent FROM group_usage"), 7000);
  EXPECT_EQ(Int("SELECT cost_micros FROM group_usage"), 49000);

  const std::regex removed(R"(Rows Removed by (?:Join )?Filter: (\d+))");
  const std::vector<std::string> acks = DeliveriesPlans(plans.notices);
  for (const std::string& n : acks) {
    // Rows removed by a node that reads deliveries (a filter over the batch's own outcomes,
    // such as the SENT count's, is per batch, not per table).
    std::string node;
    const std::vector<std::string> lines = absl::StrSplit(n, '\n');
    for (const std::string& line : lines) {
      if (line.find("(cost=") != std::string::npos) node = line;
      std::smatch m;
      if (node.find("deliveries") != std::string::npos && std::regex_search(line, m, removed)) {
        EXPECT_LT(std::stoll(m[1]), 100) << n;
      }
    }
    EXPECT_THAT(n, ::testing::Not(HasSubstr("Hash Join"))) << n;
    EXPECT_THAT(n, ::testing::Not(HasSubstr("Merge Join"))) << n;
    if (n.find("UPDATE deliveries") != std::string::npos) {
      EXPECT_THAT(n, HasSubstr("TID Cond: (ctid = u.tid)")) << n;  // one row fetched per id
    }
  }
  // 8 calls that record (probe + write) and 2 that record nothing (probe only).
  EXPECT_EQ(acks.size(), 18u) << "auto_explain showed no acknowledgement";
}

// An update between the acknowledgement's probe and its write (another transaction renewing
// one of the rows and committing while the acknowledgement waits for it) moves the row; the
// acknowledgement probes it again, so the outcome is recorded, once.
TEST_F(AckPlanTest, ARowMovedByAConcurrentUpdateIsAcknowledgedAllTheSame) {
  Lease(50);
  EXPECT_EQ(PastAConcurrentUpdate([](pqxx::connection_base& c) { return Ack(c, 50); }), 50);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE state = 'sent'"), 50);
  EXPECT_EQ(Int("SELECT sent FROM group_usage"), 50);
}

// 0021: lease batches. The statements 0021 adds read lease_batches through its partial indexes
// whatever the statistics: the expiry of batches whose lease ran out (lease_batches_due_idx),
// the acknowledgement's and the renewal's lookup of the holder's batches
// (lease_batches_owner_idx) and mailroom_stats' count of batch jobs in flight (a partial index
// over leased batches). The tables are analysed while empty, then grown to kBatches batches
// of kJobs jobs (kOwners holders in turn) of which the first kDone are acknowledged whole;
// plans are read with auto_explain (actual rows), in more calls than plpgsql's five custom
// plans so that generic plans are checked too.
class BatchPlanTest : public SchemaTest {
 protected:
  static constexpr int kBatches = 1000, kJobs = 5, kOwners = 5, kDone = 800;
  static constexpr int kLeased = kBatches - kDone;  // kLeased / kOwners per holder

  void SetUp() override {
    SchemaTest::SetUp();
    if (HasFatalFailure()) return;
    for (const char* t : {"tokens", "accounts", "deliveries", "lease_batches"}) {
      Exec(absl::StrCat("ALTER TABLE ", t, " SET (autovacuum_enabled = false)"));
    }
    {
      pqxx::nontransaction tx(*conn_);
      tx.exec("VACUUM ANALYZE tokens, accounts, deliveries, lease_batches");
      // JIT off for the setup's session only: its 800 acknowledgements would each be compiled
      // (mailroom_batch_match's plan carries the disable cost of a nested loop). The plans
      // checked are another session's, with the server's defaults.
      tx.exec("SET jit = off");
    }
    Exec(absl::StrCat("INSERT INTO accounts (email, login) SELECT 'u' || i || '@example.com',"
                      " 'u' || i FROM generate_series(1, ",
                      kBatches * kJobs, ") i"));
    CollectSignups();
    // One dequeue per batch, holders in turn ('o0', 'o1', ...), leases of an hour.
    Exec(absl::StrCat("DO $$ BEGIN FOR i IN 0 .. ", kBatches - 1,
                      " LOOP"
                      " PERFORM * FROM mailroom_dequeue('mailroom', ",
                      kJobs, ", 'o' || i % ", kOwners, ", 3600000); END LOOP; END $$"));
    Exec(absl::StrCat("DO $$ DECLARE b RECORD; BEGIN FOR b IN SELECT * FROM lease_batches"
                      " ORDER BY batch_id LIMIT ",
                      kDone,
                      " LOOP PERFORM mailroom_ack('mailroom',"
                      " b.owner, b.ids, array_fill(1, ARRAY[",
                      kJobs,
                      "]), array_fill('sent'::TEXT,"
                      " ARRAY[",
                      kJobs, "]), array_fill(''::TEXT, ARRAY[", kJobs,
                      "]),"
                      " array_fill(0, ARRAY[",
                      kJobs, "]), array_fill(0::BIGINT, ARRAY[", kJobs, "])); END LOOP; END $$"));
    ASSERT_EQ(Int("SELECT count(*) FROM lease_batches WHERE state = 'leased'"), kLeased);
    ASSERT_EQ(Int("SELECT count(*) FROM lease_batches WHERE state = 'done'"), kDone);
    ASSERT_EQ(Int("SELECT count(*) FROM pg_stats WHERE tablename = 'lease_batches'"), 0)
        << "the test needs lease_batches without planner statistics";
  }

  // A scan of lease_batches in a plan: its index ("" for none), index condition, and the rows
  // it read (returned plus removed by its filter, times its loops).
  struct Scan {
    std::string kind, index, cond, line;
    int64_t read = 0;
  };
  static std::vector<Scan> LeaseBatchScans(const std::string& plan) {
    static const std::regex scan(
        R"((Seq Scan|Index Scan|Index Only Scan|Bitmap Heap Scan)(?: Backward)?(?: using (\S+))?)"
        R"( on lease_batches\b)");
    static const std::regex actual(R"(actual time=\S+ rows=(\d+) loops=(\d+))");
    static const std::regex removed(R"(Rows Removed by Filter: (\d+))");
    std::vector<Scan> out;
    const std::vector<std::string> lines = absl::StrSplit(plan, '\n');
    for (size_t i = 0; i < lines.size(); ++i) {
      std::smatch m;
      if (!std::regex_search(lines[i], m, scan)) continue;
      Scan s;
      s.kind = m[1];
      s.index = m[2];
      s.line = lines[i];
      int64_t rows = 0, loops = 0, gone = 0;
      if (std::regex_search(lines[i], m, actual)) {
        rows = std::stoll(m[1]);
        loops = std::stoll(m[2]);
      }
      for (size_t j = i + 1; j < lines.size() && lines[j].find("->") == std::string::npos; ++j) {
        if (lines[j].find("Index Cond:") != std::string::npos) s.cond = lines[j];
        if (std::regex_search(lines[j], m, removed)) gone = std::stoll(m[1]);
      }
      s.read = (rows + gone) * loops;
      out.push_back(s);
    }
    return out;
  }
  // The plans among `notices` of statements whose text contains `marker`.
  static std::vector<std::string> Plans(const std::vector<std::string>& notices,
                                        const std::string& marker) {
    std::vector<std::string> out;
    for (const std::string& n : notices) {
      if (n.find("Query Text:") != std::string::npos && n.find(marker) != std::string::npos) {
        out.push_back(n);
      }
    }
    return out;
  }
  // No plan among `notices` (auto_explain's) was JIT-compiled; at least `min_plans` were seen.
  static void ExpectNoneJitCompiled(const std::vector<std::string>& notices, int min_plans) {
    int checked = 0;
    for (const std::string& n : notices) {
      if (n.find("Query Text:") == std::string::npos) continue;
      ++checked;
      EXPECT_THAT(n, ::testing::Not(HasSubstr("JIT:"))) << n;
    }
    EXPECT_GE(checked, min_plans) << "auto_explain showed too few statements";
  }
  // Runs `sql` in its own transaction on `c`; returns the integer it returns.
  static int64_t Call(pqxx::connection_base& c, const std::string& sql) {
    pqxx::work tx(c);
    int64_t n = tx.exec1(sql)[0].as<int64_t>();
    tx.commit();
    return n;
  }
  // The ids of the jobs of the holder's leased batches, batch by batch (oldest first).
  std::vector<std::string> LeasedBatchIds(const std::string& owner) {
    pqxx::nontransaction tx(*conn_);
    std::vector<std::string> out;
    for (const auto& r : tx.exec("SELECT ids::TEXT FROM lease_batches WHERE owner = '" + owner +
                                 "' AND state = 'leased' ORDER BY batch_id")) {
      out.push_back(r[0].as<std::string>());
    }
    return out;
  }
};

// The dequeue's step 0 finds the batches whose lease ran out on lease_batches_due_idx:
// it reads the due batch and nothing else (not the kDone finished ones, not the leased ones
// whose lease still runs), in one statement per call for both classes.
TEST_F(BatchPlanTest, TheExpiryReadsOnlyTheBatchesWhoseLeaseRanOut) {
  pqxx::connection c(url_);
  NoticeCollector plans(c);
  ExplainEveryStatement(c, /*actual_rows=*/true);
  for (int i = 0; i < 8; ++i) {
    // The oldest batch still leased runs out; the dequeue hands its jobs out again.
    Exec("UPDATE lease_batches SET due_at = now() - interval '1 second' WHERE batch_id ="
         " (SELECT min(batch_id) FROM lease_batches WHERE state = 'leased')");
    pqxx::work tx(c);
    EXPECT_EQ(tx.exec1("SELECT count(*) FILTER (WHERE attempt = 2) FROM mailroom_dequeue("
                       "'mailroom', 10, 'plan-test', 60000)")[0]
                  .as<int64_t>(),
              kJobs);
    tx.commit();
  }
  EXPECT_EQ(Int("SELECT count(*) FROM lease_batches WHERE state = 'expired'"), 8);
  EXPECT_EQ(Int("SELECT count(*) FROM deliveries WHERE attempts = 2 AND lost_leases = 1"
                " AND owner = 'plan-test'"),
            8 * kJobs);

  const std::vector<std::string> expiries = Plans(plans.notices, "SET state = 'expired'");
  // One statement for both classes in each of the 8 calls.
  EXPECT_EQ(expiries.size(), 8u) << "auto_explain showed no expiry";
  for (const std::string& n : expiries) {
    bool due_idx = false;
    for (const Scan& s : LeaseBatchScans(n)) {
      EXPECT_THAT(s.kind, ::testing::StartsWith("Index")) << s.line << "\n" << n;
      EXPECT_NE(s.cond, "") << "a whole-index read: " << s.line << "\n" << n;
      if (s.index == "lease_batches_due_idx") {
        due_idx = true;
        // The one batch due.
        EXPECT_EQ(s.read, 1) << s.line << "\n" << n;
      } else {
        EXPECT_LE(s.read, 1) << s.line << "\n" << n;  // the update's probe of that batch
      }
    }
    EXPECT_TRUE(due_idx) << "lease_batches_due_idx not used:\n" << n;
  }
}

// An acknowledgement (and a renewal) looks up the holder's leased batches on
// lease_batches_owner_idx: it reads the holder's kLeased / kOwners leased batches (their id
// ranges tell which ones hold the ids) and never another holder's or a finished batch.
TEST_F(BatchPlanTest, AcknowledgementsAndRenewalsReadOnlyTheHoldersLeasedBatches) {
  std::vector<std::string> batches = LeasedBatchIds("o0");
  ASSERT_EQ(batches.size(), static_cast<size_t>(kLeased / kOwners));
  pqxx::connection c(url_);
  NoticeCollector plans(c);
  ExplainEveryStatement(c, /*actual_rows=*/true);
  auto call = [&c](const std::string& sql) { return Call(c, sql); };
  // Acknowledges jobs [from, to] (1-based slots) of the holder's batch `ids` as `owner`.
  auto ack = [&call](const std::string& owner, const std::string& ids, int from, int to) {
    const int n = to - from + 1;
    return call(absl::StrCat("SELECT count(*) FROM mailroom_ack('mailroom', '", owner, "', ('", ids,
                             "'::BIGINT[])[", from, ":", to, "], array_fill(1, ARRAY[", n,
                             "]), array_fill('sent'::TEXT, ARRAY[", n,
                             "]),"
                             " array_fill(''::TEXT, ARRAY[",
                             n, "]), array_fill(0, ARRAY[", n, "]), array_fill(3::BIGINT, ARRAY[",
                             n, "]))"));
  };
  // Each lookup's expected read: the holder's leased batches at the time of the call.
  std::vector<int64_t> expected;
  int64_t held = batches.size();
  for (int k = 0; k < 8; ++k) {
    // Partly (the batch stays leased), then the rest (the batch is done).
    EXPECT_EQ(ack("o0", batches[k], 1, 3), 3);
    expected.push_back(held);
    EXPECT_EQ(ack("o0", batches[k], 4, kJobs), kJobs - 3);
    expected.push_back(held--);
  }
  // Another holder's acknowledgement of o0's jobs records nothing: it reads its own batches.
  EXPECT_EQ(ack("o1", batches[8], 1, kJobs), 0);
  expected.push_back(kLeased / kOwners);
  // Renewing one job of a batch renews the whole batch, and nothing else (the setup's leases
  // are of an hour, the renewal's of two).
  EXPECT_EQ(call(absl::StrCat("SELECT count(*) FROM mailroom_renew('mailroom', 'o0', ('",
                              batches[8], "'::BIGINT[])[1:1], NULL, 7200000)")),
            1);
  expected.push_back(held);
  EXPECT_EQ(Int(absl::StrCat("SELECT count(*) FROM delivery_states WHERE token_id = ANY ('",
                             batches[8], "') AND due_at > now() + interval '90 minutes'")),
            kJobs);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE due_at > now() + interval "
                "'90 minutes'"),
            kJobs);
  EXPECT_EQ(Int("SELECT count(*) FROM lease_batches WHERE state = 'done'"), kDone + 8);
  EXPECT_EQ(Int("SELECT sent FROM mailroom_stats('mailroom')"), (kDone + 8) * kJobs);
  EXPECT_EQ(Int("SELECT cost_micros FROM group_usage"), 8 * kJobs * 3);

  const std::vector<std::string> lookups = Plans(plans.notices, "b.owner = p_owner");
  ASSERT_EQ(lookups.size(), expected.size()) << "auto_explain showed no lookup of batches";
  for (size_t i = 0; i < lookups.size(); ++i) {
    const std::vector<Scan> scans = LeaseBatchScans(lookups[i]);
    ASSERT_EQ(scans.size(), 1u) << lookups[i];
    EXPECT_EQ(scans[0].index, "lease_batches_owner_idx") << lookups[i];
    EXPECT_THAT(scans[0].cond, HasSubstr("owner")) << lookups[i];
    EXPECT_EQ(scans[0].read, expected[i]) << "call " << i << ":\n" << lookups[i];
  }
}

// mailroom_stats counts the batch jobs in flight from the group's leased batches through a
// partial index over leased batches with the group as its condition: kLeased rows read, none of
// the kDone finished ones. (Without statistics the planner takes lease_batches_owner_idx,
// group_id being its second column, with statistics lease_batches_due_idx: both read the
// group's leased batches only.)
TEST_F(BatchPlanTest, StatsCountBatchJobsInFlightFromTheLeasedBatchesOnly) {
  // One batch partly acknowledged: its recorded jobs are no longer in flight.
  const std::string ids = LeasedBatchIds("o2").front();
  EXPECT_EQ(Int(absl::StrCat("SELECT count(*) FROM mailroom_ack('mailroom', 'o2', ('", ids,
                             "'::BIGINT[])[1:2], ARRAY[1, 1], ARRAY['sent', 'sent'],"
                             " ARRAY['', ''], ARRAY[0, 0], ARRAY[0, 0]::BIGINT[])")),
            2);
  pqxx::connection c(url_);
  NoticeCollector plans(c);
  ExplainEveryStatement(c, /*actual_rows=*/true);
  for (int i = 0; i < 8; ++i) {
    pqxx::nontransaction tx(c);
    pqxx::row s = tx.exec1("SELECT in_flight, sent FROM mailroom_stats('mailroom')");
    EXPECT_EQ(s[0].as<int64_t>(), kLeased * kJobs - 2);
    EXPECT_EQ(s[1].as<int64_t>(), kDone * kJobs + 2);
  }
  const std::vector<std::string> stats = Plans(plans.notices, "length(b.done) - b.acked");
  EXPECT_EQ(stats.size(), 8u) << "auto_explain showed no statistics";
  for (const std::string& n : stats) {
    const std::vector<Scan> scans = LeaseBatchScans(n);
    ASSERT_EQ(scans.size(), 1u) << n;
    EXPECT_EQ(scans[0].kind, "Index Scan") << n;
    EXPECT_THAT(scans[0].index,
                ::testing::AnyOf("lease_batches_due_idx", "lease_batches_owner_idx"))
        << n;
    EXPECT_THAT(scans[0].cond, HasSubstr("group_id")) << n;
    EXPECT_EQ(scans[0].read, kLeased) << n;
  }
}

// No statement an acknowledgement, a renewal or a release of batch jobs runs is JIT-compiled.
// mailroom_batch_match turns nested loops off; the lateral unnest of a batch's ids can only be
// one, so its plan carries the planner's disable cost, far above jit_above_cost: with JIT on
// (PostgreSQL's default, and llvmjit is installed) every call compiled it, ~80-120 ms per
// acknowledgement of a few jobs instead of well under a millisecond (as 0013's jit = off on
// mailroom_stats).
TEST_F(BatchPlanTest, NoStatementOfAnAcknowledgementIsJitCompiled) {
  const std::vector<std::string> batches = LeasedBatchIds("o3");
  pqxx::connection c(url_);
  ASSERT_EQ(pqxx::nontransaction(c).exec1("SHOW jit")[0].as<std::string>(), "on");
  NoticeCollector plans(c);
  ExplainEveryStatement(c, /*actual_rows=*/true);
  auto call = [&c](const std::string& sql) { return Call(c, sql); };
  EXPECT_EQ(call(absl::StrCat("SELECT count(*) FROM mailroom_renew('mailroom', 'o3', '", batches[0],
                              "', NULL, 120000)")),
            kJobs);
  EXPECT_EQ(call(absl::StrCat("SELECT count(*) FROM mailroom_ack('mailroom', 'o3', '", batches[0],
                              "', array_fill(1, ARRAY[", kJobs,
                              "]),"
                              " array_fill('sent'::TEXT, ARRAY[",
                              kJobs,
                              "]),"
                              " array_fill(''::TEXT, ARRAY[",
                              kJobs, "]), array_fill(0, ARRAY[", kJobs,
                              "]), array_fill(0::BIGINT, ARRAY[", kJobs, "]))")),
            kJobs);
  EXPECT_EQ(call(absl::StrCat("SELECT mailroom_release('mailroom', 'o3', '", batches[1], "')")),
            kJobs);
  EXPECT_EQ(Int("SELECT count(*) FROM lease_batches WHERE state = 'done'"), kDone + 2);
  ExpectNoneJitCompiled(plans.notices, 10);
}

// The dequeue reads the small actions table with sequential scans turned off: the plan's cost
// is then the disable cost (1e10), far above jit_above_cost, and a server with JIT on (the
// default) compiled that one statement on every call, 350-430 ms of a call that otherwise takes
// a few. No statement of a dequeue is JIT-compiled.
TEST_F(BatchPlanTest, NoStatementOfADequeueIsJitCompiled) {
  Exec("INSERT INTO accounts (email, login) SELECT 'jit' || i || '@example.com', 'jit' || i"
       " FROM generate_series(1, 50) i");
  CollectSignups();
  pqxx::connection c(url_);
  ASSERT_EQ(pqxx::nontransaction(c).exec1("SHOW jit")[0].as<std::string>(), "on");
  NoticeCollector plans(c);
  ExplainEveryStatement(c, /*actual_rows=*/true);
  EXPECT_EQ(Call(c, "SELECT count(*) FROM mailroom_dequeue('mailroom', 1000, 'o9', 60000)"), 50);
  ExpectNoneJitCompiled(plans.notices, 5);
}

// N jobs through dequeues, whole and partial acknowledgements of batches (SENT with and
// without a provider message id, FAILED, RETRY), a batch whose lease ran out handed out again
// and acknowledged per job, and late or repeated acknowledgements that record nothing: every
// figure of mailroom_stats, delivery_counts and group_usage is exact, and delivery_states shows
// every job exactly once.
TEST_F(SchemaTest, BatchLeasesKeepEveryFigureExactAndEveryJobOnce) {
  Exec("INSERT INTO accounts (email, login) SELECT 'u' || i || '@example.com', 'u' || i"
       " FROM generate_series(1, 100) i");
  CollectSignups();
  // Leases up to `n` jobs to `owner`; returns their ids (and checks their attempt).
  auto dequeue = [this](const std::string& owner, int n, int attempt) {
    pqxx::work tx(*conn_);
    std::vector<int64_t> ids;
    for (const auto& r : tx.exec(absl::StrCat("SELECT job_id, attempt FROM mailroom_dequeue("
                                              "'mailroom', ",
                                              n, ", '", owner, "', 60000)"))) {
      ids.push_back(r[0].as<int64_t>());
      EXPECT_EQ(r[1].as<int>(), attempt);
    }
    tx.commit();
    return ids;
  };
  // Records `outcome` for ids[from, to) as `owner` at `attempt` (cost 10 each); with
  // `message_id`, SENT outcomes carry provider message ids (the 9-argument call).
  auto ack = [this](const std::string& owner, const std::vector<int64_t>& ids, size_t from,
                    size_t to, int attempt, const std::string& outcome,
                    const std::string& message_id = "") {
    const size_t n = to - from;
    std::string list;
    for (size_t i = from; i < to; ++i) absl::StrAppend(&list, i > from ? "," : "", ids[i]);
    return Int(absl::StrCat(
        "SELECT count(*) FROM mailroom_ack('mailroom', '", owner, "', ARRAY[", list,
        "]::BIGINT[], array_fill(", attempt, ", ARRAY[", n, "]), array_fill('", outcome,
        "'::TEXT, ARRAY[", n, "]), array_fill('why'::TEXT, ARRAY[", n,
        "]), array_fill(3600000, ARRAY[", n, "]), array_fill(10::BIGINT, ARRAY[", n, "])",
        message_id.empty() ? ""
                           : absl::StrCat(", (SELECT array_agg('", message_id,
                                          "-' || i) FROM generate_series(1, ", n, ") i)"),
        ")"));
  };
  const std::vector<int64_t> a = dequeue("a", 30, 1), b = dequeue("b", 30, 1),
                             c = dequeue("c", 40, 1);
  ASSERT_EQ(a.size() + b.size() + c.size(), 100u);
  EXPECT_EQ(Int("SELECT count(*) FROM lease_batches"), 3);
  EXPECT_EQ(Int("SELECT count(*) FROM deliveries"), 0);
  EXPECT_EQ(Int("SELECT in_flight FROM mailroom_stats('mailroom')"), 100);

  EXPECT_EQ(ack("a", a, 0, 30, 1, "sent"), 30);  // a's batch, whole
  EXPECT_EQ(ack("b", b, 0, 10, 1, "sent"), 10);  // b's, in parts
  EXPECT_EQ(ack("b", b, 10, 15, 1, "sent", "ses"), 5);
  EXPECT_EQ(ack("b", b, 15, 18, 1, "failed"), 3);
  EXPECT_EQ(ack("b", b, 18, 20, 1, "retry"), 2);
  EXPECT_EQ(ack("c", c, 0, 15, 1, "sent"), 15);
  EXPECT_EQ(ack("a", a, 0, 5, 1, "sent"), 0);    // already recorded
  EXPECT_EQ(ack("b", b, 20, 25, 2, "sent"), 0);  // a wrong attempt
  EXPECT_EQ(ack("a", b, 20, 25, 1, "sent"), 0);  // another holder's jobs
  // c's lease runs out: the next dequeue hands its 25 jobs without an outcome out again.
  Exec("UPDATE lease_batches SET due_at = now() - interval '1 second'"
       " WHERE state = 'leased' AND owner = 'c'");
  std::vector<int64_t> d = dequeue("d", 100, 2);
  EXPECT_EQ(std::set<int64_t>(d.begin(), d.end()), std::set<int64_t>(c.begin() + 15, c.end()));
  EXPECT_EQ(ack("c", c, 15, 16, 1, "sent"), 0);  // c's late outcome is fenced off
  std::sort(d.begin(), d.end());
  EXPECT_EQ(ack("d", d, 0, 20, 2, "sent"), 20);

  pqxx::row s = Row("SELECT depth, in_flight, waiting_retry, sent, failed, expired, cancelled,"
                    " superseded, rate_limited, suppressed FROM mailroom_stats('mailroom')");
  EXPECT_EQ(s[0].as<int64_t>(), 0);
  EXPECT_EQ(s[1].as<int64_t>(), 10 + 5);  // b's unrecorded 10, d's 5
  EXPECT_EQ(s[2].as<int64_t>(), 2);
  EXPECT_EQ(s[3].as<int64_t>(), 30 + 15 + 15 + 20);
  EXPECT_EQ(s[4].as<int64_t>(), 3);
  for (int i = 5; i < 10; ++i) EXPECT_EQ(s[i].as<int64_t>(), 0) << i;
  // delivery_counts: exactly the finished states delivery_states shows.
  EXPECT_EQ(Int("SELECT coalesce(sum(n), 0) FROM delivery_counts WHERE state = 'sent'"), 80);
  EXPECT_EQ(Int("SELECT coalesce(sum(n), 0) FROM delivery_counts WHERE state = 'failed'"), 3);
  EXPECT_EQ(Int("SELECT coalesce(sum(n), 0) FROM delivery_counts"), 83);
  EXPECT_EQ(Int("SELECT count(*) FROM (SELECT state, count(*) AS n FROM delivery_states"
                "   WHERE mailroom_finished_state(state) GROUP BY state) v"
                " FULL JOIN (SELECT state, sum(n) AS n FROM delivery_counts GROUP BY state"
                "   HAVING sum(n) <> 0) k USING (state) WHERE v.n IS DISTINCT FROM k.n"),
            0);
  EXPECT_EQ(Int("SELECT sent FROM group_usage"), 80);
  EXPECT_EQ(Int("SELECT cost_micros FROM group_usage"), 800);

  // delivery_states: every token once, in the state its last outcome (or lease) left.
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states"), 100);
  EXPECT_EQ(Int("SELECT count(*) FROM tokens t WHERE (SELECT count(*) FROM delivery_states v"
                " WHERE v.token_id = t.id) = 1"),
            100);
  auto states = [this](const std::string& where) {
    return Int("SELECT count(*) FROM delivery_states WHERE " + where);
  };
  EXPECT_EQ(states("state = 'sent'"), 80);
  EXPECT_EQ(states("state = 'sent' AND provider_message_id LIKE 'ses-%'"), 5);
  EXPECT_EQ(states("state = 'failed' AND reason = 'why'"), 3);
  EXPECT_EQ(states("state = 'retry' AND failures = 1 AND due_at > now()"), 2);
  EXPECT_EQ(states("state = 'leased' AND owner = 'b' AND attempts = 1"), 10);
  EXPECT_EQ(states("state = 'leased' AND owner = 'd' AND attempts = 2 AND lost_leases = 1"), 5);
  EXPECT_EQ(states("attempts = 2 AND lost_leases = 1"), 25);
  EXPECT_EQ(states("owner IS NOT NULL"), 15);
  // The rows behind it: deliveries only for b's 10 exceptions and c's 25 handed out again.
  EXPECT_EQ(Int("SELECT count(*) FROM deliveries"), 10 + 25);
  EXPECT_EQ(Text("SELECT string_agg(owner || ':' || state || ':' || acked, ' ' ORDER BY owner)"
                 " FROM lease_batches"),
            "a:done:30 b:leased:20 c:expired:15");
}

// 0018: the dequeue locks its group row FOR NO KEY UPDATE. Foreign-key checks of rows that
// reference the group (the acknowledgement's reputation row, budget grants) take FOR KEY SHARE
// on it; under FOR UPDATE each waited for the dequeue in progress to commit, and the next
// dequeue for them. Dequeues of one group still wait for each other.
class GroupLockTest : public SchemaTest {
 protected:
  // Runs `sql` in a transaction on `c` that gives up on any lock wait after one second
  // (lock_timeout counts lock waits only, so a loaded machine cannot make this fail); returns
  // "" when it committed, else the SQLSTATE (55P03: it had to wait for a lock).
  static std::string RunWithoutWaiting(pqxx::connection_base& c, const std::string& sql) {
    try {
      pqxx::work tx(c);
      tx.exec("SET LOCAL lock_timeout = '1s'");
      tx.exec(sql);
      tx.commit();
      return "";
    } catch (const pqxx::sql_error& e) {
      return e.sqlstate();
    }
  }
  int64_t ReputationSent() {
    return Int("SELECT coalesce(sum(sent), 0) FROM reputation_hourly r"
               " JOIN consumer_groups g ON g.id = r.group_id WHERE g.name = 'mailroom'");
  }
};

TEST_F(GroupLockTest, ADequeueInProgressAndTheAcknowledgementsCountersDoNotWaitForEachOther) {
  Exec("INSERT INTO accounts (email, login) SELECT 'u' || i || '@example.com', 'u' || i"
       " FROM generate_series(1, 30) i");
  CollectSignups();
  pqxx::connection dequeuer(url_), acker(url_), other(url_);
  {
    // A dequeue in progress (not committed) holds the group row.
    pqxx::work dequeue(dequeuer);
    ASSERT_EQ(dequeue.exec1("SELECT count(*) FROM mailroom_dequeue('mailroom', 10, 'a', 60000)")[0]
                  .as<int64_t>(),
              10);
    EXPECT_EQ(RunWithoutWaiting(acker, "SELECT mailroom_record_sent('mailroom', 7, '{}', '{}')"),
              "")
        << "the reputation count waited for the dequeue in progress";
    EXPECT_EQ(RunWithoutWaiting(acker, "SELECT * FROM mailroom_budget_grant('mailroom', 'h', 5,"
                                       " false, 100, 60000, NULL, 0)"),
              "")
        << "a budget grant waited for the dequeue in progress";
    // Dequeues of one group are still serialised.
    EXPECT_EQ(RunWithoutWaiting(other, "SELECT count(*) FROM mailroom_dequeue('mailroom', 10,"
                                       " 'b', 60000)"),
              "55P03")
        << "a second dequeue of the group did not wait for the first";
    dequeue.commit();
  }
  {
    // An acknowledgement's counters written and not committed yet: the next dequeue goes on.
    pqxx::work ack(acker);
    ack.exec("SELECT mailroom_record_sent('mailroom', 3, '{}', '{}')");
    EXPECT_EQ(RunWithoutWaiting(dequeuer, "SELECT count(*) FROM mailroom_dequeue('mailroom', 10,"
                                          " 'a', 60000)"),
              "")
        << "the dequeue waited for an acknowledgement's uncommitted reputation row";
    ack.commit();
  }
  EXPECT_EQ(ReputationSent(), 10);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE state = 'leased'"), 20);
  EXPECT_EQ(Int("SELECT coalesce(sum(emails), 0) FROM budget_grants WHERE holder = 'h'"), 5);
}

// The dequeue hands out waiting recoveries before waiting activations across the
// whole backlog of a group, new and due again alike.
class PriorityTest : public SchemaTest {
 protected:
  // Leases up to `n` jobs; returns their actions in the order handed out ('r' recovery, 'a'
  // activation, 'l' sign-in code, 'n' a notice).
  // `recoveries_only`: the recovery lane's call (0014's fifth argument).
  std::string Dequeue(int n, const std::string& group = "mailroom", bool recoveries_only = false) {
    pqxx::work tx(*conn_);
    std::string out;
    for (const auto& r :
         tx.exec(absl::StrCat("SELECT action FROM mailroom_dequeue('", group, "', ", n,
                              ", 'owner', 60000", recoveries_only ? ", true)" : ")"))) {
      const std::string action = r[0].as<std::string>();
      out += action == "password_recovery" ? 'r'
             : action == "activation"      ? 'a'
             : action == "login_code"      ? 'l'
                                           : 'n';
    }
    tx.commit();
    return out;
  }
  void Activations(int n, int from = 1) {
    Exec(absl::StrCat("INSERT INTO accounts (email, login) SELECT 'u' || i || '@example.com',"
                      " 'u' || i FROM generate_series(",
                      from, ", ", from + n - 1, ") i"));
    CollectSignups();
  }
  void Recoveries(int n, int from = 1) {
    Exec(absl::StrCat("INSERT INTO accounts (email, login, status) SELECT 'r' || i ||"
                      " '@example.com', 'r' || i, 'active' FROM generate_series(",
                      from, ", ", from + n - 1, ") i"));
    CollectSignups();
    Exec(absl::StrCat("INSERT INTO tokens (account, action) SELECT id, 'password_recovery'"
                      " FROM accounts WHERE login IN (SELECT 'r' || i FROM generate_series(",
                      from, ", ", from + n - 1, ") i)"));
  }
  // `n` active accounts (logins prefix || i) and a token of `action` for each.
  void Requests(const std::string& action, const std::string& prefix, int n) {
    Exec(absl::StrCat("INSERT INTO accounts (email, login, status) SELECT '", prefix,
                      "' || i || '@example.com', '", prefix,
                      "' || i, 'active'"
                      " FROM generate_series(1, ",
                      n, ") i"));
    Exec(absl::StrCat("INSERT INTO tokens (account, action) SELECT id, '", action,
                      "' FROM accounts WHERE login LIKE '", prefix, "%'"));
  }
};

// Behind 2,000 activations and 2,000 notices, 5 recoveries and 5 sign-in codes (critical) are
// the next 10 jobs handed out; the activations (normal) all go before the first notice.
TEST_F(PriorityTest, CriticalBeforeNormalBeforeNotice) {
  Activations(2000);
  Requests("password_changed", "n", 2000);
  EXPECT_EQ(Dequeue(10), "aaaaaaaaaa");
  Recoveries(5);
  Requests("login_code", "l", 5);
  EXPECT_EQ(Dequeue(12), "rrrrrlllllaa");
  EXPECT_EQ(Dequeue(1988), std::string(1988, 'a'));
  Requests("login_code", "m", 1);
  EXPECT_EQ(Dequeue(3), "lnn");
  EXPECT_EQ(Dequeue(5000), std::string(1998, 'n'));
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states"), Int("SELECT count(*) FROM tokens"));
  EXPECT_EQ(Int("SELECT depth FROM mailroom_stats('mailroom')"), 0);
}

// The lane serves the whole critical class: recoveries and sign-in codes, not notices.
TEST_F(PriorityTest, TheLaneHandsOutEveryCriticalAction) {
  Requests("password_changed", "n", 20);
  Activations(20);
  Requests("login_code", "l", 3);
  Recoveries(2);
  EXPECT_EQ(Dequeue(100, "mailroom", true), "lllrr");
  // One lease batch for the class's window, recoveries and codes alike.
  EXPECT_EQ(Int("SELECT sum(cardinality(ids)) FROM lease_batches WHERE recovery"), 5);
  EXPECT_EQ(Dequeue(100), std::string(20, 'a') + std::string(20, 'n'));
}

// Notices are the first thing a tight budget drops: while a group's month has less than
// notice_pause_percent (20) of its budget left they are not leased (activations are), and they
// go once the budget has room again; the pause reads the group's budget or the collector's
// default for it.
TEST_F(PriorityTest, NoticesWaitWhileTheBudgetLeftIsUnderThePauseThreshold) {
  Exec("INSERT INTO group_budgets (group_id, monthly_budget_micros) VALUES (1, 1000000)");
  Exec("INSERT INTO budget_months (group_id, month, granted_micros) VALUES"
       " (1, date_trunc('month', now() AT TIME ZONE 'UTC')::DATE, 810000)");
  Requests("account_suspended", "n", 5);
  Activations(3);
  EXPECT_EQ(Dequeue(100), "aaa");  // 19% left: notices wait
  EXPECT_EQ(Int("SELECT depth FROM mailroom_stats('mailroom')"), 5);
  Exec("UPDATE mailroom_settings SET notice_pause_percent = 19");
  EXPECT_EQ(Dequeue(100), "nnnnn");
  // The collector's default budget when the group has none of its own.
  Exec("UPDATE mailroom_settings SET notice_pause_percent = 20");
  Exec("UPDATE group_budgets SET monthly_budget_micros = NULL");
  Requests("account_suspended", "m", 2);
  pqxx::work tx(*conn_);
  EXPECT_EQ(
      tx.exec("SELECT * FROM mailroom_dequeue('mailroom', 10, 'o', 60000, false, 1000000)").size(),
      0u);
  EXPECT_EQ(
      tx.exec("SELECT * FROM mailroom_dequeue('mailroom', 10, 'o', 60000, false, 2000000)").size(),
      2u);
}

// The action's rules: expiry, class and code length from its row; an action added with one
// INSERT is requested like a built-in.
TEST_F(PriorityTest, TokensTakeTheirActionsRules) {
  Requests("login_code", "l", 1);
  Exec("UPDATE actions SET code_length = 8, expiry_seconds = 120 WHERE name = 'login_code'");
  Requests("login_code", "k", 1);
  EXPECT_EQ(Text("SELECT string_agg(char_length(code) || ':' || (expires_at - created_at) || ':'"
                 " || priority, ',' ORDER BY id) FROM tokens"),
            "6:600:critical,8:120:critical");
  EXPECT_THROW(Exec("UPDATE actions SET code_length = 5 WHERE name = 'login_code'"),
               pqxx::check_violation);
  EXPECT_THROW(Exec("UPDATE actions SET priority = 'notice' WHERE name = 'password_recovery'"),
               pqxx::check_violation);
  EXPECT_THROW(Exec("INSERT INTO actions (name) VALUES ('Bad-Name')"), pqxx::check_violation);
  EXPECT_THROW(Exec("INSERT INTO tokens (account, action) SELECT id, 'no_such_action'"
                    " FROM accounts LIMIT 1"),
               pqxx::sql_error);
  Exec("INSERT INTO actions (name, priority, carries_secret) VALUES ('weekly_digest', 'notice',"
       " false)");
  Requests("weekly_digest", "w", 2);
  EXPECT_EQ(Dequeue(10), "llnn");
  // The settings' old limit columns still set the two first actions' limits.
  Exec("UPDATE mailroom_settings SET recovery_limit_per_account = 7");
  EXPECT_EQ(Int("SELECT limit_per_account FROM actions WHERE name = 'password_recovery'"), 7);
}

TEST_F(PriorityTest, RecoveriesQueuedBehindABacklogOfActivationsLeaveFirst) {
  Activations(2000);
  EXPECT_EQ(Dequeue(10), "aaaaaaaaaa");  // mid-window of the activations' cursor
  Recoveries(5);
  EXPECT_EQ(Dequeue(3), "rrr");
  EXPECT_EQ(Dequeue(4), "rraa");
  Activations(10, 5000);
  Recoveries(1, 100);
  EXPECT_EQ(Dequeue(2), "ra");
  // Every token is handed out exactly once: the rest, then nothing.
  EXPECT_EQ(Dequeue(5000), std::string(2010 - 10 - 2 - 1, 'a'));
  EXPECT_EQ(Dequeue(10), "");
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states"), Int("SELECT count(*) FROM tokens"));
  EXPECT_EQ(Int("SELECT depth FROM mailroom_stats('mailroom')"), 0);
}

TEST_F(PriorityTest, RecoveriesDueAgainGoBeforeActivationsDueAgainAndNewTokens) {
  Activations(20);
  Recoveries(2);
  EXPECT_EQ(Dequeue(12), "rraaaaaaaaaa");
  // Every lease runs out, the activations' first.
  Exec("UPDATE deliveries SET due_at = now() - interval '1 minute' WHERE NOT recovery");
  Exec("UPDATE deliveries SET due_at = now() - interval '1 second' WHERE recovery");
  Exec("UPDATE lease_batches SET due_at = now() - interval '1 minute'"
       " WHERE state = 'leased' AND NOT recovery");
  Exec("UPDATE lease_batches SET due_at = now() - interval '1 second'"
       " WHERE state = 'leased' AND recovery");
  Recoveries(1, 10);
  // Recoveries due again, the new recovery, activations due again, new activations.
  EXPECT_EQ(Dequeue(14), "rrraaaaaaaaaaa");
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE attempts = 2"), 12);
  EXPECT_EQ(Dequeue(100), std::string(9, 'a'));
}

// 0014's recovery lane: recoveries only (new and due again); the activations' cursor is
// neither read nor moved, and nothing is handed out twice.
TEST_F(PriorityTest, TheRecoveryLaneHandsOutRecoveriesOnly) {
  Activations(100);
  EXPECT_EQ(Dequeue(10), "aaaaaaaaaa");  // mid-window of the activations' cursor
  EXPECT_EQ(Dequeue(10, "mailroom", true), "");
  Recoveries(5);
  EXPECT_EQ(Dequeue(3, "mailroom", true), "rrr");
  EXPECT_EQ(Dequeue(10, "mailroom", true), "rr");
  EXPECT_EQ(Dequeue(10, "mailroom", true), "");
  EXPECT_EQ(Int("SELECT depth FROM mailroom_stats('mailroom')"), 90);
  // Every lease runs out: the lane takes the recoveries again, not the activations.
  Exec("UPDATE deliveries SET due_at = now() - interval '1 second'");
  Exec("UPDATE lease_batches SET due_at = now() - interval '1 second' WHERE state = 'leased'");
  EXPECT_EQ(Dequeue(10, "mailroom", true), "rrrrr");
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE attempts = 2"), 5);
  EXPECT_EQ(Dequeue(1000), std::string(10 + 90, 'a'));
  EXPECT_EQ(Dequeue(10), "");
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states"), Int("SELECT count(*) FROM tokens"));
}

TEST_F(PriorityTest, DepthCountsEachCursorApart) {
  Activations(100);
  Recoveries(5);
  EXPECT_EQ(Int("SELECT depth FROM mailroom_stats('mailroom')"), 105);
  EXPECT_EQ(Dequeue(7), "rrrrraa");
  EXPECT_EQ(Int("SELECT depth FROM mailroom_stats('mailroom')"), 98);
}

// A new group (mailroom_ensure_group does not set the recoveries' cursor) starts it from the
// activations' cursor and hands every token out once.
TEST_F(PriorityTest, NewGroupsKeepEveryTokenOnce) {
  Activations(50);
  Exec("SELECT mailroom_ensure_group('audit', false)");
  Activations(50, 1000);
  Recoveries(3);
  EXPECT_EQ(Dequeue(4, "audit"), "rrra");
  EXPECT_EQ(Dequeue(4), "rrra");
  EXPECT_EQ(Dequeue(1000, "audit").size(), 49u);
  EXPECT_EQ(Dequeue(1000).size(), 99u);
}

// Each class's cursor is a row of group_cursors (it was four columns of consumer_groups per
// class): a group in the middle of a window goes back to the columns and up again with every
// position kept, and hands out exactly the jobs it had not handed out yet.
TEST_F(PriorityTest, CursorsInTheMiddleOfAWindowKeepTheirPlaceAcrossTheirTable) {
  Recoveries(3);
  Activations(4);
  EXPECT_EQ(Dequeue(4), "rrra");  // the critical window read whole, the normal one's first job
  const std::string cursors =
      "SELECT string_agg(concat_ws(' ', priority, prev_snapshot, cur_snapshot, pos_txid, pos_id),"
      " ', ' ORDER BY priority) FROM group_cursors";
  const std::string before = Row(cursors)[0].as<std::string>();
  ASSERT_TRUE(MigrateDown(url_, EmbeddedMigrations(), 45).ok());
  conn_ = std::make_unique<pqxx::connection>(url_);
  EXPECT_EQ(Int("SELECT count(*) FROM consumer_groups WHERE cur_snapshot IS NOT NULL"
                " AND pos_id IS NOT NULL AND rec_cur_snapshot IS NULL"),
            1);
  ASSERT_TRUE(MigrateUp(url_, EmbeddedMigrations()).ok());
  conn_ = std::make_unique<pqxx::connection>(url_);
  EXPECT_EQ(Row(cursors)[0].as<std::string>(), before);
  EXPECT_EQ(Dequeue(10), "aaa");
  EXPECT_EQ(Dequeue(10), "");
}

// The upgrade that queues signups grants INSERT on the queue to every role that could insert
// accounts, so the application's signups keep working through it with no GRANT of its own, a
// role whose name needs quoting too.
TEST_F(SchemaTest, TheApplicationsRoleSignsUpAcrossTheUpgradeToTheSignupQueue) {
  ASSERT_TRUE(MigrateDown(url_, EmbeddedMigrations(), 27).ok());
  conn_ = std::make_unique<pqxx::connection>(url_);
  Exec("DROP ROLE IF EXISTS \"Mailroom Upgrade\"");
  Exec("CREATE ROLE \"Mailroom Upgrade\"");
  Exec("GRANT USAGE ON SCHEMA mailroom TO \"Mailroom Upgrade\"");
  Exec("GRANT SELECT, INSERT, UPDATE ON accounts, tokens, mailroom_address_requests"
       " TO \"Mailroom Upgrade\"");
  Exec("GRANT SELECT ON mailroom_settings TO \"Mailroom Upgrade\"");
  Exec("GRANT USAGE ON SEQUENCE accounts_id_seq, tokens_id_seq TO \"Mailroom Upgrade\"");
  ASSERT_TRUE(MigrateUp(url_, EmbeddedMigrations()).ok());
  pqxx::connection c(url_);
  pqxx::nontransaction app(c);
  app.exec("SET ROLE \"Mailroom Upgrade\"");
  app.exec("INSERT INTO accounts (email, login) VALUES ('up@example.com', 'up')");
  CollectSignups();
  EXPECT_EQ(Int("SELECT count(*) FROM tokens"), 1);
}

// Reverting the signup queue while a collection is running: the revert waits for it, so each
// queued signup becomes one token, made by the collection or by the revert, never by both.
TEST_F(SchemaTest, RevertingTheSignupQueueWaitsForARunningCollection) {
  ASSERT_TRUE(MigrateDown(url_, EmbeddedMigrations(), 28).ok());
  Exec("INSERT INTO accounts (email, login) SELECT 'q' || i || '@example.com', 'q' || i"
       "  FROM generate_series(1, 20) i");
  pqxx::connection collector(url_);
  pqxx::work collection(collector);
  EXPECT_EQ(collection.exec1("SELECT mailroom_collect_signups(10)")[0].as<int>(), 10);
  absl::Status reverted = absl::UnknownError("not run");
  std::thread revert([&] { reverted = MigrateDown(url_, EmbeddedMigrations(), 27).status(); });
  // Until the revert waits for a lock the open collection holds.
  pqxx::connection watch(url_);
  bool waiting = false;
  for (int i = 0; i < 3000 && !waiting; ++i) {
    pqxx::nontransaction w(watch);
    waiting = w.exec1("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                      " AND wait_event_type = 'Lock'")[0]
                  .as<int>() > 0;
    if (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(waiting);
  collection.commit();
  revert.join();
  ASSERT_TRUE(reverted.ok()) << reverted;
  EXPECT_EQ(Int("SELECT count(*) FROM tokens"), 20);
  EXPECT_EQ(Int("SELECT count(DISTINCT account) FROM tokens"), 20);
}

TEST_F(SchemaTest, UpDownUpLeavesAWorkingSchema) {
  ASSERT_TRUE(MigrateDown(url_, EmbeddedMigrations(), 0).ok());
  ASSERT_TRUE(MigrateUp(url_, EmbeddedMigrations()).ok());
  conn_ = std::make_unique<pqxx::connection>(url_);
  Exec("INSERT INTO accounts (email, login) VALUES ('a@example.com', 'a')");
  CollectSignups();
  EXPECT_EQ(Int("SELECT count(*) FROM tokens"), 1);
}

// Limits against email bombing, decided by a trigger on tokens.
class LimitsTest : public SchemaTest {
 protected:
  // An active account (no activation token); returns its id.
  int64_t Account(const std::string& email) {
    return Int("INSERT INTO accounts (email, login, status) VALUES ('" + email + "', '" + email +
               "', 'active') RETURNING id");
  }
  // Requests a password recovery the way the application does; returns the token id.
  int64_t Recover(int64_t account, pqxx::connection* c = nullptr) {
    pqxx::work tx(c ? *c : *conn_);
    int64_t id = tx.exec1(absl::StrCat("INSERT INTO tokens (account, action) VALUES (", account,
                                       ", 'password_recovery') RETURNING id"))[0]
                     .as<int64_t>();
    tx.commit();
    return id;
  }
  bool Limited(int64_t token) {
    return Row(absl::StrCat("SELECT rate_limited FROM tokens WHERE id = ", token))[0].as<bool>();
  }
  std::string Reason(int64_t token) {
    return Row(absl::StrCat("SELECT coalesce(suppressed_reason, '') FROM tokens WHERE id = ",
                            token))[0]
        .as<std::string>();
  }
  int64_t Pending(int64_t account) {
    return Int(absl::StrCat("SELECT count(*) FROM tokens WHERE account = ", account,
                            " AND action = 'password_recovery' AND superseded_by IS NULL"
                            " AND NOT rate_limited"));
  }
  // Waits (bounded) until some backend waits for a lock.
  bool SomeoneWaitsForALock() {
    for (int i = 0; i < 500; ++i) {
      if (Int("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'") > 0) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
};

TEST_F(LimitsTest, ANewerRecoverySupersedesTheOlderAndTheSixthIsRateLimited) {
  const int64_t a = Account("victim@example.com");
  std::vector<int64_t> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(Recover(a));
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(Limited(ids[i])) << i;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Reason(ids[i]),
              absl::StrCat("superseded by a newer password recovery request (token ", ids[i + 1],
                           ")"));
  }
  EXPECT_TRUE(Limited(ids[5]));
  EXPECT_THAT(Reason(ids[5]), HasSubstr("5 password_recovery requests for this account"));
  // The rate-limited request supersedes nothing: the fifth stays the one pending recovery.
  EXPECT_EQ(Reason(ids[4]), "");
  EXPECT_EQ(Pending(a), 1);
}

TEST_F(LimitsTest, LimitsComeFromMailroomSettings) {
  Exec("UPDATE mailroom_settings SET recovery_limit_per_account = 2,"
       " activation_limit_per_account = 1");
  const int64_t a = Account("a@example.com");
  EXPECT_FALSE(Limited(Recover(a)));
  EXPECT_FALSE(Limited(Recover(a)));
  EXPECT_TRUE(Limited(Recover(a)));
  // Activations: the provisioning token is the one allowed; a second one is limited.
  Exec("INSERT INTO accounts (email, login) VALUES ('p@example.com', 'p')");
  CollectSignups();
  Exec("INSERT INTO tokens (account, action) SELECT id, 'activation' FROM accounts"
       " WHERE login = 'p'");
  EXPECT_EQ(Int("SELECT count(*) FILTER (WHERE rate_limited) FROM tokens t JOIN accounts a"
                " ON a.id = t.account WHERE a.login = 'p'"),
            1);
  // NULL: no limit.
  Exec("UPDATE mailroom_settings SET recovery_limit_per_account = NULL,"
       " recovery_limit_per_address = NULL");
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(Limited(Recover(a)));
  EXPECT_EQ(Pending(a), 1);
}

TEST_F(LimitsTest, TheWindowSlides) {
  const int64_t a = Account("a@example.com");
  // Five requests made 24 h minus 10 s ago: the window is full for 10 more seconds.
  for (int i = 0; i < 5; ++i) Recover(a);
  Exec("UPDATE tokens SET created_at = EXTRACT(EPOCH FROM now())::BIGINT - 86390");
  // The address's counter holds the same requests' times.
  Exec("UPDATE mailroom_address_requests"
       "   SET times = array_fill(EXTRACT(EPOCH FROM now())::BIGINT - 86390,"
       "                          ARRAY[cardinality(times)])");
  EXPECT_TRUE(Limited(Recover(a)));
  // 20 s later (moved back in time), the five have left the window.
  Exec("UPDATE tokens SET created_at = created_at - 20");
  Exec("UPDATE mailroom_address_requests"
       "   SET times = ARRAY(SELECT x - 20 FROM unnest(times) x)");
  EXPECT_FALSE(Limited(Recover(a)));
  // The window is a setting too.
  Exec("UPDATE mailroom_settings SET limit_window_seconds = 86400 * 2");
  EXPECT_TRUE(Limited(Recover(a)));
}

// The per-address limit alone (the account's limit out of the way) follows the window too,
// whatever its length: the counter keeps the newest `limit` accepted requests.
TEST_F(LimitsTest, ThePerAddressWindowSlidesAndIsASetting) {
  Exec("UPDATE mailroom_settings SET recovery_limit_per_account = NULL,"
       " recovery_limit_per_address = 3");
  const int64_t a = Account("w@example.com");
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(Limited(Recover(a))) << i;
  EXPECT_TRUE(Limited(Recover(a)));  // rate-limited requests are not counted...
  Exec("UPDATE mailroom_address_requests SET times = ARRAY(SELECT x - 86390 FROM unnest(times) x)");
  EXPECT_TRUE(Limited(Recover(a)));  // ...so the window is still full for 10 s
  Exec("UPDATE mailroom_address_requests SET times = ARRAY(SELECT x - 20 FROM unnest(times) x)");
  EXPECT_FALSE(Limited(Recover(a)));  // the three have left it: one more goes through
  EXPECT_EQ(Int("SELECT cardinality(times) FROM mailroom_address_requests"), 3);
  // A two-day window takes the older ones in again.
  Exec("UPDATE mailroom_settings SET limit_window_seconds = 86400 * 2");
  EXPECT_TRUE(Limited(Recover(a)));
}

// The address counters are unlogged (they only throttle; docs/design.md): a clean restart keeps
// them, so a full window stays full; a crash empties them, so each address's window starts again
// once, and the limit holds from there. Back before 0051 the table is logged, with its rows.
TEST_F(LimitsTest, AddressCountersSurviveARestartAndACrashStartsTheirWindowAgain) {
  Exec("UPDATE mailroom_settings SET recovery_limit_per_account = NULL,"
       " recovery_limit_per_address = 3");
  auto persistence = [&] {
    return Text("SELECT relpersistence::text FROM pg_class"
                " WHERE oid = 'mailroom.mailroom_address_requests'::regclass");
  };
  EXPECT_EQ(persistence(), "u");
  const int64_t a = Account("crash@example.com");
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(Limited(Recover(a))) << i;
  EXPECT_TRUE(Limited(Recover(a)));
  conn_.reset();
  ASSERT_TRUE(pg_->Stop().ok());
  ASSERT_TRUE(pg_->Resume().ok());
  conn_ = std::make_unique<pqxx::connection>(url_);
  EXPECT_TRUE(Limited(Recover(a)));
  EXPECT_EQ(Int("SELECT cardinality(times) FROM mailroom_address_requests"), 3);
  // The test server commits asynchronously; a real one has flushed every commit already.
  Exec("CHECKPOINT");
  conn_.reset();
  ASSERT_TRUE(pg_->Crash().ok());
  ASSERT_TRUE(pg_->Resume().ok());
  conn_ = std::make_unique<pqxx::connection>(url_);
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom_address_requests"), 0);
  EXPECT_EQ(Int("SELECT count(*) FROM tokens WHERE account = " + std::to_string(a)), 5);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(Limited(Recover(a))) << i;
  EXPECT_TRUE(Limited(Recover(a)));
  ASSERT_TRUE(MigrateDown(url_, EmbeddedMigrations(), 50).ok());
  EXPECT_EQ(persistence(), "p");
  EXPECT_EQ(Int("SELECT cardinality(times) FROM mailroom_address_requests"), 3);
  EXPECT_TRUE(Limited(Recover(a)));
  ASSERT_TRUE(MigrateUp(url_, EmbeddedMigrations()).ok());
  EXPECT_EQ(persistence(), "u");
}

// Rows whose newest request left the window go (the retention pass calls this); others stay.
TEST_F(LimitsTest, StaleAddressCountersArePruned) {
  const int64_t old_one = Account("old@example.com");
  const int64_t fresh = Account("fresh@example.com");
  Recover(old_one);
  Recover(fresh);
  Exec("UPDATE mailroom_address_requests SET times = ARRAY[EXTRACT(EPOCH FROM now())::BIGINT"
       " - 86401] WHERE address = 'old@example.com'");
  int64_t deleted = 0;
  int64_t after = 0;
  for (bool more = true; more;) {
    pqxx::row r = Row(
        absl::StrCat("SELECT * FROM mailroom_prune_address_requests(", after, ", 1000)"));
    deleted += r[0].as<int64_t>();
    after = r[1].as<int64_t>();
    more = r[2].as<bool>();
  }
  EXPECT_EQ(deleted, 1);
  EXPECT_EQ(Text("SELECT string_agg(address, ',') FROM mailroom_address_requests"),
            "fresh@example.com");
}

// Two accounts whose addresses are one mailbox's (sub-addresses fold into it, case and spaces
// aside) share the mailbox's limit; superseding stays per account.
TEST_F(LimitsTest, PerAddressAcrossAccountsWithTheSameNormalisedEmail) {
  Exec("UPDATE mailroom_settings SET recovery_limit_per_account = 10,"
       " recovery_limit_per_address = 3");
  const int64_t a = Account("Victim@Example.com");
  const int64_t b = Account(" victim+second@example.com ");
  const int64_t other = Account("other@example.com");
  EXPECT_FALSE(Limited(Recover(a)));
  EXPECT_FALSE(Limited(Recover(b)));
  EXPECT_FALSE(Limited(Recover(a)));
  const int64_t over = Recover(b);
  EXPECT_TRUE(Limited(over));
  EXPECT_THAT(Reason(over), HasSubstr("for this address"));
  EXPECT_FALSE(Limited(Recover(other)));
  // Superseding stays per account.
  EXPECT_EQ(Pending(a), 1);
  EXPECT_EQ(Pending(b), 1);
}

TEST_F(LimitsTest, ConcurrentRequestsForOneAccountCannotBothSlipUnderTheLimit) {
  Exec("UPDATE mailroom_settings SET recovery_limit_per_account = 1");
  const int64_t a = Account("a@example.com");
  pqxx::connection c1(url_), c2(url_);
  pqxx::work t1(c1);
  t1.exec(
      absl::StrCat("INSERT INTO tokens (account, action) VALUES (", a, ", 'password_recovery')"));
  int64_t second = 0;
  std::thread other([&] { second = Recover(a, &c2); });
  ASSERT_TRUE(SomeoneWaitsForALock());  // the second waits for the first's account lock
  t1.commit();
  other.join();
  EXPECT_TRUE(Limited(second));
  EXPECT_EQ(Int(absl::StrCat("SELECT count(*) FROM tokens WHERE account = ", a,
                             " AND NOT rate_limited")),
            1);
}

TEST_F(LimitsTest, ConcurrentRequestsForOneAddressCannotBothSlipUnderTheLimit) {
  Exec("UPDATE mailroom_settings SET recovery_limit_per_address = 1");
  const int64_t a = Account("v@example.com");
  const int64_t b = Account("V+b@example.com");
  pqxx::connection c1(url_), c2(url_);
  pqxx::work t1(c1);
  t1.exec(
      absl::StrCat("INSERT INTO tokens (account, action) VALUES (", a, ", 'password_recovery')"));
  int64_t second = 0;
  std::thread other([&] { second = Recover(b, &c2); });
  ASSERT_TRUE(SomeoneWaitsForALock());  // the lock of the address's counter row
  t1.commit();
  other.join();
  EXPECT_TRUE(Limited(second));
}

// A signup runs one trigger function in the application's transaction, the account's (it
// queues the signup): no token, no limit, no code, and while no collector is idle no wake-up.
// The collection (the collector's transaction) decides the limits of its batch itself (one call
// of the address counter for the batch) and the token limits trigger skips its tokens, and only
// its tokens: a token inserted later in the same transaction runs the trigger.
TEST_F(LimitsTest, ASignupRunsOnlyTheAccountTrigger) {
  pqxx::work tx(*conn_);
  tx.exec("SET LOCAL track_functions = 'all'");
  auto calls = [&] {
    return tx
        .exec1("SELECT string_agg(funcname || '=' || calls, ',' ORDER BY funcname)"
               "  FROM pg_stat_xact_user_functions WHERE funcname ~ '^(mailroom|trg)_'")[0]
        .as<std::string>();
  };
  tx.exec("INSERT INTO accounts (email, login) VALUES ('s@example.com', 's')");
  EXPECT_EQ(calls(), "trg_before_account_insert=1");
  EXPECT_EQ(tx.exec1("SELECT mailroom_collect_signups(10)")[0].as<int>(), 1);
  // The collection and its parts (take, due, address limits, insert): no token trigger.
  const std::string collection =
      "mailroom_collect_address_limits=1,mailroom_collect_due=1,mailroom_collect_insert=1,"
      "mailroom_collect_signups=1,mailroom_collect_take=1,";
  EXPECT_EQ(calls(), "mailroom_address_limit=1," + collection +
                         "mailroom_random_code=1,trg_before_account_insert=1");
  tx.exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts");
  // A recovery's code takes a wrong-code counter; it supersedes the account's pending one.
  EXPECT_EQ(calls(), "mailroom_address_limit=2," + collection +
                         "mailroom_random_code=2,mailroom_supersede=1,"
                         "mailroom_take_code_counter=1,trg_before_account_insert=1,"
                         "trg_before_token_insert_limits=1");
}

// The collection decides its whole batch by the trigger's rules: the address's limit across
// accounts whose emails are one mailbox's (three requests in one batch: the first two
// accepted, the third refused), and the account's (its earlier accepted request, expired unused,
// still counts in the window); the counters hold what the trigger would have counted.
TEST_F(LimitsTest, ACollectionDecidesItsBatchByTheTriggersRules) {
  Exec("UPDATE mailroom_settings SET activation_limit_per_account = 1,"
       " activation_limit_per_address = 2");
  Exec("INSERT INTO accounts (email, login) VALUES ('p@example.com', 'p')");
  CollectSignups();
  // Its token expires unused, and the application queues the signup again.
  Exec("UPDATE tokens SET expires_at = EXTRACT(EPOCH FROM now())::BIGINT - 1");
  Exec("INSERT INTO mailroom_signups (account) SELECT id FROM accounts WHERE login = 'p'");
  Exec("INSERT INTO accounts (email, login) VALUES ('a@example.com', 'a'),"
       " (' A+b@example.com', 'b'), ('a+c@EXAMPLE.com', 'c'), ('z@example.com', 'z')");
  pqxx::work tx(*conn_);
  tx.exec("SET LOCAL track_functions = 'all'");
  EXPECT_EQ(tx.exec1("SELECT mailroom_collect_signups(100)")[0].as<int>(), 5);
  EXPECT_EQ(tx.exec1("SELECT string_agg(funcname || '=' || calls, ',' ORDER BY funcname)"
                     "  FROM pg_stat_xact_user_functions"
                     " WHERE funcname IN ('mailroom_address_limit',"
                     "                    'trg_before_token_insert_limits')")[0]
                .as<std::string>(),
            "mailroom_address_limit=3");  // the first requests, then b's and c's
  tx.commit();
  EXPECT_EQ(Text("SELECT string_agg(a.login || ':' || t.address || ':'"
                 "   || coalesce(t.suppressed_reason, 'sent'), ', ' ORDER BY t.id)"
                 "  FROM tokens t JOIN accounts a ON a.id = t.account"
                 " WHERE t.expires_at > EXTRACT(EPOCH FROM now())"),
            "a:a@example.com:sent, b:a+b@example.com:sent, c:a+c@example.com:rate limited: 2"
            " activation requests for this address in the last 86400 s (limit 2),"
            " p:p@example.com:rate limited: 1 activation requests for this account in the last"
            " 86400 s (limit 1), z:z@example.com:sent");
  EXPECT_EQ(Text("SELECT string_agg(address || '=' || cardinality(times), ',' ORDER BY address)"
                 "  FROM mailroom_address_requests"),
            "a@example.com=2,p@example.com=1,z@example.com=1");
}

// Many accounts whose emails are one mailbox's sub-addresses, in one batch: exactly the limit's
// worth accepted, in signup order, and the counter holds just those.
TEST_F(LimitsTest, ABatchOfRequestsForOneAddressAcceptsTheLimit) {
  Exec("INSERT INTO accounts (email, login)"
       " SELECT repeat(' ', i % 40) || 'Victim+' || i || '@example.com' || repeat(' ', i / 40),"
       " 'v' || i FROM generate_series(1, 1000) i");
  EXPECT_EQ(Int("SELECT mailroom_collect_signups(1000)"), 1000);
  EXPECT_EQ(Int("SELECT count(*) FROM tokens"
                " WHERE mailroom_limit_address(address) = 'victim@example.com'"),
            1000);
  EXPECT_EQ(Int("SELECT count(*) FROM tokens WHERE NOT rate_limited"), 3);
  EXPECT_EQ(Int("SELECT count(*) FROM tokens WHERE suppressed_reason = 'rate limited: 3"
                " activation requests for this address in the last 86400 s (limit 3)'"),
            997);
  EXPECT_EQ(Int("SELECT cardinality(times) FROM mailroom_address_requests"), 3);
}

// An address whose counter is already full meets several requests in one batch: every one is
// refused, and the counter keeps its times. (The first refusal must not make the second request
// the address's first in the batch.)
TEST_F(LimitsTest, ABatchMeetingAFullCounterRefusesEveryRequestForIt) {
  Exec("INSERT INTO accounts (email, login) VALUES ('victim@example.com', 'a1'),"
       " ('Victim+a2@example.com', 'a2'), ('VICTIM+a3@example.com', 'a3')");
  CollectSignups();
  ASSERT_EQ(Int("SELECT count(*) FROM tokens WHERE NOT rate_limited"), 3);
  Exec("INSERT INTO accounts (email, login) VALUES (' victim+b1@example.com', 'b1'),"
       " ('  victim+b2@example.com', 'b2'), ('   victim+b3@example.com', 'b3')");
  EXPECT_EQ(Int("SELECT mailroom_collect_signups(100)"), 3);
  EXPECT_EQ(Text("SELECT string_agg(a.login || ':' || t.rate_limited, ',' ORDER BY a.login)"
                 "  FROM tokens t JOIN accounts a ON a.id = t.account WHERE a.login LIKE 'b%'"),
            "b1:true,b2:true,b3:true");
  EXPECT_EQ(Int("SELECT cardinality(times) FROM mailroom_address_requests"), 3);
}

// A collection whose INSERT fails clears the collection's mark too: a caller that rolls back to
// a savepoint and carries on in the same transaction inserts tokens the limits trigger decides.
TEST_F(LimitsTest, AFailedCollectionLeavesNoMark) {
  Exec("INSERT INTO accounts (email, login) VALUES ('f@example.com', 'f')");
  Exec("ALTER TABLE tokens ADD CONSTRAINT test_no_activation CHECK (action <> 'activation')"
       " NOT VALID");
  pqxx::work tx(*conn_);
  {
    pqxx::subtransaction collection(tx, "collection");
    EXPECT_THROW(collection.exec("SELECT mailroom_collect_signups(10)"), pqxx::check_violation);
    collection.abort();
  }
  EXPECT_TRUE(tx.exec1("SELECT pg_sequence_last_value('mailroom_collection_xact')")[0].is_null());
  EXPECT_EQ(tx.exec1("INSERT INTO tokens (account, action) SELECT id, 'password_recovery'"
                     "  FROM accounts RETURNING address")[0]
                .as<std::string>(),
            "f@example.com");  // the trigger set it
}

// The collection checks its tokens' foreign key before it returns, and with it the checks its
// caller's transaction left pending: one of those failing fails the collection, which leaves no
// mark, and the constraint is deferred again for the rest of the transaction.
TEST_F(LimitsTest, AFailedForeignKeyCheckInACollectionLeavesNoMark) {
  Exec("INSERT INTO accounts (email, login) VALUES ('f@example.com', 'f')");
  pqxx::work tx(*conn_);
  tx.exec("INSERT INTO tokens (account, action) VALUES (-1, 'password_recovery')");
  {
    pqxx::subtransaction collection(tx, "collection");
    EXPECT_THROW(collection.exec("SELECT mailroom_collect_signups(10)"),
                 pqxx::foreign_key_violation);
    collection.abort();
  }
  EXPECT_TRUE(tx.exec1("SELECT pg_sequence_last_value('mailroom_collection_xact')")[0].is_null());
  EXPECT_NO_THROW(tx.exec("INSERT INTO tokens (account, action) VALUES (-2, 'password_recovery')"));
  EXPECT_THROW(tx.exec("SET CONSTRAINTS tokens_account_fkey IMMEDIATE"),
               pqxx::foreign_key_violation);
}

// An account queued twice in one batch gets one token, for its latest request: the earlier one
// is the same request made again. Here the difference shows: counted from the earlier request
// the account's one accepted request in the window (an expired token) refuses it; from the
// latest, that token has left the window.
TEST_F(LimitsTest, AnAccountQueuedTwiceGetsOneTokenForItsLatestRequest) {
  Exec("UPDATE mailroom_settings SET activation_limit_per_account = 1,"
       " limit_window_seconds = 100");
  Exec("INSERT INTO accounts (email, login) VALUES ('twice@example.com', 'twice')");
  Exec("DELETE FROM mailroom_signups");
  // One time for every statement (each its own now() would differ across a second's edge).
  const std::string now = absl::StrCat(Now());
  Exec(absl::StrCat("INSERT INTO tokens (account, action, created_at, expires_at) SELECT id,"
                    " 'activation', ",
                    now, " - 150, ", now, " - 1 FROM accounts"));
  Exec(absl::StrCat("INSERT INTO mailroom_signups (account, requested_at) SELECT id, ", now,
                    " - t FROM accounts, (VALUES (100), (0)) v(t)"));
  EXPECT_EQ(Int("SELECT mailroom_collect_signups(100)"), 2);
  EXPECT_EQ(Text(absl::StrCat("SELECT string_agg((", now,
                              " - created_at) || ':' || rate_limited, ',' ORDER BY id)"
                              " FROM tokens")),
            "150:false,0:false");
}

// A queued signup becomes a token only for an account that still exists, is still
// 'provisioned' and has no live activation token; every queued row is taken once, whatever
// becomes of it. Rows for ids no account has (a row an INSERT ... ON CONFLICT DO NOTHING
// skipped, or one the application's role queued itself) are dropped.
TEST_F(SchemaTest, ACollectedSignupMakesATokenOnlyForAProvisionedAccountWithoutALiveOne) {
  Exec("INSERT INTO accounts (email, login) VALUES ('a@example.com', 'a'), ('b@example.com', 'b'),"
       " ('c@example.com', 'c'), ('d@example.com', 'd')");
  Exec("INSERT INTO accounts (email, login) VALUES ('a@example.com', 'a2') ON CONFLICT DO NOTHING");
  Exec("INSERT INTO mailroom_signups (account) VALUES (999999)");
  Exec("DELETE FROM accounts WHERE login = 'b'");
  Exec("UPDATE accounts SET status = 'suspended' WHERE login IN ('c', 'd')");
  Exec("UPDATE accounts SET status = 'active' WHERE login = 'd'");  // back to provisioned
  // d's, made by its un-suspension (and c's and d's suspension notices).
  EXPECT_EQ(Int("SELECT count(*) FROM tokens WHERE action = 'activation'"), 1);
  EXPECT_EQ(Int("SELECT mailroom_collect_signups(100)"), 6);
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom_signups"), 0);
  EXPECT_EQ(Text("SELECT string_agg(a.login || ':' || t.action, ',' ORDER BY a.login)"
                 "  FROM tokens t JOIN accounts a ON a.id = t.account"
                 " WHERE t.action = 'activation'"),
            "a:activation,d:activation");
  EXPECT_EQ(Int("SELECT mailroom_collect_signups(100)"), 0);
  // c, un-suspended later, gets its token then.
  Exec("UPDATE accounts SET status = 'active' WHERE login = 'c'");
  EXPECT_EQ(Int("SELECT count(*) FROM tokens t JOIN accounts a ON a.id = t.account"
                " WHERE a.login = 'c' AND t.action = 'activation'"),
            1);
}

// Collections take turns: a collector's call while another's collection is still open takes
// nothing and returns at once (it neither waits nor fails); the next call after the commit takes
// the rest. Each signup is collected once.
TEST_F(SchemaTest, CollectionsTakeTurnsAndTakeEachSignupOnce) {
  Exec("INSERT INTO accounts (email, login) SELECT 'u' || i || '@example.com', 'u' || i"
       "  FROM generate_series(1, 2000) i");
  pqxx::connection c1(url_), c2(url_);
  pqxx::work t1(c1);
  EXPECT_EQ(t1.exec1("SELECT mailroom_collect_signups(1500)")[0].as<int>(), 1500);
  {
    pqxx::work t2(c2);
    EXPECT_EQ(t2.exec1("SELECT mailroom_collect_signups(1500)")[0].as<int>(), 0);
    // It locked and wrote nothing: its transaction has no id.
    EXPECT_TRUE(t2.exec1("SELECT pg_current_xact_id_if_assigned()")[0].is_null());
    t2.commit();
  }
  t1.commit();
  pqxx::work t2(c2);
  EXPECT_EQ(t2.exec1("SELECT mailroom_collect_signups(1500)")[0].as<int>(), 500);
  t2.commit();
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom_signups"), 0);
  EXPECT_EQ(Int("SELECT count(*) FROM tokens"), 2000);
  EXPECT_EQ(Int("SELECT count(DISTINCT account) FROM tokens"), 2000);
}

// A collection's foreign key checks (tokens -> accounts) probe accounts' primary key, whatever
// plan its session made while accounts was small. PostgreSQL plans a check five times, then
// keeps a generic plan for the session: made when accounts had one page, that plan reads the
// whole table, and a collector's session lasts, so every token read every account until the
// next ANALYZE of accounts. A new install: accounts analysed while empty (and not again).
TEST_F(SchemaTest, ACollectionsForeignKeyChecksProbeAccountsByIndex) {
  Exec("ALTER TABLE accounts SET (autovacuum_enabled = false)");
  Exec("ANALYZE accounts");
  pqxx::connection c(url_);
  for (int i = 0; i < 6; ++i) {
    Exec(absl::StrCat("INSERT INTO accounts (email, login) VALUES ('tiny", i,
                      "@example.com', 'tiny", i, "')"));
    pqxx::work t(c);
    EXPECT_EQ(t.exec1("SELECT mailroom_collect_signups(1000)")[0].as<int>(), 1);
    t.commit();
  }
  Exec("INSERT INTO accounts (email, login) SELECT 'u' || i || '@example.com', 'u' || i"
       "  FROM generate_series(1, 2000) i");
  pqxx::work t(c);
  EXPECT_EQ(t.exec1("SELECT mailroom_collect_signups(5000)")[0].as<int>(), 2000);
  t.exec("SET CONSTRAINTS ALL IMMEDIATE");  // any check still deferred runs now
  EXPECT_EQ(t.exec1("SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'accounts'")[0]
                .as<int64_t>(),
            0);
  // Two probes per token in the collection's own look-ups, and its foreign key check.
  EXPECT_GE(t.exec1("SELECT idx_scan FROM pg_stat_xact_user_tables WHERE relname = 'accounts'")[0]
                .as<int64_t>(),
            3 * 2000);
  t.commit();
  EXPECT_EQ(Int("SELECT count(*) FROM tokens"), 2006);
}

// The functions a busy collector calls every few milliseconds plan their statements once per
// session: left to choose, PostgreSQL planned the collection's again on every call (about half
// the cost of a call that collects a few signups).
TEST_F(SchemaTest, TheCollectorsPolledFunctionsPlanOncePerSession) {
  for (const char* fn : {"mailroom_collect_signups", "mailroom_dequeue"}) {
    EXPECT_EQ(Int(absl::StrCat("SELECT count(*) FROM pg_proc WHERE proname = '", fn,
                               "' AND 'plan_cache_mode=force_generic_plan' = ANY (proconfig)")),
              1)
        << fn;
  }
}

// A planner method turned off in a function (enable_seqscan and the like) gives every plan
// that still needs it the disable cost, which is far above jit_above_cost: with JIT on, the
// server's default, such a statement is compiled on every call at hundreds of milliseconds.
// Every function of mailroom's that turns a planner method off turns JIT off too.
TEST_F(SchemaTest, EveryFunctionThatTurnsAPlannerMethodOffTurnsJitOff) {
  EXPECT_EQ(Text("SELECT coalesce(string_agg(p.proname, ', ' ORDER BY p.proname), '')"
                 "  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                 " WHERE n.nspname = 'mailroom'"
                 "   AND EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'enable\\_%=off')"
                 "   AND NOT 'jit=off' = ANY (p.proconfig)"),
            "");
  EXPECT_GE(Int("SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                " WHERE n.nspname = 'mailroom' AND 'jit=off' = ANY (p.proconfig)"),
            15);
}

// The SQL helpers the dequeue, the delivery counters and the retention call for every row are
// inlined into their callers' plans: none shows in a plan as a call of its own. A sub-select in
// a helper's body (or any setting on it) makes it a function call per row; the token check's
// did, and the dequeue's window then cost 2.2 times the CPU.
TEST_F(SchemaTest, ThePerRowHelpersAreInlinedIntoTheirCallers) {
  const std::pair<const char*, const char*> cases[] = {
      {"mailroom_token_sendable",
       "SELECT mailroom.mailroom_token_sendable(t, a.status, 0, 'active')"
       " FROM mailroom.tokens t JOIN mailroom.accounts a ON a.id = t.account"},
      {"mailroom_suppression", "SELECT s.why FROM mailroom.accounts a,"
                               " LATERAL mailroom.mailroom_suppression(a.email) s"},
      {"mailroom_finished_state",
       "SELECT mailroom.mailroom_finished_state(d.state) FROM mailroom.deliveries d"},
      {"mailroom_limit_address",
       "SELECT mailroom.mailroom_limit_address(a.email) FROM mailroom.accounts a"},
  };
  for (const auto& [helper, query] : cases) {
    pqxx::nontransaction tx(*conn_);
    std::string plan;
    for (const auto& row : tx.exec(absl::StrCat("EXPLAIN (VERBOSE, COSTS OFF) ", query))) {
      absl::StrAppend(&plan, row[0].c_str(), "\n");
    }
    EXPECT_THAT(plan, ::testing::Not(HasSubstr(helper))) << plan;
  }
}

// A transaction that stays open anywhere in the cluster holds back the xmin of every snapshot:
// here a role that may only connect, in another database, while 300,000 tokens pass. A window
// reads the tokens of the transactions that committed between its two snapshots and of those
// begun since, never every token committed since the old transaction began: an empty dequeue
// reads no token (300,000 each before), a dequeue of 1,000 new tokens reads those 1,000, and
// the same after the old transaction has ended. Rows read: the tokens table's index fetches
// in the dequeue's own transaction (pg_stat_xact_user_tables, on a fresh connection).
TEST_F(SchemaTest, ALongTransactionElsewhereDoesNotWidenTheDequeuesWindow) {
  constexpr int kTokens = 300000, kChunk = 50000;
  Exec("DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'stranger') THEN"
       " CREATE ROLE stranger LOGIN; END IF; END $$");
  const int64_t account = Int("INSERT INTO accounts (email, login, status, activated_at)"
                              " VALUES ('many@example.com', 'many', 'active', 1) RETURNING id");
  Dequeue(10);  // the group's cursor starts here
  pqxx::connection stranger(testing::UrlAs(pg_->Url("postgres"), "stranger"));
  pqxx::work holder(stranger);
  holder.exec("SELECT pg_current_xact_id()");
  // Recoveries of one account, each chunk its own transaction; the triggers are skipped for
  // speed (the dequeue reads what they would have set: class, expiry, address).
  auto insert = [&](int n) {
    Exec(absl::StrCat("SET session_replication_role = replica;"
                      " INSERT INTO tokens (account, action, priority, expires_at, address)"
                      " SELECT ",
                      account,
                      ", 'password_recovery', 'critical', EXTRACT(EPOCH FROM now())::BIGINT"
                      " + 3600, 'many@example.com' FROM generate_series(1, ",
                      n, "); SET session_replication_role = origin"));
  };
  for (int i = 0; i < kTokens; i += kChunk) insert(kChunk);
  int64_t drained = 0;
  for (int64_t n = 1; n > 0; drained += n) n = static_cast<int64_t>(Dequeue(10000).size());
  ASSERT_EQ(drained, kTokens);

  // Rows of tokens a dequeue of `limit` reads, and how many jobs it leased. A connection of
  // its own: a backend's counts of earlier transactions may not have been flushed yet, and
  // the view shows them with the transaction's.
  auto dequeue = [&](int limit, int64_t* jobs) {
    pqxx::connection c(url_);
    pqxx::work tx(c);
    *jobs = tx.exec1(absl::StrCat("SELECT count(*) FROM mailroom_dequeue('mailroom', ", limit,
                                  ", 's', 60000)"))[0]
                .as<int64_t>();
    const int64_t read = tx.exec1("SELECT coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables"
                                  " WHERE relid = 'tokens'::regclass")[0]
                             .as<int64_t>();
    tx.commit();
    return read;
  };
  int64_t jobs = -1;
  EXPECT_EQ(dequeue(1000, &jobs), 0);
  EXPECT_EQ(jobs, 0);
  {  // The operators' statistics (each metrics scrape) read no token either.
    pqxx::connection c(url_);
    pqxx::work tx(c);
    EXPECT_EQ(tx.exec1("SELECT depth FROM mailroom_stats('mailroom')")[0].as<int64_t>(), 0);
    EXPECT_EQ(tx.exec1("SELECT coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables"
                       " WHERE relid = 'tokens'::regclass")[0]
                  .as<int64_t>(),
              0);
  }
  insert(1000);
  EXPECT_EQ(dequeue(1000, &jobs), 1000);
  EXPECT_EQ(jobs, 1000);
  EXPECT_EQ(dequeue(1000, &jobs), 0);
  holder.commit();  // the old transaction ends: it wrote no token
  EXPECT_EQ(dequeue(1000, &jobs), 0);
  EXPECT_EQ(dequeue(1000, &jobs), 0);
  EXPECT_EQ(jobs, 0);
}

// Collection never waits for the application: a signup whose account row an open transaction
// holds, or whose address's counter row one holds (a recovery inserted and not yet committed),
// stays queued; the others are collected at once; the held ones on a call after the commits.
TEST_F(SchemaTest, ACollectionSkipsSignupsWhoseRowsTheApplicationHolds) {
  Exec("INSERT INTO accounts (email, login) VALUES ('free@example.com', 'free'),"
       " ('held@example.com', 'held'), ('addr@example.com', 'addr')");
  // addr's address already has a counter row (an earlier activation of another account).
  Exec("INSERT INTO mailroom_address_requests (address, action, times)"
       " VALUES ('addr@example.com', 'activation', ARRAY[EXTRACT(EPOCH FROM now())::BIGINT])");
  pqxx::connection app1(url_), app2(url_);
  pqxx::work t1(app1), t2(app2);
  t1.exec("UPDATE accounts SET locale = 'de' WHERE login = 'held'");
  t2.exec("UPDATE mailroom_address_requests SET times = times WHERE address = 'addr@example.com'");
  // Waiting for either would end in lock_timeout's error after 1 s.
  EXPECT_EQ(Int("SELECT mailroom_collect_signups(100)"), 1);
  EXPECT_EQ(Text("SELECT string_agg(a.login, ',') FROM tokens t JOIN accounts a"
                 " ON a.id = t.account"),
            "free");
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom_signups"), 2);
  t1.commit();
  t2.commit();
  EXPECT_EQ(Int("SELECT mailroom_collect_signups(100)"), 2);
  EXPECT_EQ(Int("SELECT count(*) FROM tokens"), 3);
}

// A collection keeps scanning past the signups it must skip: with a whole batch's worth of
// queued signups whose accounts an open transaction holds at the queue's head, one call still
// collects the signups queued behind them; the held ones on the first call after the commit,
// each once.
TEST_F(SchemaTest, ACollectionScansPastABatchOfHeldSignups) {
  Exec("INSERT INTO accounts (email, login) SELECT 'held' || i || '@example.com', 'held' || i"
       "  FROM generate_series(1, 100) i");
  Exec("INSERT INTO accounts (email, login) SELECT 'free' || i || '@example.com', 'free' || i"
       "  FROM generate_series(1, 5) i");
  pqxx::connection app(url_);
  pqxx::work holder(app);
  EXPECT_EQ(
      holder.exec("UPDATE accounts SET locale = 'de' WHERE login LIKE 'held%'").affected_rows(),
      100u);
  EXPECT_EQ(Int("SELECT mailroom_collect_signups(100)"), 5);
  EXPECT_EQ(Text("SELECT string_agg(a.login, ',' ORDER BY a.login) FROM tokens t"
                 "  JOIN accounts a ON a.id = t.account"),
            "free1,free2,free3,free4,free5");
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom_signups"), 100);
  EXPECT_EQ(Int("SELECT mailroom_collect_signups(100)"), 0);  // only held ones left
  holder.commit();
  EXPECT_EQ(Int("SELECT mailroom_collect_signups(100)"), 100);
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom_signups"), 0);
  EXPECT_EQ(Int("SELECT count(*) FROM tokens"), 105);
  EXPECT_EQ(Int("SELECT count(DISTINCT account) FROM tokens"), 105);
}

// How many accepted activation requests busy@example.com's counter row holds.
constexpr char kBusyRequests[] = "SELECT cardinality(times) FROM mailroom_address_requests"
                                 " WHERE address = 'busy@example.com' AND action = 'activation'";

// Inserts the counter row of busy@example.com's activations, with two requests in the window, in
// `holder`'s transaction (an application's request for a new address, left open).
void InsertTwoRequestsOfBusy(pqxx::work& holder) {
  holder.exec("INSERT INTO mailroom_address_requests (address, action, times)"
              " VALUES ('busy@example.com', 'activation',"
              "         ARRAY[EXTRACT(EPOCH FROM now())::BIGINT - 10,"
              "               EXTRACT(EPOCH FROM now())::BIGINT - 5])");
}

// An address whose counter row another transaction is inserting (not yet committed) keeps only
// its own signups queued: the call neither waits for that transaction nor fails, and collects
// every other signup of the batch. After the commit the next call collects that address's
// signups once, counted after the committed requests (the per-address limit is 3).
TEST_F(LimitsTest, AnAddressWhoseCounterIsBeingInsertedKeepsOnlyItsOwnSignupsQueued) {
  Exec("INSERT INTO accounts (email, login) SELECT 'u' || i || '@example.com', 'u' || i"
       "  FROM generate_series(1, 40) i");
  Exec("INSERT INTO accounts (email, login) VALUES ('Busy@Example.com', 'busy1'),"
       " ('busy+2@example.com ', 'busy2')");
  Exec("INSERT INTO accounts (email, login) SELECT 'v' || i || '@example.com', 'v' || i"
       "  FROM generate_series(1, 40) i");
  pqxx::connection app(url_);
  pqxx::work holder(app);
  InsertTwoRequestsOfBusy(holder);
  EXPECT_EQ(Int("SELECT mailroom_collect_signups(100)"), 80);
  EXPECT_EQ(Int("SELECT count(*) FROM tokens WHERE NOT rate_limited"), 80);
  EXPECT_EQ(Text("SELECT string_agg(a.login, ',' ORDER BY a.login) FROM mailroom_signups q"
                 "  JOIN accounts a ON a.id = q.account"),
            "busy1,busy2");
  holder.commit();
  EXPECT_EQ(Int("SELECT mailroom_collect_signups(100)"), 2);
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom_signups"), 0);
  EXPECT_EQ(Text("SELECT string_agg(a.login || ':' || t.rate_limited, ',' ORDER BY a.login)"
                 "  FROM tokens t JOIN accounts a ON a.id = t.account"
                 " WHERE a.login LIKE 'busy%'"),
            "busy1:false,busy2:true");
  EXPECT_EQ(Int("SELECT count(*) FROM tokens"), 82);
  EXPECT_EQ(Int("SELECT count(DISTINCT account) FROM tokens"), 82);
  EXPECT_EQ(Int(kBusyRequests), 3);
}

// The same, when the other transaction rolls back: the address's signups are then counted as
// its first requests.
TEST_F(LimitsTest, AnAddressWhoseCounterInsertRollsBackIsCollectedNext) {
  Exec("INSERT INTO accounts (email, login) VALUES ('a@example.com', 'a'),"
       " ('Busy@Example.com', 'busy1'), ('busy+2@example.com ', 'busy2'), ('z@example.com', 'z')");
  pqxx::connection app(url_);
  {
    pqxx::work holder(app);
    InsertTwoRequestsOfBusy(holder);
    EXPECT_EQ(Int("SELECT mailroom_collect_signups(100)"), 2);
    EXPECT_EQ(Int("SELECT count(*) FROM mailroom_signups"), 2);
    holder.abort();
  }
  EXPECT_EQ(Int("SELECT mailroom_collect_signups(100)"), 2);
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom_signups"), 0);
  EXPECT_EQ(Int("SELECT count(*) FROM tokens WHERE NOT rate_limited"), 4);
  EXPECT_EQ(Int(kBusyRequests), 2);
}

// A collection that finds nothing to make inserts no row, so it sends no NOTIFY even while a
// collector is idle (a statement trigger fires for a statement that inserts nothing): an idle
// collector's own polls must not wake it.
TEST_F(SchemaTest, ACollectionThatMakesNoTokenSendsNoNotify) {
  pqxx::connection listener(url_);
  CountingReceiver r(listener, Text("SELECT channel FROM mailroom_settings"));
  pqxx::nontransaction(listener).exec("SELECT mailroom_collector_mark(true)");
  Exec("INSERT INTO accounts (email, login) VALUES ('n@example.com', 'n')");
  listener.await_notification(5, 0);
  ASSERT_EQ(r.count, 1);  // the signup's own wake-up
  // The suspension's account_suspended notice wakes the collector itself.
  Exec("UPDATE accounts SET status = 'suspended'");
  listener.await_notification(5, 0);
  ASSERT_EQ(r.count, 2);
  EXPECT_EQ(Int("SELECT mailroom_collect_signups(100)"), 1);  // taken, no token made
  EXPECT_EQ(Int("SELECT mailroom_collect_signups(100)"), 0);  // nothing queued
  Exec("SELECT pg_notify((SELECT channel FROM mailroom_settings), 'marker')");
  listener.await_notification(5, 0);
  EXPECT_EQ(r.count, 3);  // only the marker
}

// The abuse limits' windows are counted back from the signup's time, not the collection's: a
// collection that comes later than the window (collectors down for a day) still counts the
// requests made inside it.
TEST_F(SchemaTest, ALateCollectionCountsTheLimitsAtTheSignupsTime) {
  Exec("INSERT INTO accounts (email, login) SELECT 'Late+' || i || '@Example.com', 'l' || i"
       "  FROM generate_series(1, 5) i");
  Exec("UPDATE mailroom_signups SET requested_at = requested_at - 2 * 86400");
  EXPECT_EQ(Int("SELECT mailroom_collect_signups(100)"), 5);
  EXPECT_EQ(Int("SELECT count(*) FROM tokens WHERE NOT rate_limited"), 3);
  EXPECT_EQ(Int("SELECT count(*) FROM tokens WHERE rate_limited"), 2);
}

// The limits a signup's activation is decided under, each set to 0: every activation refused.
TEST_F(LimitsTest, ASignupsActivationFollowsLimitsOfZero) {
  Exec("UPDATE mailroom_settings SET activation_limit_per_account = 0");
  Exec("INSERT INTO accounts (email, login) VALUES ('z@example.com', 'z')");
  CollectSignups();
  EXPECT_EQ(Text("SELECT rate_limited || ' ' || suppressed_reason FROM tokens"),
            "true rate limited: 0 activation requests for this account in the last 86400 s"
            " (limit 0)");
  Exec("UPDATE mailroom_settings SET activation_limit_per_account = NULL,"
       " activation_limit_per_address = 0");
  Exec("INSERT INTO accounts (email, login) VALUES ('y@example.com', 'y')");
  CollectSignups();
  EXPECT_EQ(Text("SELECT t.rate_limited || ' ' || t.suppressed_reason FROM tokens t"
                 "  JOIN accounts a ON a.id = t.account WHERE a.login = 'y'"),
            "true rate limited: 0 activation requests for this address in the last 86400 s"
            " (limit 0)");
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom_address_requests"), 0);
}

// The application cannot skip the limits by naming an address: its token is decided, and its
// address is the account's.
TEST_F(LimitsTest, ATokenTheApplicationInsertsWithAnAddressIsDecidedToo) {
  Exec("UPDATE mailroom_settings SET activation_limit_per_account = NULL,"
       " activation_limit_per_address = 1");
  Exec("INSERT INTO accounts (email, login) VALUES ('d@example.com', 'd')");
  CollectSignups();
  const int64_t t = Int("INSERT INTO tokens (account, action, address)"
                        " SELECT id, 'activation', 'elsewhere@example.com' FROM accounts"
                        " RETURNING id");
  EXPECT_TRUE(Limited(t));
  EXPECT_EQ(Text(absl::StrCat("SELECT address FROM tokens WHERE id = ", t)), "d@example.com");
}

TEST_F(LimitsTest, TheDequeueFinishesSuppressedTokensWithTheirStateAndReason) {
  const int64_t a = Account("a@example.com");
  auto dequeue = [&] {
    pqxx::work tx(*conn_);
    std::vector<int64_t> ids;
    for (const auto& r : tx.exec("SELECT job_id FROM mailroom_dequeue('mailroom', 100, 'o', 0)")) {
      ids.push_back(r[0].as<int64_t>());
    }
    tx.commit();
    return ids;
  };
  auto state = [&](int64_t id) {
    return Row(absl::StrCat("SELECT state::TEXT || ': ' || coalesce(reason, '')"
                            " FROM delivery_states WHERE token_id = ",
                            id))[0]
        .as<std::string>();
  };
  const int64_t t1 = Recover(a);
  // Leased with a lease of 0 ms: due again at once.
  EXPECT_EQ(dequeue(), std::vector<int64_t>{t1});
  const int64_t t2 = Recover(a);  // supersedes the leased t1
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(Recover(a));  // 3 more accepted, 2 limited
  // t1 comes due again: superseded, not handed out again. The window: t2..t5 superseded,
  // the newest accepted one handed out, the rest rate limited.
  EXPECT_EQ(dequeue(), std::vector<int64_t>{ids[2]});
  EXPECT_THAT(state(t1), HasSubstr("superseded: superseded by a newer password recovery"));
  EXPECT_THAT(state(t2), HasSubstr(absl::StrCat("(token ", ids[0], ")")));
  EXPECT_THAT(state(ids[4]), HasSubstr("rate_limited: rate limited: 5 password_recovery"));
  pqxx::row s = Row("SELECT superseded, rate_limited, in_flight FROM mailroom_stats('mailroom')");
  EXPECT_EQ(s[0].as<int64_t>(), 4);  // t1, t2, ids[0], ids[1]
  EXPECT_EQ(s[1].as<int64_t>(), 2);  // ids[3], ids[4]
  EXPECT_EQ(s[2].as<int64_t>(), 1);
  // A retry that comes due after being superseded ends superseded too.
  Exec(absl::StrCat("SELECT mailroom_ack('mailroom', 'o', ARRAY[", ids[2],
                    "]::BIGINT[], ARRAY[1], ARRAY['retry'], ARRAY['try later'], ARRAY[0],"
                    " ARRAY[0]::BIGINT[])"));
  Exec("UPDATE mailroom_settings SET recovery_limit_per_account = NULL,"
       " recovery_limit_per_address = NULL");
  const int64_t newest = Recover(a);
  EXPECT_EQ(dequeue(), std::vector<int64_t>{newest});
  EXPECT_THAT(state(ids[2]), HasSubstr("superseded:"));
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE state = 'failed'"), 0);
}

// Importing existing users: one statement (INSERT ... SELECT, or COPY) of many accounts, with
// PostgreSQL's default max_locks_per_transaction (64), into tables ANALYZEd empty, so that the
// triggers' generic plans are made on an empty table. The import holds fewer locks than that
// whatever its size (a lock per row exhausts the shared lock table: "out of shared memory" at
// about 20,000 rows with the default max_connections); each provisioned account gets exactly
// its activation token, an account imported already active none, and the per-address limit
// holds inside the import.
class BulkImportTest : public SchemaTest {
 protected:
  void SetUp() override {
    SchemaTest::SetUp();
    ASSERT_EQ(Text("SHOW max_locks_per_transaction"), "64");
    Exec("ANALYZE accounts, tokens, mailroom_address_requests");
  }
  // The locks the transaction holds.
  static int64_t LocksHeld(pqxx::work& tx) {
    return tx.exec1("SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()")[0].as<int64_t>();
  }
  // Each imported account's status: every 10th active, the others provisioned; and five
  // accounts whose emails differ only in case and spaces (one address: 3 activations allowed).
  static std::string Status(int i) { return i % 10 == 0 ? "active" : "provisioned"; }
  void ExpectTheTokensOfAnImportOf(int n) {
    const int provisioned = n - n / 10 + 5;
    // The import queued one signup per provisioned account; the collection makes the tokens.
    EXPECT_EQ(Int("SELECT count(*) FROM mailroom_signups"), provisioned);
    CollectSignups();
    EXPECT_EQ(Int("SELECT count(*) FROM mailroom_signups"), 0);
    Exec("ANALYZE accounts, tokens");  // the checks' own plans, not the import's
    EXPECT_EQ(Int("SELECT count(*) FROM accounts"), n + 5);
    EXPECT_EQ(Int("SELECT count(*) FROM tokens"), provisioned);
    EXPECT_EQ(Int("SELECT count(*) FROM tokens t JOIN accounts a ON a.id = t.account"
                  " WHERE a.status = 'provisioned' AND t.action = 'activation'"),
              provisioned);
    EXPECT_EQ(Int("SELECT count(DISTINCT account) FROM tokens"), provisioned);
    EXPECT_EQ(Int("SELECT count(*) FROM tokens WHERE rate_limited"), 2);
    EXPECT_EQ(Int("SELECT count(*) FROM tokens WHERE rate_limited"
                  " AND mailroom_limit_address(address) = 'dup@import.test'"),
              2);
  }
};

constexpr int kImported = 20000;
constexpr char kDuplicates[] =
    "('Dup@import.test'), ('DUP+2@import.test'), (' dup+3@import.test'), ('dup+4@IMPORT.test'),"
    " ('dUp+5@import.test ')";

TEST_F(BulkImportTest, OneInsertSelectOfManyAccounts) {
  {
    pqxx::work tx(*conn_);
    tx.exec(absl::StrCat(
        "INSERT INTO accounts (email, login, status)"
        " SELECT 'u' || i || '@import.test', 'u' || i,"
        "        (CASE WHEN i % 10 = 0 THEN 'active' ELSE 'provisioned' END)::account_status"
        "   FROM generate_series(1, ",
        kImported,
        ") i"
        " UNION ALL SELECT e, 'dup' || row_number() OVER (), 'provisioned'"
        "   FROM (VALUES ",
        kDuplicates, ") d(e)"));
    EXPECT_LT(LocksHeld(tx), 64);
    tx.commit();
  }
  ExpectTheTokensOfAnImportOf(kImported);
}

TEST_F(BulkImportTest, OneCopyOfManyAccounts) {
  {
    pqxx::work tx(*conn_);
    pqxx::stream_to copy(tx, "accounts", std::vector<std::string>{"email", "login", "status"});
    for (int i = 1; i <= kImported; ++i) {
      copy << std::make_tuple(absl::StrCat("c", i, "@import.test"), absl::StrCat("c", i),
                              Status(i));
    }
    int d = 0;
    for (const char* e : {"Dup@import.test", "DUP+2@import.test", " dup+3@import.test",
                          "dup+4@IMPORT.test", "dUp+5@import.test "}) {
      copy << std::make_tuple(std::string(e), absl::StrCat("dup", ++d), std::string("provisioned"));
    }
    copy.complete();
    EXPECT_LT(LocksHeld(tx), 64);
    tx.commit();
  }
  ExpectTheTokensOfAnImportOf(kImported);
}

}  // namespace
// A server that logs full page images (durable: the default test server writes none).
class PageImageTest : public SchemaTest {
 protected:
  static void SetUpTestSuite() {
    auto server = testing::PgServer::Start(/*durable=*/true);
    ASSERT_TRUE(server.ok()) << server.status();
    pg_ = server->release();
  }
  // 500 aged activation tokens; returns the last one's id.
  int64_t AgedTokens(const std::string& prefix) {
    Exec("INSERT INTO accounts (email, login) SELECT '" + prefix + "' || i || '@example.com', '" +
         prefix + "' || i FROM generate_series(1, 500) i");
    CollectSignups();
    Exec("UPDATE tokens SET created_at = created_at - 40 * 86400,"
         " expires_at = expires_at - 40 * 86400 WHERE created_at > " +
         std::to_string(Now() - 86400));
    return Int("SELECT max(id) FROM tokens");
  }
  // The WAL bytes of pruning the 500 tokens after `after` in one statement, and the
  // compression in force in its transaction.
  std::pair<int64_t, std::string> Prune(int64_t after) {
    pqxx::work tx(*conn_);
    const std::string lsn = tx.exec1("SELECT pg_current_wal_insert_lsn()")[0].as<std::string>();
    pqxx::row r = tx.exec1("SELECT p.pruned, current_setting('wal_compression')"
                           " FROM mailroom_prune_tokens(" +
                           std::to_string(after) + ", EXTRACT(EPOCH FROM now())::BIGINT, 500) p");
    EXPECT_EQ(r[0].as<int64_t>(), 500);
    const std::string compression = r[1].as<std::string>();
    const int64_t bytes =
        tx.exec1("SELECT pg_current_wal_insert_lsn() - '" + lsn + "'::pg_lsn")[0].as<int64_t>();
    tx.commit();
    return {bytes, compression};
  }
};

// Retention's first writes to pages after a checkpoint log them whole; a role that may set
// wal_compression (GRANT SET ON PARAMETER) compresses them for the prune's transaction alone,
// a role that may not prunes all the same, uncompressed.
TEST_F(PageImageTest, RetentionCompressesItsPageImagesWhereItsRoleMaySetTheCompression) {
  Exec("UPDATE mailroom_settings SET limit_window_seconds = 60");
  const int64_t first = AgedTokens("a");
  AgedTokens("b");
  Exec("CREATE ROLE pruner; GRANT USAGE ON SCHEMA mailroom TO pruner;"
       " GRANT SELECT, UPDATE, DELETE ON ALL TABLES IN SCHEMA mailroom TO pruner;"
       " GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA mailroom TO pruner");
  EXPECT_EQ(Text("SHOW wal_compression"), "off");
  Exec("CHECKPOINT");
  Exec("SET ROLE pruner");
  const auto [plain, plain_setting] = Prune(0);
  EXPECT_EQ(plain_setting, "off");
  Exec("RESET ROLE");
  Exec("GRANT SET ON PARAMETER wal_compression TO pruner");
  Exec("SET ROLE pruner");
  const auto [compressed, compressed_setting] = Prune(first);
  EXPECT_EQ(compressed_setting, "lz4");
  EXPECT_EQ(Text("SHOW wal_compression"), "off");  // the prune's transaction alone
  Exec("RESET ROLE");
  EXPECT_EQ(Int("SELECT count(*) FROM tokens"), 0);
  std::cout << "500 tokens pruned after a checkpoint: " << plain << " bytes of WAL, " << compressed
            << " with the page images compressed\n";
  // Both prunes logged page images; the compressed ones are far smaller.
  EXPECT_GT(plain, 500 * 150) << plain;
  EXPECT_LT(compressed * 10, plain * 8) << compressed << " of " << plain;
}

}  // namespace mailroom
