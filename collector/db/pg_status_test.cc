// The one mapping from libpqxx's exceptions to a Status and the fate of the connection, as a
// table.
#include "collector/db/pg_status.h"

#include <pqxx/pqxx>

#include <stdexcept>

#include "absl/strings/str_cat.h"

#include "gtest/gtest.h"

namespace mailroom {
namespace {

struct Case {
  const char* sqlstate;
  absl::StatusCode code;
  bool keep_connection;
};

TEST(PgStatusTest, EverySqlstateClassHasItsCodeAndItsConnectionsFate) {
  const Case cases[] = {
      // The session is gone or in an unknown state.
      {"08006", absl::StatusCode::kUnavailable, false},  // connection_failure
      {"08003", absl::StatusCode::kUnavailable, false},  // connection_does_not_exist
      {"57P01", absl::StatusCode::kUnavailable, false},  // admin_shutdown (terminated backend)
      {"57P02", absl::StatusCode::kUnavailable, false},  // crash_shutdown
      {"57P03", absl::StatusCode::kUnavailable, false},  // cannot_connect_now
      {"57P04", absl::StatusCode::kUnavailable, false},  // database_dropped
      {"25P03", absl::StatusCode::kUnavailable, false},  // idle_in_transaction_session_timeout
      {"53200", absl::StatusCode::kUnavailable, false},  // out_of_memory
      {"53300", absl::StatusCode::kUnavailable, false},  // too_many_connections
      {"58030", absl::StatusCode::kUnavailable, false},  // io_error
      {"", absl::StatusCode::kUnavailable, false},       // not from the server
      {"XX", absl::StatusCode::kUnavailable, false},     // not a SQLSTATE
      // The statement failed and was rolled back; the session is fine.
      {"57014", absl::StatusCode::kUnavailable, true},  // statement_timeout
      {"55P03", absl::StatusCode::kUnavailable, true},  // lock_timeout, NOWAIT
      {"40001", absl::StatusCode::kUnavailable, true},  // serialization_failure
      {"40P01", absl::StatusCode::kUnavailable, true},  // deadlock_detected
      // What a retry does not fix.
      {"P0002", absl::StatusCode::kNotFound, true},            // no_data_found: unknown group
      {"22023", absl::StatusCode::kInvalidArgument, true},     // invalid_parameter_value
      {"22P02", absl::StatusCode::kInvalidArgument, true},     // invalid_text_representation
      {"23514", absl::StatusCode::kInvalidArgument, true},     // check_violation
      {"23505", absl::StatusCode::kInvalidArgument, true},     // unique_violation
      {"42883", absl::StatusCode::kFailedPrecondition, true},  // undefined_function
      {"42501", absl::StatusCode::kFailedPrecondition, true},  // insufficient_privilege
      {"P0001", absl::StatusCode::kFailedPrecondition, true},  // raise_exception
      {"55000", absl::StatusCode::kFailedPrecondition, true},  // object_not_in_prerequisite_state
      {"XX000", absl::StatusCode::kFailedPrecondition, true},  // internal_error
  };
  for (const Case& c : cases) {
    PgFailure f = PgFailureOf("renewing leases",
                              pqxx::sql_error("ERROR:  it failed", "SELECT 1", c.sqlstate));
    EXPECT_EQ(f.status.code(), c.code) << c.sqlstate;
    EXPECT_EQ(f.keep_connection, c.keep_connection) << c.sqlstate;
    EXPECT_EQ(f.status.message(), "renewing leases: ERROR:  it failed") << c.sqlstate;
  }
}

void ExpectUnavailable(const std::exception& e, bool keep_connection) {
  PgFailure f = PgFailureOf("acknowledge", e);
  EXPECT_EQ(f.status.code(), absl::StatusCode::kUnavailable) << e.what();
  EXPECT_EQ(f.keep_connection, keep_connection) << e.what();
  EXPECT_EQ(f.status.message(), absl::StrCat("acknowledge: ", e.what()));
}

TEST(PgStatusTest, LibpqxxsOwnExceptions) {
  PgFailure lost = PgFailureOf("dequeue", pqxx::broken_connection("server closed the connection"));
  EXPECT_EQ(lost.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(lost.keep_connection);
  EXPECT_EQ(lost.status.message(),
            "dequeue: database connection lost: server closed the connection");
  // too_many_connections is a broken_connection in libpqxx.
  EXPECT_FALSE(PgFailureOf("dequeue", pqxx::too_many_connections("too many")).keep_connection);
  // The specific classes libpqxx throws for some SQLSTATEs are mapped by their SQLSTATE.
  PgFailure check = PgFailureOf("adding", pqxx::check_violation("bad", "q", "23514"));
  EXPECT_EQ(check.status.code(), absl::StatusCode::kInvalidArgument);
  PgFailure gone = PgFailureOf("dequeue", pqxx::plpgsql_no_data_found("no group", "q", "P0002"));
  EXPECT_EQ(gone.status.code(), absl::StatusCode::kNotFound);
  // Class 40 comes as transaction_rollback, without a SQLSTATE: rolled back, session fine.
  ExpectUnavailable(pqxx::deadlock_detected("deadlock detected"), /*keep_connection=*/true);
  ExpectUnavailable(pqxx::serialization_failure("could not serialize"), /*keep_connection=*/true);
  // A commit whose outcome is unknown, a conversion error, anything else: the session's state
  // is not known.
  ExpectUnavailable(pqxx::in_doubt_error("commit outcome unknown"), /*keep_connection=*/false);
  ExpectUnavailable(pqxx::conversion_error("not an integer"), /*keep_connection=*/false);
  ExpectUnavailable(std::runtime_error("other"), /*keep_connection=*/false);
}

}  // namespace
}  // namespace mailroom
