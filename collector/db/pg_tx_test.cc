// The text that starts each transaction and lone statement, and text[] literals.
#include "collector/db/pg_tx.h"

#include "gtest/gtest.h"

namespace mailroom {
namespace {

TEST(PgTxTest, BeginSetsThePathAndEachTimeoutThatIsSet) {
  EXPECT_EQ(BeginCommand({}), "BEGIN; SET LOCAL search_path = pg_catalog, mailroom");
  EXPECT_EQ(BeginCommand({absl::Seconds(30), absl::Milliseconds(250), absl::Seconds(1)}),
            "BEGIN; SET LOCAL search_path = pg_catalog, mailroom;"
            " SET LOCAL statement_timeout = 30000;"
            " SET LOCAL idle_in_transaction_session_timeout = 250; SET LOCAL lock_timeout = 1000");
  EXPECT_EQ(BeginCommand(WithLockTimeout({}, absl::Milliseconds(7))),
            "BEGIN; SET LOCAL search_path = pg_catalog, mailroom; SET LOCAL lock_timeout = 7");
}

// A lone statement leaves no transaction open: the idle-in-transaction limit is not set.
TEST(PgTxTest, ALoneStatementsPrefixEndsReadyForTheStatement) {
  EXPECT_EQ(StatementPrefix({}), "SET LOCAL search_path = pg_catalog, mailroom; ");
  EXPECT_EQ(StatementPrefix({absl::Seconds(30), absl::Milliseconds(250), absl::Seconds(1)}),
            "SET LOCAL search_path = pg_catalog, mailroom; SET LOCAL statement_timeout = 30000;"
            " SET LOCAL lock_timeout = 1000; ");
}

TEST(PgTxTest, TextArraysQuoteAndEscapeEveryElement) {
  EXPECT_EQ(TextArray({}), "{}");
  EXPECT_EQ(TextArray({"a", ""}), "{\"a\",\"\"}");
  EXPECT_EQ(TextArray({"x,y", "q\"uote", "back\\slash", "{}"}),
            "{\"x,y\",\"q\\\"uote\",\"back\\\\slash\",\"{}\"}");
}

}  // namespace
}  // namespace mailroom
