// The connection strings the collector builds from the ones it is given.
#include "collector/db/conninfo.h"

#include <optional>
#include <string>

#include "collector/db/testing/conninfo_option.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

TEST(ValidConninfoTest, UrlsAndKeyValueStringsButNotGarbage) {
  EXPECT_TRUE(ValidConninfo("postgresql://u:pw@127.0.0.1:5432/db"));
  EXPECT_TRUE(ValidConninfo("host=/tmp dbname=mail"));
  EXPECT_TRUE(ValidConninfo(""));  // libpq's defaults and environment
  EXPECT_FALSE(ValidConninfo("postgresql://u:pw@[bad"));
  EXPECT_FALSE(ValidConninfo("host"));
  EXPECT_FALSE(ValidConninfo("nosuchkey=1"));
}

TEST(ConnectionDefaultsTest, AddedToAUrl) {
  const std::string s = WithConnectionDefaults(
      "postgresql://mailroom:p%27w%5Cd@db.example:5433/mail?sslmode=require", absl::Seconds(30),
      absl::Seconds(5));
  EXPECT_EQ(ConninfoOption(s, "host"), "db.example");
  EXPECT_EQ(ConninfoOption(s, "port"), "5433");
  EXPECT_EQ(ConninfoOption(s, "user"), "mailroom");
  EXPECT_EQ(ConninfoOption(s, "password"), "p'w\\d");  // quoting survives
  EXPECT_EQ(ConninfoOption(s, "dbname"), "mail");
  EXPECT_EQ(ConninfoOption(s, "sslmode"), "require");
  EXPECT_EQ(ConninfoOption(s, "keepalives"), "1");
  EXPECT_EQ(ConninfoOption(s, "keepalives_idle"), "10");
  EXPECT_EQ(ConninfoOption(s, "keepalives_interval"), "5");
  EXPECT_EQ(ConninfoOption(s, "keepalives_count"), "3");
  EXPECT_EQ(ConninfoOption(s, "tcp_user_timeout"), "30000");
  EXPECT_EQ(ConninfoOption(s, "options"),
            "-c statement_timeout=30000 -c idle_in_transaction_session_timeout=5000");
  // Nothing libpq would otherwise take from the environment is pinned.
  EXPECT_EQ(ConninfoOption(s, "application_name"), std::nullopt);
}

TEST(ConnectionDefaultsTest, TheUsersSettingsWin) {
  const std::string s = WithConnectionDefaults(
      "host=/tmp keepalives_idle=60 tcp_user_timeout=5000 options='-c search_path=x'",
      absl::Milliseconds(1500), absl::Milliseconds(750));
  EXPECT_EQ(ConninfoOption(s, "host"), "/tmp");
  EXPECT_EQ(ConninfoOption(s, "keepalives_idle"), "60");
  EXPECT_EQ(ConninfoOption(s, "tcp_user_timeout"), "5000");
  EXPECT_EQ(ConninfoOption(s, "keepalives_count"), "3");
  EXPECT_EQ(
      ConninfoOption(s, "options"),
      "-c search_path=x -c statement_timeout=1500 -c idle_in_transaction_session_timeout=750");
  const std::string t = WithConnectionDefaults(
      "postgresql:///"
      "db?options=-c%20statement_timeout%3D0%20-c%20idle_in_transaction_session_timeout%3D0",
      absl::Seconds(30), absl::Seconds(5));
  EXPECT_EQ(ConninfoOption(t, "options"),
            "-c statement_timeout=0 -c idle_in_transaction_session_timeout=0");
}

TEST(ConnectionDefaultsTest, IdleInTransactionIsAQuarterOfTheLeaseWithin100MsAnd5s) {
  EXPECT_EQ(IdleInTransactionTimeout(absl::Seconds(3)), absl::Milliseconds(750));
  EXPECT_EQ(IdleInTransactionTimeout(absl::Seconds(60)), absl::Seconds(5));
  EXPECT_EQ(IdleInTransactionTimeout(absl::Milliseconds(100)), absl::Milliseconds(100));
}

}  // namespace
}  // namespace mailroom
