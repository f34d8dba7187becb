// LoadCollectorConfig's new variables and the connection defaults added to the database URL.
#include "collector/config.h"

#include <postgresql/libpq-fe.h>

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// The value libpq would use for `key` in `conninfo` (nullopt when unset).
std::optional<std::string> Option(const std::string& conninfo, const std::string& key) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
  if (err != nullptr) PQfreemem(err);
  if (opts == nullptr) return std::string("<unparsable>");
  std::optional<std::string> out;
  for (PQconninfoOption* o = opts; o->keyword != nullptr; ++o) {
    if (key == o->keyword && o->val != nullptr) out = o->val;
  }
  PQconninfoFree(opts);
  return out;
}

TEST(ConnectionDefaultsTest, AddedToAUrl) {
  const std::string s = WithConnectionDefaults(
      "postgresql://mailroom:p%27w%5Cd@db.example:5433/mail?sslmode=require",
      absl::Seconds(30));
  EXPECT_EQ(Option(s, "host"), "db.example");
  EXPECT_EQ(Option(s, "port"), "5433");
  EXPECT_EQ(Option(s, "user"), "mailroom");
  EXPECT_EQ(Option(s, "password"), "p'w\\d");  // quoting survives
  EXPECT_EQ(Option(s, "dbname"), "mail");
  EXPECT_EQ(Option(s, "sslmode"), "require");
  EXPECT_EQ(Option(s, "keepalives"), "1");
  EXPECT_EQ(Option(s, "keepalives_idle"), "10");
  EXPECT_EQ(Option(s, "keepalives_interval"), "5");
  EXPECT_EQ(Option(s, "keepalives_count"), "3");
  EXPECT_EQ(Option(s, "tcp_user_timeout"), "30000");
  EXPECT_EQ(Option(s, "options"), "-c statement_timeout=30000");
  // Nothing libpq would otherwise take from the environment is pinned.
  EXPECT_EQ(Option(s, "application_name"), std::nullopt);
}

TEST(ConnectionDefaultsTest, TheUsersSettingsWin) {
  const std::string s = WithConnectionDefaults(
      "host=/tmp keepalives_idle=60 tcp_user_timeout=5000 options='-c search_path=x'",
      absl::Milliseconds(1500));
  EXPECT_EQ(Option(s, "host"), "/tmp");
  EXPECT_EQ(Option(s, "keepalives_idle"), "60");
  EXPECT_EQ(Option(s, "tcp_user_timeout"), "5000");
  EXPECT_EQ(Option(s, "keepalives_count"), "3");
  EXPECT_EQ(Option(s, "options"), "-c search_path=x -c statement_timeout=1500");
  const std::string t = WithConnectionDefaults(
      "postgresql:///db?options=-c%20statement_timeout%3D0", absl::Seconds(30));
  EXPECT_EQ(Option(t, "options"), "-c statement_timeout=0");
}

class LoadConfigTest : public ::testing::Test {
 protected:
  absl::StatusOr<CollectorConfig> Load(std::map<std::string, std::string> extra) {
    vars_ = {{"MAILROOM_DATABASE_URL", "postgresql://u:pw@127.0.0.1:5432/db"},
             {"MAILROOM_SECRET_KEY", std::string(64, 'a')},
             {"MAILROOM_SUBSCRIBER_TOKENS", "scoped-token-0123456789@mailroom:subscriber"}};
    for (auto& [k, v] : extra) vars_[k] = v;
    return LoadCollectorConfig(Env([this](const char* name) -> const char* {
      auto it = vars_.find(name);
      return it == vars_.end() ? nullptr : it->second.c_str();
    }));
  }
  std::map<std::string, std::string> vars_;
};

TEST_F(LoadConfigTest, Defaults) {
  auto c = Load({});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_in_flight, 10000);
  EXPECT_THAT(c->dispatch.groups, ElementsAre("mailroom"));
  EXPECT_EQ(c->database_url, "postgresql://u:pw@127.0.0.1:5432/db");
  EXPECT_EQ(Option(c->dispatch.database_url, "tcp_user_timeout"), "30000");
  EXPECT_EQ(Option(c->dispatch.database_url, "options"), "-c statement_timeout=30000");
  ASSERT_EQ(c->credentials.size(), 1u);
  EXPECT_EQ(c->credentials[0].principal.roles, kRoleSubscriber);
  EXPECT_EQ(c->retention.retention, absl::Hours(24 * 30));
  EXPECT_EQ(c->retention.interval, absl::Minutes(1));
  EXPECT_EQ(c->retention.database_url, c->dispatch.database_url);
}

TEST_F(LoadConfigTest, Retention) {
  auto c = Load({{"MAILROOM_RETENTION", "3600000"}, {"MAILROOM_RETENTION_INTERVAL", "500"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->retention.retention, absl::Hours(1));
  EXPECT_EQ(c->retention.interval, absl::Milliseconds(500));
  c = Load({{"MAILROOM_RETENTION", "0"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->retention.retention, absl::ZeroDuration());
}

TEST_F(LoadConfigTest, NewVariables) {
  auto c = Load({{"MAILROOM_MAX_IN_FLIGHT", "500"},
                 {"MAILROOM_GROUPS", "mailroom, audit"},
                 {"MAILROOM_STATEMENT_TIMEOUT", "2000"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_in_flight, 500);
  EXPECT_THAT(c->dispatch.groups, ElementsAre("mailroom", "audit"));
  EXPECT_EQ(Option(c->dispatch.database_url, "options"), "-c statement_timeout=2000");
}

TEST_F(LoadConfigTest, ErrorsNameTheVariable) {
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {{{"MAILROOM_MAX_IN_FLIGHT", "0"}}, "MAILROOM_MAX_IN_FLIGHT"},
      {{{"MAILROOM_MAX_IN_FLIGHT", "100001"}}, "MAILROOM_MAX_IN_FLIGHT"},
      {{{"MAILROOM_MAX_IN_FLIGHT", "many"}}, "MAILROOM_MAX_IN_FLIGHT"},
      {{{"MAILROOM_GROUPS", "mailroom,Bad Group"}}, "MAILROOM_GROUPS"},
      {{{"MAILROOM_GROUPS", " , "}}, "MAILROOM_GROUPS"},
      {{{"MAILROOM_STATEMENT_TIMEOUT", "10"}}, "MAILROOM_STATEMENT_TIMEOUT"},
      {{{"MAILROOM_RETENTION", "-1"}}, "MAILROOM_RETENTION"},
      {{{"MAILROOM_RETENTION", "30d"}}, "MAILROOM_RETENTION"},
      {{{"MAILROOM_RETENTION", "315360000001"}}, "MAILROOM_RETENTION"},
      {{{"MAILROOM_RETENTION_INTERVAL", "10"}}, "MAILROOM_RETENTION_INTERVAL"},
      {{{"MAILROOM_SUBSCRIBER_TOKENS", "hidden-token-0123456789@mailroom:root"}},
       "MAILROOM_SUBSCRIBER_TOKENS"},
  };
  for (const auto& [vars, name] : cases) {
    auto c = Load(vars);
    ASSERT_FALSE(c.ok()) << name;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(name + ":"));
    EXPECT_THAT(std::string(c.status().message()), Not(HasSubstr("hidden-token")));
  }
}

}  // namespace
}  // namespace mailroom

namespace mailroom {
namespace {

// Moved from integration_tests/collector_test: a malformed key names its variable and is never
// echoed (bad_input_test checks the binary's exit code for every variable).
TEST_F(LoadConfigTest, ConfigErrorsNameTheVariableWithoutEchoingSecrets) {
  const std::string secret_ish =
      "zz0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
  auto c = Load({{"MAILROOM_SECRET_KEY", secret_ish}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("MAILROOM_SECRET_KEY"));
  EXPECT_THAT(c.status().message(), Not(HasSubstr(secret_ish)));
  EXPECT_THAT(c.status().message(), Not(HasSubstr("0102030405")));
  const std::string token = "leaky-token-0123456789@nope!:subscriber";
  c = Load({{"MAILROOM_SUBSCRIBER_TOKENS", token}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("MAILROOM_SUBSCRIBER_TOKENS"));
  EXPECT_THAT(c.status().message(), Not(HasSubstr("leaky-token")));
  c = Load({{"MAILROOM_GROUPS", "mailroom,Bad Group"}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("MAILROOM_GROUPS"));
}

}  // namespace
}  // namespace mailroom
