#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <pqxx/pqxx>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collector/schema/migrate.h"
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
// A job leased to subscription "s" of group "mailroom".
struct Leased {
  uint64_t id = 0;
  int64_t attempt = 0;
};

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
  // Up to `limit` jobs of "mailroom" leased to "s" for a minute (mailroom_dequeue).
  std::vector<Leased> Dequeue(int limit) {
    pqxx::nontransaction tx(*conn_);
    std::vector<Leased> jobs;
    for (const auto& row :
         tx.exec(absl::StrCat("SELECT job_id, attempt FROM mailroom_dequeue('mailroom', ", limit,
                              ", 's', 60000)"))) {
      jobs.push_back({row[0].as<uint64_t>(), row[1].as<int64_t>()});
    }
    return jobs;
  }
  // Records `jobs` SENT by "s" with `message_ids` (parallel, "" for none) and counts those
  // recorded as sent in the group's reputation, in one transaction, as the collector's
  // acknowledgement does (mailroom_ack, then mailroom_record_sent); returns how many were
  // recorded.
  int64_t AckSent(const std::vector<Leased>& jobs, const std::vector<std::string>& message_ids) {
    std::vector<std::string> ids, attempts, quoted;
    for (size_t i = 0; i < jobs.size(); ++i) {
      ids.push_back(absl::StrCat(jobs[i].id));
      attempts.push_back(absl::StrCat(jobs[i].attempt));
      quoted.push_back(conn_->quote(message_ids[i]));
    }
    const size_t n = jobs.size();
    return Int(absl::StrCat(
        "WITH recorded AS (SELECT * FROM mailroom_ack('mailroom', 's', '{", absl::StrJoin(ids, ","),
        "}'::bigint[], '{", absl::StrJoin(attempts, ","),
        "}'::int[], array_fill('sent'::text, ARRAY[", n, "]), array_fill(''::text, ARRAY[", n,
        "]), array_fill(0, ARRAY[", n, "]), array_fill(0::bigint, ARRAY[", n, "]), ARRAY[",
        absl::StrJoin(quoted, ","),
        "]::text[]))"
        " SELECT c.n FROM (SELECT count(*) AS n FROM recorded) c,"
        " mailroom_record_sent('mailroom', c.n, '{}'::bigint[], '{}'::text[])"));
  }
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
