#include "collector/schema/migrate.h"

#include <future>
#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/intruder.h"
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
  std::vector<std::string> sources;
  auto first = MigrateUp(url_, EmbeddedMigrations(), std::nullopt, EmbeddedSources(), &sources);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->size(), EmbeddedMigrations().size());
  EXPECT_EQ(sources.size(), EmbeddedSources().size());
  auto pending = PendingSources(url_, EmbeddedSources());
  ASSERT_TRUE(pending.ok()) << pending.status();
  EXPECT_TRUE(pending->empty());
  auto second = MigrateUp(url_, EmbeddedMigrations(), std::nullopt, EmbeddedSources(), &sources);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->empty());
  EXPECT_TRUE(sources.empty());
  auto applied = AppliedVersions(url_);
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(applied->size(), EmbeddedMigrations().size());
}

// The turn is a lock on a table of mailroom's: a migration that does not get it within its wait
// says who holds it, and changes nothing.
TEST_F(MigrateTest, ATurnNotHadInTimeIsAClearError) {
  ASSERT_TRUE(MigrateUp(url_, EmbeddedMigrations()).ok());
  pqxx::connection holder(url_ + "?application_name=stuck-migrator");
  pqxx::nontransaction(holder).exec(
      "BEGIN; LOCK TABLE mailroom.mailroom_migration_turn IN EXCLUSIVE MODE");
  auto r = MigrateUp(url_, EmbeddedMigrations(), std::nullopt, EmbeddedSources(), nullptr,
                     absl::Milliseconds(300));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(r.status().message().find("stuck-migrator"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("300ms"), std::string::npos) << r.status();
  pqxx::nontransaction(holder).exec("COMMIT");
  EXPECT_TRUE(MigrateUp(url_, EmbeddedMigrations()).ok());
}

// A role that may not create the schema (no CREATE on the database) or that does not own it is
// told the rights collector migrate needs, with its own name and the database's.
TEST_F(MigrateTest, ARoleWithoutTheRightsIsToldWhatItNeeds) {
  {
    pqxx::connection admin(url_);
    pqxx::nontransaction(admin).exec(
        "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'stranger') THEN"
        " CREATE ROLE stranger LOGIN; END IF; END $$");
  }
  const std::string stranger = testing::UrlAs(url_, "stranger");
  for (int round = 0; round < 2; ++round) {
    auto r = MigrateUp(stranger, EmbeddedMigrations());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    const std::string message(r.status().message());
    EXPECT_NE(message.find("permission denied"), std::string::npos) << message;
    EXPECT_NE(message.find("GRANT CREATE ON DATABASE migrate_"), std::string::npos) << message;
    EXPECT_NE(message.find(" TO stranger"), std::string::npos) << message;
    EXPECT_NE(message.find("ALTER SCHEMA mailroom OWNER TO stranger"), std::string::npos)
        << message;
    // Then with the schema there, another role's.
    if (round == 0) {
      ASSERT_TRUE(MigrateUp(url_, EmbeddedMigrations()).ok());
    }
  }
}

// Everything lives in the schema `mailroom`: nothing of mailroom's is left in `public`, and
// every function pins its search path.
TEST_F(MigrateTest, EverythingLivesInMailroomsSchema) {
  ASSERT_TRUE(MigrateUp(url_, EmbeddedMigrations()).ok());
  pqxx::connection conn(url_);
  pqxx::nontransaction tx(conn);
  EXPECT_EQ(tx.exec1("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                     " WHERE n.nspname = 'public'")[0]
                .as<int>(),
            0);
  EXPECT_EQ(tx.exec1(
                  "SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace")[0]
                .as<int>(),
            0);
  EXPECT_EQ(tx.exec1(
                  "SELECT count(*) FROM pg_type t WHERE t.typnamespace = 'public'::regnamespace")[0]
                .as<int>(),
            0);
  EXPECT_EQ(tx.exec1("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n"
                     " ON n.oid = e.extnamespace WHERE e.extname = 'pgcrypto'")[0]
                .as<std::string>(),
            "mailroom");
  // Functions of pgcrypto are the extension's; every function of mailroom's pins its path, but
  // for the SQL helpers PostgreSQL inlines into their callers (settings would prevent that),
  // which run with the caller's rights under the caller's pinned path.
  pqxx::result unpinned = tx.exec(
      "SELECT p.oid::regprocedure::text FROM pg_proc p"
      " WHERE p.pronamespace = 'mailroom'::regnamespace"
      "   AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')"
      "   AND NOT coalesce('search_path=pg_catalog, mailroom, pg_temp' = ANY (p.proconfig), false)"
      "   AND NOT (p.prolang = (SELECT l.oid FROM pg_language l WHERE l.lanname = 'sql') AND "
      "p.proconfig IS NULL AND NOT p.prosecdef"
      "            AND p.provolatile IN ('i', 's')"
      "            AND p.proname IN ('mailroom_suppression', 'mailroom_token_sendable',"
      "                              'mailroom_finished_state', 'mailroom_limit_address'))");
  for (const auto& row : unpinned) ADD_FAILURE() << "not pinned: " << row[0].c_str();
  // Nobody but its owner may create in it.
  EXPECT_FALSE(
      tx.exec1("SELECT has_schema_privilege('public', 'mailroom', 'CREATE')")[0].as<bool>());
}

// A role that may create in `public` plants, before mailroom is installed, tables named like
// mailroom's and an operator and a function that would match mailroom's statements better than
// the built-in ones. The migration neither takes those tables for mailroom's nor runs that code
// (with its rights), and nothing of mailroom's depends on anything in `public`.
TEST_F(MigrateTest, LookalikesInPublicRunNothingAndMoveNowhere) {
  {
    pqxx::connection admin(url_);
    pqxx::nontransaction tx(admin);
    tx.exec("DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'planter') THEN"
            " CREATE ROLE planter LOGIN; END IF; END $$;"
            "GRANT CREATE ON SCHEMA public TO planter;"
            "CREATE TABLE public.pwned (who text); GRANT INSERT ON public.pwned TO PUBLIC");
  }
  {
    pqxx::connection planter(testing::UrlAs(url_, "planter"));
    pqxx::nontransaction tx(planter);
    tx.exec("CREATE TABLE public.mailroom_settings (x int);"
            "CREATE TABLE public.schema_migrations (version int, name text);"
            "INSERT INTO public.schema_migrations VALUES (99, 'planted');"
            "CREATE FUNCTION public.planted_eq(regnamespace, regnamespace) RETURNS boolean"
            " LANGUAGE plpgsql AS $f$ BEGIN INSERT INTO public.pwned VALUES (current_user);"
            " RETURN $1::oid = $2::oid; END $f$;"
            "CREATE OPERATOR public.= (LEFTARG = regnamespace, RIGHTARG = regnamespace,"
            " FUNCTION = public.planted_eq);"
            "CREATE FUNCTION public.to_timestamp(bigint) RETURNS timestamptz LANGUAGE plpgsql"
            " AS $f$ BEGIN INSERT INTO public.pwned VALUES (current_user);"
            " RETURN pg_catalog.to_timestamp($1::double precision); END $f$");
  }
  auto up = MigrateUp(url_, EmbeddedMigrations());
  ASSERT_TRUE(up.ok()) << up.status();
  pqxx::connection conn(url_);
  pqxx::nontransaction tx(conn);
  tx.exec("SELECT count(*) FROM mailroom.account_emails");
  EXPECT_EQ(tx.exec1("SELECT count(*) FROM public.pwned")[0].as<int>(), 0);
  EXPECT_EQ(tx.exec1("SELECT count(*) FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace"
                     " AND c.relname IN ('mailroom_settings', 'schema_migrations')")[0]
                .as<int>(),
            2);
  EXPECT_EQ(tx.exec1("SELECT count(*) FROM pg_depend d JOIN pg_proc p ON d.refclassid ="
                     " 'pg_proc'::regclass AND p.oid = d.refobjid"
                     " WHERE p.pronamespace = 'public'::regnamespace"
                     "   AND d.classid <> 'pg_operator'::regclass")[0]
                .as<int>(),  // its own
            0);
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

// Reverting the newest migrations, one more each time, and migrating up again works from every
// version: every source file applies again over what the remaining migrations left.
TEST_F(MigrateTest, DownToEachVersionThenUpAgain) {
  const std::vector<Migration>& all = EmbeddedMigrations();
  ASSERT_TRUE(MigrateUp(url_, all).ok());
  for (size_t keep = all.size() - 1; keep >= 1; --keep) {
    const int target = all[keep - 1].version;
    auto down = MigrateDown(url_, all, target);
    ASSERT_TRUE(down.ok()) << "down to " << target << ": " << down.status();
    EXPECT_EQ(down->size(), all.size() - keep) << "down to " << target;
    auto up = MigrateUp(url_, all);
    ASSERT_TRUE(up.ok()) << "up from " << target << ": " << up.status();
    EXPECT_EQ(up->size(), all.size() - keep) << "up from " << target;
  }
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

TEST_F(MigrateTest, TargetStopsEarlyAndLeavesTheSourcesForLater) {
  std::vector<Migration> two = {
      {1, "one", "CREATE TABLE one (id INT)", "DROP TABLE one"},
      {2, "two", "CREATE TABLE two (id INT)", "DROP TABLE two"},
  };
  std::vector<Source> sources = {
      {"views/two_ids.sql", "CREATE VIEW two_ids AS SELECT id FROM two"}};
  std::vector<std::string> applied;
  auto r = MigrateUp(url_, two, 1, sources, &applied);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, std::vector<int>{1});
  EXPECT_TRUE(applied.empty());  // the sources describe the newest schema only
  r = MigrateUp(url_, two, std::nullopt, sources, &applied);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, std::vector<int>{2});
  EXPECT_EQ(applied, std::vector<std::string>{"views/two_ids.sql"});
}

// A database migrated by a release older than the baseline, without it, is refused with the
// way out; nothing is applied.
TEST_F(MigrateTest, AVersionOlderThanTheBaselineIsRefused) {
  {
    pqxx::connection conn(url_);
    pqxx::nontransaction tx(conn);
    tx.exec("CREATE TABLE schema_migrations (version INT PRIMARY KEY, name TEXT NOT NULL,"
            " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())");
    tx.exec("INSERT INTO schema_migrations (version, name) SELECT v, 'old' FROM"
            " generate_series(1, 21) v WHERE v <> 8");
  }
  auto r = MigrateUp(url_, EmbeddedMigrations());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(),
            "the database is at schema version 21, older than version 22 (baseline) this release "
            "starts from: migrate it with the previous release first (its `collector migrate` "
            "brings it to version 22), then run this one");
  pqxx::connection conn(url_);
  pqxx::nontransaction tx(conn);
  EXPECT_FALSE(tx.exec1("SELECT to_regclass('tokens') IS NOT NULL")[0].as<bool>());
}

// A changed source file is applied again (its functions replaced, its view created afresh);
// an unchanged one is not run at all.
TEST_F(MigrateTest, OnlyChangedSourcesAreApplied) {
  ASSERT_TRUE(MigrateUp(url_, EmbeddedMigrations()).ok());
  pqxx::connection conn(url_);
  auto xmin = [&](const std::string& function) {
    pqxx::nontransaction tx(conn);
    return tx.exec_params1("SELECT xmin::TEXT FROM pg_proc WHERE proname = $1", function)[0]
        .as<std::string>();
  };
  auto view_oid = [&] {
    pqxx::nontransaction tx(conn);
    return tx.exec1("SELECT 'delivery_states'::REGCLASS::OID")[0].as<int64_t>();
  };
  const std::string dequeue = xmin("mailroom_dequeue"), stats = xmin("mailroom_stats");
  const int64_t view = view_oid();
  std::vector<std::string> texts;  // keeps the edited texts alive
  texts.reserve(EmbeddedSources().size());
  std::vector<Source> edited;
  for (const Source& s : EmbeddedSources()) {
    const std::string name = s.name;
    if (name == "functions/mailroom_stats.sql" || name == "views/delivery_states.sql") {
      texts.push_back(std::string(s.sql) + "\n-- edited\n");
      edited.push_back({s.name, texts.back().c_str()});
    } else {
      edited.push_back(s);
    }
  }
  auto pending = PendingSources(url_, edited);
  ASSERT_TRUE(pending.ok()) << pending.status();
  const std::vector<std::string> expected = {"functions/mailroom_stats.sql",
                                             "views/delivery_states.sql"};
  EXPECT_EQ(*pending, expected);
  std::vector<std::string> applied;
  auto r = MigrateUp(url_, EmbeddedMigrations(), std::nullopt, edited, &applied);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->empty());
  EXPECT_EQ(applied, expected);
  EXPECT_EQ(xmin("mailroom_dequeue"), dequeue);
  EXPECT_NE(xmin("mailroom_stats"), stats);
  EXPECT_NE(view_oid(), view);
  pqxx::nontransaction tx(conn);
  EXPECT_EQ(tx.exec1("SELECT count(*) FROM schema_sources WHERE applied_at > ("
                     " SELECT min(applied_at) FROM schema_sources)")[0]
                .as<int>(),
            2);
}

// A function file whose signature changed replaces the function: a renamed parameter (which
// CREATE OR REPLACE refuses) and a changed type (which CREATE OR REPLACE would add as a second
// overload) both leave exactly the functions the file defines.
TEST_F(MigrateTest, AChangedSignatureReplacesTheFunction) {
  ASSERT_TRUE(MigrateUp(url_, EmbeddedMigrations()).ok());
  pqxx::connection conn(url_);
  auto apply = [&](const std::string& sql) {
    std::vector<Source> sources = EmbeddedSources();
    sources.push_back({"functions/mailroom_probe.sql", sql.c_str()});
    return MigrateUp(url_, EmbeddedMigrations(), std::nullopt, sources).status();
  };
  auto signatures = [&] {
    pqxx::nontransaction tx(conn);
    std::vector<std::string> found;
    for (const auto& row :
         tx.exec("SELECT oid::REGPROCEDURE::TEXT || ' ' || pg_get_function_arguments(oid)"
                 " FROM pg_proc WHERE proname = 'mailroom_probe' ORDER BY 1")) {
      found.push_back(row[0].as<std::string>());
    }
    return found;
  };
  auto call = [&] {
    pqxx::nontransaction tx(conn);
    return tx.exec1("SELECT mailroom_probe(NULL)::TEXT IS NULL")[0].as<bool>();
  };
  constexpr char kBody[] = " LANGUAGE sql AS 'SELECT NULL::INT';";
  ASSERT_TRUE(apply(absl::StrCat("CREATE OR REPLACE FUNCTION mailroom_probe(p_count integer)"
                                 " RETURNS integer",
                                 kBody))
                  .ok());
  ASSERT_TRUE(apply(absl::StrCat("CREATE OR REPLACE FUNCTION mailroom_probe(p_first integer)"
                                 " RETURNS integer",
                                 kBody))
                  .ok());
  EXPECT_EQ(signatures(), std::vector<std::string>{"mailroom_probe(integer) p_first integer"});
  ASSERT_TRUE(apply(absl::StrCat("CREATE OR REPLACE FUNCTION mailroom_probe(p_first boolean[])"
                                 " RETURNS integer",
                                 kBody))
                  .ok());
  EXPECT_EQ(signatures(), std::vector<std::string>{"mailroom_probe(boolean[]) p_first boolean[]"});
  EXPECT_TRUE(call());
  // Overloads the file defines together are all kept, on every change.
  const std::string two = absl::StrCat(
      "CREATE OR REPLACE FUNCTION mailroom_probe(p_first boolean[]) RETURNS integer", kBody,
      "CREATE OR REPLACE FUNCTION mailroom_probe(p_first text, p_n integer) RETURNS integer",
      kBody);
  ASSERT_TRUE(apply(two).ok());
  ASSERT_TRUE(apply(two + "\n-- edited\n").ok());
  EXPECT_EQ(signatures(),
            (std::vector<std::string>{"mailroom_probe(boolean[]) p_first boolean[]",
                                      "mailroom_probe(text,integer) p_first text, p_n integer"}));
}

}  // namespace
}  // namespace mailroom
