#pragma once

// The text that starts the transactions and lone statements of the collector's query
// connections (db/pool.h), which may go through a connection pooler in transaction-pooling
// mode (pgbouncer): consecutive transactions of one client connection may run on different
// server sessions, so nothing may rely on session state. The timeouts are therefore set for
// each transaction (SET LOCAL) in the round trip of its BEGIN (BeginCommand), or in the query
// string of a statement that runs alone (StatementPrefix), never as session settings (a
// startup `options` parameter is refused by pgbouncer, and a session SET would stay on a server
// connection that other clients use next). Named prepared statements are never used for the
// same reason: every statement is a simple query or an unnamed one (exec_params).

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace mailroom {

// Every transaction and lone statement of the collector's runs with this search path: mailroom's
// schema, where only mailroom's roles may create objects, and the system catalogue before it.
// No table or function of another schema can stand in for one of mailroom's, whatever the
// database's or the role's own search path says (functions are called schema-qualified anyway).
inline constexpr char kPinSearchPath[] = "SET LOCAL search_path = pg_catalog, mailroom";

// The limits every transaction of a query connection runs under. Zero: not set.
struct TxTimeouts {
  absl::Duration statement_timeout = absl::ZeroDuration();
  absl::Duration idle_in_transaction = absl::ZeroDuration();
  absl::Duration lock_timeout = absl::ZeroDuration();
};

// `timeouts` with its lock_timeout set to `lock_timeout`.
inline TxTimeouts WithLockTimeout(TxTimeouts timeouts, absl::Duration lock_timeout) {
  timeouts.lock_timeout = lock_timeout;
  return timeouts;
}

// "BEGIN", the pinned search path and a SET LOCAL for each timeout that is set, as one simple
// query.
std::string BeginCommand(const TxTimeouts& timeouts);

// The pinned search path, then "SET LOCAL statement_timeout = …; SET LOCAL lock_timeout = …; "
// for the timeouts that are set: the start of a simple query string whose last statement then
// runs under them, the string being one implicit transaction (one round trip, no transaction
// left open, so the idle-in-transaction limit has nothing to limit).
std::string StatementPrefix(const TxTimeouts& timeouts);

// An array literal of arbitrary strings for a text[] query parameter (quoted, escaped).
std::string TextArray(const std::vector<std::string>& v);

// An array literal of integers for an integer[] or bigint[] query parameter.
template <typename T>
std::string IntArray(const std::vector<T>& v) {
  return absl::StrCat("{", absl::StrJoin(v, ","), "}");
}

}  // namespace mailroom
