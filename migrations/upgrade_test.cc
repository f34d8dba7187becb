// A database migrated by the releases before the baseline (testdata/schema_0022.sql: the
// pg_dump of a database that ran every migration up to version 22) upgrades with a plain
// `collector migrate` to exactly the schema a fresh install gets.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <pqxx/pqxx>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collector/schema/migrate.h"
#include "gtest/gtest.h"
#include "testing/pg_server.h"

namespace mailroom {
namespace {

constexpr char kFixture[] = "migrations/testdata/schema_0022.sql";
constexpr int kBaselineVersion = 22;  // the version the fixture is at
constexpr char kPgDump[] = "/usr/lib/postgresql/15/bin/pg_dump";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// `pg_dump --schema-only` of `url` without its comments, SET lines and blank lines (the
// rows of schema_migrations and schema_sources are data, so not in it).
std::string SchemaDump(const std::string& url) {
  FILE* p = popen((std::string(kPgDump) + " --schema-only --no-owner '" + url + "'").c_str(), "r");
  if (p == nullptr) return "popen failed";
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  if (pclose(p) != 0) return "pg_dump failed: " + text;
  std::string out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || absl::StartsWith(line, "--") || absl::StartsWith(line, "SET ") ||
        absl::StartsWith(line, "SELECT pg_catalog.set_config") ||
        absl::StartsWith(line, "\\restrict") || absl::StartsWith(line, "\\unrestrict")) {
      continue;
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

// Empty when `a` and `b` are equal, else the first line where they differ, with its number.
std::string FirstDifference(const std::string& a, const std::string& b) {
  std::vector<std::string> la = absl::StrSplit(a, '\n'), lb = absl::StrSplit(b, '\n');
  for (size_t i = 0; i < std::max(la.size(), lb.size()); ++i) {
    const std::string x = i < la.size() ? la[i] : "<end>", y = i < lb.size() ? lb[i] : "<end>";
    if (x != y) return absl::StrCat("line ", i + 1, ":\n  ", x, "\n  ", y);
  }
  return "";
}

class UpgradeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = testing::PgServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    pg_ = server->release();
  }
  static void TearDownTestSuite() { delete pg_; }
  static std::string Database(const std::string& name) {
    auto url = pg_->CreateDatabase(name);
    EXPECT_TRUE(url.ok()) << url.status();
    return url.ok() ? *url : "";
  }
  static std::string Rows(const std::string& url, const std::string& sql) {
    pqxx::connection conn(url);
    pqxx::nontransaction tx(conn);
    std::string out;
    for (const auto& row : tx.exec(sql)) {
      for (const auto& f : row) absl::StrAppend(&out, f.is_null() ? "NULL" : f.c_str(), "|");
      out += "\n";
    }
    return out;
  }
  static testing::PgServer* pg_;
};
testing::PgServer* UpgradeTest::pg_ = nullptr;

TEST_F(UpgradeTest, AnUpgradedDatabaseHasTheSchemaOfAFreshInstall) {
  const std::string fresh = Database("fresh");
  ASSERT_TRUE(MigrateUp(fresh, EmbeddedMigrations()).ok());

  const std::string old = Database("old");
  const std::string fixture = ReadFile(kFixture);
  ASSERT_FALSE(fixture.empty()) << kFixture;
  {
    pqxx::connection conn(old);
    pqxx::nontransaction tx(conn);
    tx.exec(fixture);
  }
  std::vector<std::string> sources;
  auto up = MigrateUp(old, EmbeddedMigrations(), std::nullopt, EmbeddedSources(), &sources);
  ASSERT_TRUE(up.ok()) << up.status();
  // The baseline is the version the database is already at: only the migrations after it run.
  std::vector<int> after_baseline;
  for (const Migration& m : EmbeddedMigrations()) {
    if (m.version > kBaselineVersion) after_baseline.push_back(m.version);
  }
  EXPECT_EQ(*up, after_baseline);
  EXPECT_EQ(sources.size(), EmbeddedSources().size());

  const std::string fresh_dump = SchemaDump(fresh);
  EXPECT_NE(fresh_dump.find("CREATE FUNCTION mailroom.mailroom_dequeue("), std::string::npos);
  EXPECT_EQ(FirstDifference(SchemaDump(old), fresh_dump), "");
  const std::string seeds =
      "SELECT g.name, c.priority, c.prev_snapshot, c.cur_snapshot, g.max_lost_leases"
      "  FROM consumer_groups g JOIN group_cursors c ON c.group_id = g.id"
      " ORDER BY g.id, c.priority;"
      "SELECT * FROM mailroom_settings";
  EXPECT_EQ(Rows(old, seeds), Rows(fresh, seeds));
}

// No manual step: after the plain migrate, the upgraded database queues and hands out tokens.
TEST_F(UpgradeTest, AnUpgradedDatabaseWorks) {
  const std::string old = Database("old_works");
  {
    pqxx::connection conn(old);
    pqxx::nontransaction tx(conn);
    tx.exec(ReadFile(kFixture));
  }
  ASSERT_TRUE(MigrateUp(old, EmbeddedMigrations()).ok());
  pqxx::connection conn(old);
  {
    pqxx::work tx(conn);
    tx.exec("INSERT INTO accounts (email, login) VALUES ('a@example.com', 'a')");
    tx.commit();
  }
  pqxx::nontransaction(conn).exec("SELECT mailroom_collect_signups(10)");
  pqxx::work tx(conn);
  pqxx::result r = tx.exec("SELECT * FROM mailroom_dequeue('mailroom', 10, 'w', 60000)");
  tx.commit();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0]["email"].as<std::string>(), "a@example.com");
  EXPECT_EQ(r[0]["code"].as<std::string>().size(), 5u);
}

// A source file whose comments alone changed is applied again by the next migrate (its checksum
// covers its whole text): functions are replaced by the same ones and views are created again,
// and the schema, grants included, stays exactly what it was.
TEST_F(UpgradeTest, ACommentChangeReappliesTheFilesAndChangesNothing) {
  const std::string url = Database("comments");
  ASSERT_TRUE(MigrateUp(url, EmbeddedMigrations()).ok());
  {
    pqxx::connection conn(url);
    pqxx::nontransaction tx(conn);
    tx.exec("CREATE ROLE comments_app");
    tx.exec("SELECT mailroom.grant_application('comments_app')");
    tx.exec("GRANT SELECT ON mailroom.delivery_states TO comments_app");
  }
  const std::string before = SchemaDump(url);
  ASSERT_NE(before.find("GRANT SELECT ON TABLE mailroom.account_emails TO comments_app;"),
            std::string::npos);
  std::vector<std::string> texts;
  for (const Source& s : EmbeddedSources()) texts.push_back(absl::StrCat("-- changed\n", s.sql));
  std::vector<Source> commented;
  for (size_t i = 0; i < texts.size(); ++i) {
    commented.push_back(Source{EmbeddedSources()[i].name, texts[i].c_str()});
  }
  std::vector<std::string> applied;
  auto up = MigrateUp(url, EmbeddedMigrations(), std::nullopt, commented, &applied);
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_TRUE(up->empty());
  EXPECT_EQ(applied.size(), EmbeddedSources().size());
  EXPECT_EQ(FirstDifference(SchemaDump(url), before), "");
}

}  // namespace
}  // namespace mailroom
