// The LISTEN connection against a throwaway PostgreSQL.
#include "collector/dispatch/pg_listener.h"

#include <poll.h>

#include <pqxx/pqxx>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/intruder.h"
#include "testing/migrated_database.h"
#include "testing/pg_server.h"
#include "testing/pgbouncer.h"

namespace mailroom {
namespace {

class PgListenerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = testing::PgServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    pg_ = server->release();
  }
  static void TearDownTestSuite() { delete pg_; }
  void Exec(const std::string& sql) {
    pqxx::connection c(pg_->Url());
    pqxx::nontransaction tx(c);
    tx.exec(sql);
  }
  // Waits (bounded) until `fd` is readable.
  static bool Readable(int fd) {
    pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, 10000) == 1;
  }
  static testing::PgServer* pg_;
};
testing::PgServer* PgListenerTest::pg_ = nullptr;

TEST_F(PgListenerTest, CountsNotificationsOnItsChannelOnly) {
  auto l = ConnectPgListener(pg_->Url(), "wake_up");
  ASSERT_TRUE(l.ok()) << l.status();
  auto none = (*l)->TakeNotifications();
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0);
  Exec("SELECT pg_notify('elsewhere', ''), pg_notify('wake_up', '1')");
  Exec("NOTIFY wake_up, '2'");
  int seen = 0;
  while (seen < 2 && Readable((*l)->fd())) {
    auto n = (*l)->TakeNotifications();
    ASSERT_TRUE(n.ok()) << n.status();
    seen += *n;
  }
  EXPECT_EQ(seen, 2);
  EXPECT_TRUE((*l)->Ping().ok());
}

TEST_F(PgListenerTest, ALostConnectionIsUnavailable) {
  auto l = ConnectPgListener(pg_->Url(), "cut_me");
  ASSERT_TRUE(l.ok()) << l.status();
  Exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
       " WHERE query LIKE 'LISTEN%' AND pid <> pg_backend_pid()");
  ASSERT_TRUE(Readable((*l)->fd()));
  absl::Status st = (*l)->TakeNotifications().status();
  if (st.ok()) st = (*l)->Ping();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
}

TEST_F(PgListenerTest, AnUnreachableServerIsUnavailableWithoutThePassword) {
  auto l = ConnectPgListener("postgresql://u:hunter2-secret@127.0.0.1:1/db", "x");
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(l.status().message()), ::testing::Not(::testing::HasSubstr("hunter2")));
}

// The busy mark against the collector's schema: which commits NOTIFY, and what the idle side
// waits for. An observer LISTENs on the channel without being a collector; a sentinel NOTIFY
// sent after a commit arrives after that commit's notification (PostgreSQL delivers them in
// commit order), so counting up to it needs no sleep.
class BusyMarkTest : public testing::MigratedDatabaseTest {
 protected:
  class Observer : public pqxx::notification_receiver {
   public:
    Observer(pqxx::connection_base& c) : pqxx::notification_receiver(c, "token_insert") {}
    void operator()(const std::string& payload, int) override {
      if (payload == "sentinel") {
        sentinel_ = true;
      } else {
        ++count_;
      }
    }
    int count_ = 0;
    bool sentinel_ = false;
  };

  void SetUp() override {
    MigratedDatabaseTest::SetUp();
    observer_conn_ = std::make_unique<pqxx::connection>(url_);
    observer_ = std::make_unique<Observer>(*observer_conn_);
  }
  void TearDown() override {
    observer_.reset();
    observer_conn_.reset();
  }

  // Inserts an account (its queued signup) in a transaction of its own.
  void Signup(const std::string& login) {
    Exec(absl::StrCat("INSERT INTO accounts (email, login) VALUES ('", login, "@example.test', '",
                      login, "')"));
  }
  // The notifications of the token trigger committed since the last call.
  int Notifications() {
    Exec("NOTIFY token_insert, 'sentinel'");
    observer_->sentinel_ = false;
    while (!observer_->sentinel_) {
      if (observer_conn_->await_notification(10, 0) == 0) {
        ADD_FAILURE() << "the sentinel did not arrive";
        break;
      }
    }
    const int n = observer_->count_;
    observer_->count_ = 0;
    return n;
  }
  std::unique_ptr<NotificationListener> Collector() {
    auto l = ConnectPgListener(url_, "token_insert");
    EXPECT_TRUE(l.ok()) << l.status();
    return l.ok() ? *std::move(l) : nullptr;
  }
  // Waits until `n` connections to the database remain besides conn_.
  bool WaitConnections(int n) {
    for (absl::Time until = absl::Now() + absl::Seconds(10); absl::Now() < until;) {
      if (Int("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
              " AND pid <> pg_backend_pid()") == n) {
        return true;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }

  std::unique_ptr<pqxx::connection> observer_conn_;
  std::unique_ptr<Observer> observer_;
};

TEST_F(BusyMarkTest, CommitsSkipTheNotifyOnlyWhileEveryCollectorIsBusy) {
  Signup("before");  // no collector has marked itself yet
  EXPECT_EQ(Notifications(), 0);
  auto a = Collector();
  auto b = Collector();
  ASSERT_TRUE(a->MarkBusy().ok());
  ASSERT_TRUE(b->MarkBusy().ok());
  Signup("both_busy");
  EXPECT_EQ(Notifications(), 0);
  ASSERT_TRUE(b->MarkIdle().ok());
  Signup("one_idle");
  Signup("one_idle_again");
  EXPECT_EQ(Notifications(), 2);
  ASSERT_TRUE(a->MarkIdle().ok());
  Signup("both_idle");
  EXPECT_EQ(Notifications(), 1);
  EXPECT_EQ(Int("SELECT last_value FROM mailroom_idle_collectors"), 2);
  // A collector that went away idle stops counting at the next change of any mark.
  b.reset();
  ASSERT_TRUE(WaitConnections(2));  // the observer and `a`
  ASSERT_TRUE(a->MarkBusy().ok());
  Signup("a_busy_b_gone");
  EXPECT_EQ(Notifications(), 0);
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom_collectors"), 1);
}

// A collector that stops cleanly removes its mark: with no collector left, commits do not
// notify (nobody listens; the next collector drains when it connects).
TEST_F(BusyMarkTest, ACollectorThatLeavesNoLongerCountsAsIdle) {
  auto a = Collector();
  auto b = Collector();
  ASSERT_TRUE(a->MarkIdle().ok());
  ASSERT_TRUE(b->MarkIdle().ok());
  EXPECT_EQ(Int("SELECT last_value FROM mailroom_idle_collectors"), 2);
  ASSERT_TRUE(b->Leave().ok());
  EXPECT_EQ(Int("SELECT last_value FROM mailroom_idle_collectors"), 1);
  Signup("a_idle_b_left");
  EXPECT_EQ(Notifications(), 1);
  ASSERT_TRUE(a->Leave().ok());
  EXPECT_EQ(Int("SELECT last_value FROM mailroom_idle_collectors"), 0);
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom_collectors"), 0);
  Signup("both_left");
  EXPECT_EQ(Notifications(), 0);
}

// The marks take turns on a lock only mailroom's roles may take: a role that can only connect
// and holds every advisory key mailroom ever used (the mark's among them) delays no mark.
TEST_F(BusyMarkTest, AnAdvisoryLockSquatterDelaysNoMark) {
  testing::AdvisoryLockSquatter squatter(url_, "mark_squatter");
  ASSERT_EQ(squatter.Held(), static_cast<int>(testing::MailroomAdvisoryKeys().size()));
  auto a = Collector();
  auto b = Collector();
  ASSERT_TRUE(a->MarkBusy().ok());
  ASSERT_TRUE(b->MarkIdle().ok());
  EXPECT_EQ(Int("SELECT last_value FROM mailroom_idle_collectors"), 1);
  ASSERT_TRUE(a->MarkIdle().ok());
  EXPECT_EQ(Int("SELECT last_value FROM mailroom_idle_collectors"), 2);
  ASSERT_TRUE(b->Leave().ok());
  EXPECT_EQ(Int("SELECT last_value FROM mailroom_idle_collectors"), 1);
  // Nor can it take the marks' turn itself.
  pqxx::connection c(testing::UrlAs(url_, "mark_squatter"));
  EXPECT_THROW(pqxx::nontransaction(c).exec(
                   "BEGIN; LOCK TABLE mailroom.mailroom_mark_turn IN SHARE UPDATE EXCLUSIVE MODE"),
               pqxx::sql_error);
}

// Each mark is one statement in autocommit: its turn is never held between round
// trips. A statement-pooling pgbouncer (one server connection, so one backend pid) refuses any
// transaction that spans two queries.
TEST_F(BusyMarkTest, AMarkIsOneStatement) {
  auto bouncer = testing::PgBouncer::Start(pg_->port(), /*pool_size=*/1, "statement");
  ASSERT_TRUE(bouncer.ok()) << bouncer.status();
  auto l = ConnectPgListener((*bouncer)->Url(url_.substr(url_.rfind('/') + 1)), "token_insert");
  ASSERT_TRUE(l.ok()) << l.status();
  absl::Status busy = (*l)->MarkBusy();
  ASSERT_TRUE(busy.ok()) << busy;
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom_collectors WHERE NOT idle"), 1);
  ASSERT_TRUE((*l)->MarkIdle().ok());
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom_collectors WHERE idle"), 1);
  EXPECT_EQ(Int("SELECT last_value FROM mailroom_idle_collectors"), 1);
}

TEST_F(BusyMarkTest, MarkIdleListsTheTransactionsThatMayHaveReadTheBusyMark) {
  auto a = Collector();
  ASSERT_TRUE(a->MarkBusy().ok());
  pqxx::connection app(url_);
  pqxx::work tx(app);
  tx.exec("INSERT INTO accounts (email, login) VALUES ('reader@example.test', 'reader')");
  auto snapshot = a->MarkIdle();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  auto running = a->StillRunning(*snapshot);
  ASSERT_TRUE(running.ok()) << running.status();
  EXPECT_EQ(*running, 1);
  tx.commit();
  running = a->StillRunning(*snapshot);
  ASSERT_TRUE(running.ok()) << running.status();
  EXPECT_EQ(*running, 0);
  EXPECT_EQ(Notifications(), 0);  // it read the busy mark: the collector's re-check finds it
}

TEST_F(BusyMarkTest, ARepeatableReadTransactionSeesTheIdleMarkSetAfterItsSnapshot) {
  auto a = Collector();
  ASSERT_TRUE(a->MarkBusy().ok());
  pqxx::connection app(url_);
  pqxx::transaction<pqxx::isolation_level::repeatable_read> tx(app);
  tx.exec("SELECT count(*) FROM accounts");  // takes the transaction's snapshot while busy
  ASSERT_TRUE(a->MarkIdle().ok());
  tx.exec("INSERT INTO accounts (email, login) VALUES ('rr@example.test', 'rr')");
  tx.commit();
  EXPECT_EQ(Notifications(), 1);
}

}  // namespace
}  // namespace mailroom
