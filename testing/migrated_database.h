#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <pqxx/pqxx>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "collector/migrate.h"
#include "gtest/gtest.h"
#include "testing/pg_server.h"

namespace mailroom::testing {

// Applies every migration to the database at `url`.
inline absl::Status MigrateAll(const std::string& url) {
  return MigrateUp(url, EmbeddedMigrations()).status();
}

// The fixture of every test that needs the collector's schema on a real PostgreSQL: one
// throwaway server per test suite (testing/pg_server.h), and for every test
// a fresh database with every migration applied, its URL (`url_`) and a connection
// (`conn_`) for the helpers below. Derived fixtures add their own SetUp after calling this one.
class MigratedDatabaseTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = PgServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    pg_ = server->release();
  }
  static void TearDownTestSuite() {
    delete pg_;
    pg_ = nullptr;
  }
  void SetUp() override {
    static int n = 0;
    auto url = pg_->CreateDatabase(absl::StrCat("test_", ++n));
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
    auto up = MigrateUp(url_, EmbeddedMigrations());
    ASSERT_TRUE(up.ok()) << up.status();
    conn_ = std::make_unique<pqxx::connection>(url_);
  }

  // Runs `sql` in its own committed transaction.
  void Exec(const std::string& sql) {
    pqxx::work tx(*conn_);
    tx.exec(sql);
    tx.commit();
  }
  // What the collector does before each dequeue: every committed queued signup becomes its
  // activation token (mailroom_collect_signups).
  void CollectSignups() { Exec("SELECT mailroom_collect_signups(2147483647)"); }
  // The single integer `sql` returns.
  int64_t Int(const std::string& sql) {
    pqxx::nontransaction tx(*conn_);
    return tx.exec1(sql)[0].as<int64_t>();
  }
  // The single value `sql` returns, as text ("NULL" for NULL).
  std::string Text(const std::string& sql) {
    pqxx::nontransaction tx(*conn_);
    auto f = tx.exec1(sql)[0];
    return f.is_null() ? "NULL" : f.as<std::string>();
  }

  static inline PgServer* pg_ = nullptr;
  std::string url_;
  std::unique_ptr<pqxx::connection> conn_;
};

}  // namespace mailroom::testing
