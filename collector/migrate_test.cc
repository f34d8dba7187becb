#include "collector/migrate.h"

#include <future>
#include <pqxx/pqxx>

#include "gtest/gtest.h"
#include "testing/pg_server.h"

namespace mailroom {
namespace {

class MigrateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = testing::PgServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() { delete server_; }
  void SetUp() override {
    static int n = 0;
    auto url = server_->CreateDatabase("migrate_" + std::to_string(++n));
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
  }
  static testing::PgServer* server_;
  std::string url_;
};
testing::PgServer* MigrateTest::server_ = nullptr;

TEST_F(MigrateTest, UpAppliesAllThenIsANoOp) {
  auto first = MigrateUp(url_, EmbeddedMigrations());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->size(), EmbeddedMigrations().size());
  auto second = MigrateUp(url_, EmbeddedMigrations());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->empty());
  auto applied = AppliedVersions(url_);
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(applied->size(), EmbeddedMigrations().size());
}

TEST_F(MigrateTest, ConcurrentMigratorsApplyEachMigrationOnce) {
  auto a = std::async(std::launch::async, [&] { return MigrateUp(url_, EmbeddedMigrations()); });
  auto b = std::async(std::launch::async, [&] { return MigrateUp(url_, EmbeddedMigrations()); });
  auto ra = a.get();
  auto rb = b.get();
  ASSERT_TRUE(ra.ok()) << ra.status();
  ASSERT_TRUE(rb.ok()) << rb.status();
  // Between them every migration was applied exactly once.
  EXPECT_EQ(ra->size() + rb->size(), EmbeddedMigrations().size());
  pqxx::connection conn(url_);
  pqxx::nontransaction tx(conn);
  EXPECT_EQ(tx.exec1("SELECT count(*) FROM schema_migrations")[0].as<int>(),
            static_cast<int>(EmbeddedMigrations().size()));
}

TEST_F(MigrateTest, UpDownUpAgain) {
  ASSERT_TRUE(MigrateUp(url_, EmbeddedMigrations()).ok());
  auto down = MigrateDown(url_, EmbeddedMigrations(), 0);
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_EQ(down->size(), EmbeddedMigrations().size());
  {
    pqxx::connection conn(url_);
    pqxx::nontransaction tx(conn);
    EXPECT_FALSE(tx.exec1("SELECT to_regclass('tokens') IS NOT NULL")[0].as<bool>());
    EXPECT_FALSE(tx.exec1("SELECT to_regclass('accounts') IS NOT NULL")[0].as<bool>());
  }
  auto again = MigrateUp(url_, EmbeddedMigrations());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->size(), EmbeddedMigrations().size());
}

TEST_F(MigrateTest, FailingMigrationRollsBackAndNamesItself) {
  std::vector<Migration> broken = {
      {1, "good", "CREATE TABLE good_one (id INT)", "DROP TABLE good_one"},
      {2, "bad", "CREATE TABLE bad_one (id INT); SELECT no_such_function()", "DROP TABLE bad_one"},
  };
  auto r = MigrateUp(url_, broken);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("migration 2_bad"), std::string::npos) << r.status();
  pqxx::connection conn(url_);
  pqxx::nontransaction tx(conn);
  EXPECT_TRUE(tx.exec1("SELECT to_regclass('good_one') IS NOT NULL")[0].as<bool>());
  EXPECT_FALSE(tx.exec1("SELECT to_regclass('bad_one') IS NOT NULL")[0].as<bool>());
  auto applied = AppliedVersions(url_);
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(*applied, std::vector<int>{1});
}

TEST_F(MigrateTest, TargetStopsEarly) {
  auto r = MigrateUp(url_, EmbeddedMigrations(), 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, std::vector<int>{1});
}

}  // namespace
}  // namespace mailroom
