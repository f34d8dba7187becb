// The pool, its transactions and lone statements against a throwaway PostgreSQL, directly and
// through a transaction-pooling pgbouncer; one fresh migrated database per test.
#include "collector/db/pool.h"

#include <pqxx/pqxx>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/migrated_database.h"
#include "testing/pgbouncer.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;

class PoolTest : public testing::MigratedDatabaseTest {
 protected:
  void SetUp() override {
    MigratedDatabaseTest::SetUp();
    if (HasFatalFailure()) return;
    // In mailroom's schema: the pool's statements run with the search path pinned to it.
    Exec("CREATE TABLE mailroom.t (v INT CHECK (v > 0))");
  }

  // The backend pid of the connection a call of `pool` gets.
  static int Pid(Pool& pool) {
    auto pid = pool.Run<int>("pid", [](Connection& c) {
      return c.ExecAlone("SELECT pg_backend_pid()").at(0).at(0).as<int>();
    });
    EXPECT_TRUE(pid.ok()) << pid.status();
    return pid.value_or(0);
  }
};

// A lone call's arguments reach the function as their values and types: a text with quotes,
// a backslash and a statement's end in it is one text, a NULL bigint is NULL.
TEST_F(PoolTest, ALoneCallPassesEachArgumentAsALiteralOfItsType) {
  Exec("CREATE FUNCTION mailroom.echo(t text, i integer, n bigint, b boolean, m bigint)"
       " RETURNS TABLE(t text, types text, m_is_null boolean) LANGUAGE sql AS"
       " $$ SELECT t, concat_ws(',', pg_typeof(i), pg_typeof(n), pg_typeof(b)), m IS NULL $$");
  Pool pool({url_, 1, {}});
  const std::string hostile = "it's \\'; DROP TABLE t; --";
  auto row = pool.Run<std::vector<std::string>>("echo", [&](Connection& c) {
    pqxx::result r = c.CallAlone("echo", {hostile, int32_t{7}, int64_t{1} << 40, true,
                                          std::optional<int64_t>()});
    return std::vector<std::string>{r.at(0)["t"].as<std::string>(),
                                    r.at(0)["types"].as<std::string>(),
                                    r.at(0)["m_is_null"].as<std::string>()};
  });
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_EQ((*row)[0], hostile);
  EXPECT_EQ((*row)[1], "integer,bigint,boolean");
  EXPECT_EQ((*row)[2], "t");
  EXPECT_EQ(Text("SELECT count(*)::text FROM mailroom.t"), "0");  // still there
}

TEST_F(PoolTest, TransactionsAndLoneStatementsRunUnderTheTimeoutsAndThePinnedPath) {
  Pool pool({url_, 1, {absl::Milliseconds(1234), absl::Milliseconds(567), absl::Milliseconds(89)}});
  auto shown = pool.Run<std::vector<std::string>>("show", [](Connection& c) {
    std::vector<std::string> out;
    {
      Transaction tx(c);
      for (const char* setting : {"statement_timeout", "idle_in_transaction_session_timeout",
                                  "lock_timeout", "search_path"}) {
        out.push_back(tx.exec1(absl::StrCat("SHOW ", setting))[0].as<std::string>());
      }
      tx.commit();
    }
    out.push_back(c.ExecAlone("SHOW statement_timeout").at(0).at(0).as<std::string>());
    out.push_back(c.ExecAlone("SHOW lock_timeout").at(0).at(0).as<std::string>());
    // A lone statement leaves no transaction open: no idle-in-transaction limit is set for it.
    out.push_back(
        c.ExecAlone("SHOW idle_in_transaction_session_timeout").at(0).at(0).as<std::string>());
    out.push_back(c.ExecAlone("SHOW search_path").at(0).at(0).as<std::string>());
    return out;
  });
  ASSERT_TRUE(shown.ok()) << shown.status();
  EXPECT_THAT(*shown, ::testing::ElementsAre("1234ms", "567ms", "89ms", "pg_catalog, mailroom",
                                             "1234ms", "89ms", "0", "pg_catalog, mailroom"));
}

TEST_F(PoolTest, ConnectionsAreOpenedOnFirstNeedAndReused) {
  Pool pool({url_, 2, {}});
  EXPECT_EQ(pool.open(), 0);
  const int first = Pid(pool);
  EXPECT_EQ(Pid(pool), first);
  EXPECT_EQ(pool.open(), 1);
  EXPECT_EQ(Int(absl::StrCat("SELECT count(*) FROM pg_stat_activity WHERE pid = ", first)), 1);
}

// Calls run side by side up to the pool's size; another waits for a connection given back, or
// fails as kUnavailable at its deadline without running.
TEST_F(PoolTest, CallsBeyondTheSizeWaitForAConnectionUntilTheirDeadline) {
  Pool pool({url_, 2, {}});
  absl::Notification release;
  std::vector<int> pids(2);
  std::vector<absl::Notification> holding(2);
  std::vector<std::thread> holders;
  for (int i = 0; i < 2; ++i) {
    holders.emplace_back([&, i] {
      auto st = pool.Run<bool>("hold", [&](Connection& c) {
        pids[i] = c.ExecAlone("SELECT pg_backend_pid()").at(0).at(0).as<int>();
        holding[i].Notify();
        release.WaitForNotification();
        return true;
      });
      EXPECT_TRUE(st.ok()) << st.status();
    });
  }
  for (auto& h : holding) h.WaitForNotification();
  EXPECT_NE(pids[0], pids[1]);
  EXPECT_EQ(pool.open(), 2);

  bool ran = false;
  const absl::Time start = absl::Now();
  auto late = pool.Run<bool>(
      "waiting", [&](Connection&) { return ran = true; }, absl::Now() + absl::Milliseconds(200));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable) << late.status();
  EXPECT_THAT(std::string(late.status().message()),
              HasSubstr("waiting: all 2 database connections are busy"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  EXPECT_FALSE(ran);

  // A call without a deadline waits for the first connection given back.
  std::thread waiter([&] { EXPECT_NE(Pid(pool), 0); });
  release.Notify();
  waiter.join();
  for (auto& h : holders) h.join();
  EXPECT_EQ(pool.open(), 2);
}

// A failed statement fails its transaction, which is rolled back before the connection goes
// back; so is a transaction its call left without a commit. The next call on the same
// connection starts clean.
TEST_F(PoolTest, AFailedOrAbandonedTransactionIsRolledBackAndItsConnectionKept) {
  Pool pool({url_, 1, {}});
  const int pid = Pid(pool);
  auto failed = pool.Run<bool>("inserting", [](Connection& c) {
    Transaction tx(c);
    tx.exec("INSERT INTO t VALUES (1)");
    tx.exec("INSERT INTO t VALUES (-1)");  // check_violation
    tx.commit();
    return true;
  });
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInvalidArgument) << failed.status();
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr("inserting: ERROR:"));
  auto abandoned = pool.Run<bool>("abandoning", [](Connection& c) {
    Transaction tx(c);
    tx.exec("INSERT INTO t VALUES (3)");
    return true;  // no commit
  });
  EXPECT_TRUE(abandoned.ok()) << abandoned.status();
  auto committed = pool.Run<int>("committing", [](Connection& c) {
    {
      Transaction tx(c);
      tx.exec("INSERT INTO t VALUES (2)");
      tx.commit();
    }
    // Were the abandoned transaction still open, this would be inside it and see its row.
    return c.ExecAlone("SELECT count(*) FROM t").at(0).at(0).as<int>();
  });
  ASSERT_TRUE(committed.ok()) << committed.status();
  EXPECT_EQ(*committed, 1);
  EXPECT_EQ(Text("SELECT string_agg(v::text, ',') FROM mailroom.t"), "2");
  EXPECT_EQ(Pid(pool), pid);
  EXPECT_EQ(pool.open(), 1);
}

// A call that swallows a failed statement cannot commit what came before it.
TEST_F(PoolTest, ACommitAfterASwallowedErrorFails) {
  Pool pool({url_, 1, {}});
  auto st = pool.Run<bool>("swallowing", [](Connection& c) {
    Transaction tx(c);
    tx.exec("INSERT INTO t VALUES (1)");
    try {
      tx.exec("SELECT 1 / 0");
    } catch (const pqxx::sql_error&) {
    }
    tx.commit();
    return true;
  });
  EXPECT_EQ(st.status().code(), absl::StatusCode::kFailedPrecondition) << st.status();
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.t"), 0);
  EXPECT_NE(Pid(pool), 0);
}

// A statement timeout fails the call as kUnavailable and keeps the connection.
TEST_F(PoolTest, AStatementTimeoutKeepsTheConnection) {
  Pool pool({url_, 1, {absl::Milliseconds(100)}});
  const int pid = Pid(pool);
  auto slow = pool.Run<bool>("sleeping", [](Connection& c) {
    c.ExecAlone("SELECT pg_sleep(5)");
    return true;
  });
  EXPECT_EQ(slow.status().code(), absl::StatusCode::kUnavailable) << slow.status();
  EXPECT_THAT(std::string(slow.status().message()), HasSubstr("statement timeout"));
  EXPECT_EQ(Pid(pool), pid);
}

// A connection the server ended is closed and replaced: the call that finds it dead fails as
// kUnavailable, the next one runs on a new connection.
TEST_F(PoolTest, AConnectionTheServerEndedIsReplaced) {
  Pool pool({url_, 1, {}});
  const int pid = Pid(pool);
  Exec(absl::StrCat("SELECT pg_terminate_backend(", pid, ")"));
  auto first = pool.Run<int>("after termination", [](Connection& c) {
    return c.ExecAlone("SELECT 1").at(0).at(0).as<int>();
  });
  EXPECT_EQ(first.status().code(), absl::StatusCode::kUnavailable) << first.status();
  const int next = Pid(pool);
  EXPECT_NE(next, 0);
  EXPECT_NE(next, pid);
  EXPECT_EQ(pool.open(), 1);
}

TEST_F(PoolTest, AnUnreachableServerIsUnavailableAndItsPasswordNotRepeated) {
  Pool pool({"postgresql://u:hunter2-secret@127.0.0.1:1/db", 1, {}});
  auto st = pool.Run<bool>("health check", [](Connection&) { return true; });
  EXPECT_EQ(st.status().code(), absl::StatusCode::kUnavailable) << st.status();
  EXPECT_THAT(std::string(st.status().message()),
              HasSubstr("health check: database connection lost"));
  EXPECT_EQ(std::string(st.status().message()).find("hunter2-secret"), std::string::npos);
  EXPECT_EQ(pool.open(), 0);
}

// Through pgbouncer in transaction pooling, consecutive transactions of one client connection
// may run on different server sessions and a session setting would stay on the server
// connection for the next client. Each transaction sets its timeouts itself (SET LOCAL): they
// hold inside it and are gone after it, on the one server connection two clients share.
TEST_F(PoolTest, TimeoutsHoldThroughPgbouncerAndDoNotLeak) {
  auto bouncer = testing::PgBouncer::Start(pg_->port(), /*pool_size=*/1);
  ASSERT_TRUE(bouncer.ok()) << bouncer.status();
  const std::string url = (*bouncer)->Url(url_.substr(url_.rfind('/') + 1));
  Pool pool({url, 2, {absl::Milliseconds(1234), absl::Milliseconds(567)}});
  auto inside = pool.Run<std::string>("show", [](Connection& c) {
    std::string shown;
    {
      Transaction tx(c);
      shown = absl::StrCat(
          tx.exec1("SHOW statement_timeout")[0].as<std::string>(), " ",
          tx.exec1("SHOW idle_in_transaction_session_timeout")[0].as<std::string>());
      tx.commit();
    }
    return absl::StrCat(shown, " ",
                        c.ExecAlone("SHOW statement_timeout").at(0).at(0).as<std::string>());
  });
  ASSERT_TRUE(inside.ok()) << inside.status();
  EXPECT_EQ(*inside, "1234ms 567ms 1234ms");
  pqxx::connection other(url);
  pqxx::work tx(other);
  EXPECT_EQ(tx.exec1("SHOW statement_timeout")[0].as<std::string>(), "0");
  // The server's own default, not the pool's pinned path.
  EXPECT_EQ(tx.exec1("SHOW search_path")[0].as<std::string>(), Text("SHOW search_path"));
  tx.commit();
}

}  // namespace
}  // namespace mailroom
