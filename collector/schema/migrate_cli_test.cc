// `collector migrate ...` against a throwaway PostgreSQL.
#include "collector/schema/migrate_cli.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collector/schema/migrate.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/pg_server.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Runs the CLI with `vars` as its environment; returns the exit code, `out` and `err` text.
int RunCli(const std::vector<std::string>& args, std::map<std::string, std::string> vars,
           std::string* out = nullptr, std::string* err = nullptr) {
  Env env([vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
  std::FILE* o = std::tmpfile();
  std::FILE* e = std::tmpfile();
  int code = RunMigrateCli(args, env, o, e);
  auto slurp = [](std::FILE* f) {
    std::string s;
    std::rewind(f);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    std::fclose(f);
    return s;
  };
  std::string os = slurp(o), es = slurp(e);
  if (out) *out = os;
  if (err) *err = es;
  return code;
}

class MigrateCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = testing::PgServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    pg_ = server->release();
  }
  static void TearDownTestSuite() { delete pg_; }
  void SetUp() override {
    static int n = 0;
    auto url = pg_->CreateDatabase(absl::StrCat("cli_", ++n));
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
  }
  static testing::PgServer* pg_;
  std::string url_;
};
testing::PgServer* MigrateCliTest::pg_ = nullptr;

TEST_F(MigrateCliTest, UpStatusDownAndTheChannel) {
  const size_t all = EmbeddedMigrations().size();
  std::string out;
  ASSERT_EQ(RunCli({"status"}, {{"MAILROOM_DATABASE_URL", url_}}, &out), 0);
  EXPECT_THAT(out, HasSubstr(absl::StrCat("applied: []; available: ", all,
                                          "\npending sources: [functions/consume.sql, ")));
  EXPECT_THAT(out, HasSubstr(", views/delivery_states.sql]\n"));
  ASSERT_EQ(RunCli({}, {{"MAILROOM_DATABASE_URL", url_}, {"MAILROOM_CHANNEL", "custom_wake"}}), 0);
  auto v = AppliedVersions(url_);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->size(), all);
  ASSERT_EQ(RunCli({"status"}, {{"MAILROOM_DATABASE_URL", url_}}, &out), 0);
  std::vector<int> versions;
  for (const Migration& m : EmbeddedMigrations()) versions.push_back(m.version);
  std::sort(versions.begin(), versions.end());
  EXPECT_EQ(out, absl::StrCat("applied: [", absl::StrJoin(versions, ", "), "]; available: ", all,
                              "\npending sources: []\n"));
  auto channel = pg_->Psql(url_.substr(url_.rfind('/') + 1),
                           "SELECT channel FROM mailroom_settings");
  ASSERT_TRUE(channel.ok());
  EXPECT_THAT(*channel, HasSubstr("custom_wake"));
  ASSERT_EQ(RunCli({"down", "0"}, {{"MAILROOM_DATABASE_URL", url_}}), 0);
  ASSERT_EQ(RunCli({"status"}, {{"MAILROOM_DATABASE_URL", url_}}, &out), 0);
  EXPECT_THAT(out, HasSubstr("applied: [];"));
}

TEST_F(MigrateCliTest, BadUsageAndConfigurationExitWith2) {
  std::string err;
  EXPECT_EQ(RunCli({"down"}, {{"MAILROOM_DATABASE_URL", url_}}, nullptr, &err), 2);  // no version
  EXPECT_THAT(err, HasSubstr("usage:"));
  EXPECT_EQ(RunCli({"up", "-1"}, {{"MAILROOM_DATABASE_URL", url_}}), 2);
  EXPECT_EQ(RunCli({"sideways"}, {{"MAILROOM_DATABASE_URL", url_}}), 2);
  EXPECT_EQ(RunCli({"up"}, {}, nullptr, &err), 2);
  EXPECT_THAT(err, HasSubstr("MAILROOM_DATABASE_URL"));
  EXPECT_EQ(RunCli({"up"}, {{"MAILROOM_DATABASE_URL", "postgresql://u:pw-secret@[bad"}}, nullptr,
                   &err),
            2);
  EXPECT_THAT(err, Not(HasSubstr("pw-secret")));
}

TEST_F(MigrateCliTest, AnUnreachableDatabaseExitsWith1) {
  std::string err;
  EXPECT_EQ(RunCli({"status"},
                   {{"MAILROOM_DATABASE_URL", "postgresql://u:pw-secret@127.0.0.1:1/x"}}, nullptr,
                   &err),
            1);
  EXPECT_THAT(err, Not(HasSubstr("pw-secret")));
}

}  // namespace
}  // namespace mailroom
