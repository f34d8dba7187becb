// mailroom in a database it shares with other roles: a role that can only connect holds every
// advisory lock key mailroom ever took, and a role that can create in `public` (as a database's
// owner can) plants look-alikes of every mailroom function and table there. The collector
// binary still migrates, dispatches, takes its wake-up turns and runs its retention pass, and
// lends neither role a right.
#include <future>
#include <pqxx/pqxx>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collector/schema/migrate.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "testing/collector_client.h"
#include "testing/collector_fixture.h"
#include "testing/intruder.h"
#include "testing/pg_server.h"
#include "testing/process.h"

namespace mailroom {
namespace {

constexpr char kKey[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
constexpr char kBearer[] = "test-subscriber-token-0123456789";

class BorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = testing::PgServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    pg_ = std::move(*server);
    auto url = pg_->CreateDatabase("border");
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
  }
  // Waits until `sql` returns `want`, up to `timeout`; returns the last value read.
  int64_t WaitFor(const std::string& sql, int64_t want, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    int64_t got = testing::TestDb(url_).Scalar(sql);
    while (got != want && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(50));
      got = testing::TestDb(url_).Scalar(sql);
    }
    return got;
  }

  std::unique_ptr<testing::PgServer> pg_;
  std::string url_;
};

TEST_F(BorderTest, SquattersAndLookalikesChangeNothing) {
  // The squatter holds every key before mailroom is even installed.
  testing::AdvisoryLockSquatter squatter(url_, "squatter");
  ASSERT_EQ(squatter.Held(), static_cast<int>(testing::MailroomAdvisoryKeys().size()));
  auto first = std::async(std::launch::async,
                          [&] { return MigrateUp(url_, EmbeddedMigrations()); });
  ASSERT_EQ(first.wait_for(std::chrono::seconds(60)), std::future_status::ready)
      << "the first migration waited for the squatter";
  ASSERT_TRUE(first.get().ok());

  const int planted = testing::PlantLookalikes(url_, "owner_like");
  EXPECT_GT(planted, 40);
  // Neither role may take any of mailroom's turns.
  for (const char* turn :
       {"mailroom_migration_turn", "mailroom_retention_turn", "mailroom_mark_turn"}) {
    for (const char* role : {"squatter", "owner_like"}) {
      pqxx::connection c(testing::UrlAs(url_, role));
      pqxx::nontransaction tx(c);
      EXPECT_THROW(tx.exec(absl::StrCat("BEGIN; LOCK TABLE mailroom.", turn,
                                        " IN SHARE UPDATE EXCLUSIVE MODE NOWAIT")),
                   pqxx::sql_error)
          << role << " locked " << turn;
    }
  }
  // The squatter, which may name mailroom's tables (USAGE on the schema, as the application's
  // role has), holds for the rest of the test the locks that parsing a statement takes before
  // its rights are checked: a DELETE prepared on every table of mailroom's, in an open
  // transaction.
  testing::TestDb(url_).Exec("GRANT USAGE ON SCHEMA mailroom TO squatter");
  pqxx::connection parser(testing::UrlAs(url_, "squatter"));
  {
    std::vector<std::string> tables;
    pqxx::connection admin(url_);
    pqxx::nontransaction a(admin);
    for (const auto& row : a.exec("SELECT c.relname FROM pg_class c WHERE c.relkind = 'r'"
                                  " AND c.relnamespace = 'mailroom'::regnamespace")) {
      tables.push_back(row[0].as<std::string>());
    }
    pqxx::nontransaction p(parser);
    p.exec("BEGIN");
    for (size_t i = 0; i < tables.size(); ++i) {
      p.exec(absl::StrCat("PREPARE held", i, " AS DELETE FROM mailroom.", tables[i]));
    }
    EXPECT_GE(a.exec1("SELECT count(*) FROM pg_locks l JOIN pg_stat_activity s USING (pid)"
                      " WHERE s.usename = 'squatter' AND l.mode = 'RowExclusiveLock'")[0]
                  .as<int>(),
              static_cast<int>(tables.size()));
  }

  // The collector migrates again at start (the turn is its own), then dispatches, marks itself
  // idle and busy, and prunes every 200 ms what is older than a second.
  const int port = testing::FreePort();
  auto collector = testing::StartCollectorProcess(
      testing::CollectorEnv(url_, port, kKey, kBearer,
                            {{"MAILROOM_AUTO_MIGRATE", "true"},
                             {"MAILROOM_METRICS_ADDRESS", "127.0.0.1:0"},
                             {"MAILROOM_BATCH_TIMEOUT", "20"},
                             {"MAILROOM_RETENTION", "1000"},
                             {"MAILROOM_RETENTION_INTERVAL", "200"}}));
  ASSERT_NE(collector, nullptr);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                     grpc::InsecureChannelCredentials());
  testing::TestSubscriber sub(channel, kBearer, "mailroom", 100);
  ASSERT_TRUE(sub.WaitSubscribed(absl::Seconds(10)));

  testing::TestDb db(url_);
  // Rounds of signups and a recovery: each round wakes an idle collector (its mark's turn).
  size_t expected = 0;
  for (int round = 0; round < 3; ++round) {
    db.Exec(absl::StrCat("INSERT INTO mailroom.accounts (email, login) SELECT 'r", round, "-' || i",
                         " || '@example.test', 'r", round, "-' || i FROM generate_series(1, 5) i"));
    db.Exec(absl::StrCat("INSERT INTO mailroom.accounts (email, login, status) VALUES ('rec", round,
                         "@example.test', 'rec", round, "', 'active')"));
    db.Exec(absl::StrCat("INSERT INTO mailroom.tokens (account, action) SELECT id,",
                         " 'password_recovery' FROM mailroom.accounts WHERE login = 'rec", round,
                         "'"));
    expected += 6;
    ASSERT_EQ(sub.WaitForJobs(expected, absl::Seconds(20)), expected) << collector->Log();
  }
  std::vector<uint64_t> ids;
  for (const auto& j : sub.Jobs()) ids.push_back(j.job_id());
  ASSERT_TRUE(sub.Ack(ids, v1::OUTCOME_SENT).ok());

  // The retention pass ran: the acknowledged batches are gone a second later.
  EXPECT_EQ(WaitFor("SELECT count(*) FROM mailroom.lease_batches", 0, absl::Seconds(30)), 0)
      << collector->Log();

  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckResponse health;
  ASSERT_TRUE(grpc::health::v1::Health::NewStub(channel)
                  ->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &health)
                  .ok());
  EXPECT_EQ(health.status(), grpc::health::v1::HealthCheckResponse::SERVING);

  // A `collector migrate` while the collector runs and the squatter still squats.
  auto again = std::async(std::launch::async,
                          [&] { return MigrateUp(url_, EmbeddedMigrations()); });
  ASSERT_EQ(again.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_TRUE(again.get().ok());

  EXPECT_EQ(squatter.Held(), static_cast<int>(testing::MailroomAdvisoryKeys().size()));
  EXPECT_EQ(absl::StrJoin(testing::IntruderGains(url_, "owner_like"), ", "), "");
  EXPECT_EQ(absl::StrJoin(testing::IntruderGains(url_, "squatter"), ", "), "");
}

}  // namespace
}  // namespace mailroom
