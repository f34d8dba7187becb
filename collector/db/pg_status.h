#pragma once

// The one mapping of the collector's database layer from libpqxx's exceptions to a Status and
// to what becomes of the connection the error happened on. Every store of the collector gets its
// errors through it (db/pool.h), so a SQLSTATE means the same to every caller.

#include <exception>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace mailroom {

// What a failed database call means: the Status its caller gets, and whether the connection it
// ran on may serve the next call (false: it is closed and a new one opened when next needed).
struct PgFailure {
  absl::Status status;
  bool keep_connection = false;
};

// The failure of the call described by `what` ("renewing leases") that threw `e`. The Status's
// message is "<what>: <libpqxx's message>"; a connection URL is never part of it (libpq does not
// repeat the password in its messages).
//
//   pqxx::broken_connection, an SQL error without SQLSTATE (none came from the server), class
//   08 (connection), class 57 but 57014 (the server ended the session: shutdown, crash,
//   terminated backend, database dropped), 25P03 (idle in transaction too long), class 53 (out
//   of resources: memory, disk, connections) and class 58 (system I/O): kUnavailable,
//   connection dropped.
//   57014 (statement_timeout or a cancel), 55P03 (lock_timeout, NOWAIT) and class 40
//   (serialization failure, deadlock: libpqxx's transaction_rollback): kUnavailable,
//   connection kept (the transaction was rolled back; the session is fine).
//   P0002 (no_data_found, what mailroom's functions raise for an unknown group):
//   kNotFound, kept.
//   Class 22 (data exception) and 23 (integrity constraint: a CHECK, a unique key): the values
//   given break a rule of the schema: kInvalidArgument, kept.
//   Any other SQLSTATE (an undefined function: a schema not migrated; a permission): what a
//   retry does not fix: kFailedPrecondition, kept.
//   Any other exception (libpqxx's in_doubt_error, a conversion error, ...): kUnavailable,
//   connection dropped, as nothing says the session is in a known state.
PgFailure PgFailureOf(absl::string_view what, const std::exception& e);

// The part of the mapping above that depends on the SQLSTATE alone.
PgFailure PgFailureOfSqlstate(absl::string_view sqlstate, absl::string_view message);

}  // namespace mailroom
