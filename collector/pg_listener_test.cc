// The LISTEN connection against a throwaway PostgreSQL.
#include "collector/pg_listener.h"

#include <poll.h>

#include <pqxx/pqxx>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/pg_server.h"

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

}  // namespace
}  // namespace mailroom
