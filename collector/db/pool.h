#pragma once

// The collector's stores reach PostgreSQL through this layer only: a Pool of libpqxx
// connections, lent to one call at a time; on a lent Connection, Transactions and lone
// statements that carry their own timeouts and pinned search path (db/pg_tx.h), so that the
// pool's URL may be a transaction-pooling pgbouncer; and every libpqxx exception turned into a
// Status by the one mapping of db/pg_status.h. The connections that need a server session of
// their own (LISTEN, the retention and migration turns) are not pooled and do not come here.

#include <pqxx/pqxx>

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collector/db/pg_status.h"
#include "collector/db/pg_tx.h"

namespace mailroom {

// What a Pool connects to and how.
struct PoolOptions {
  std::string url;      // a libpq URL or key=value string; may point at pgbouncer
  int size = 4;         // at most this many connections, each opened on first need
  TxTimeouts timeouts;  // of every transaction and lone statement
};

// One argument of Connection::CallAlone, written as an SQL literal of its type: text (quoted
// by the connection), integer, bigint, boolean, or a bigint that may be NULL.
class LoneArg {
 public:
  LoneArg(std::string text) : literal_(std::move(text)), type_("text"), quoted_(true) {}
  LoneArg(const char* text) : LoneArg(std::string(text)) {}
  LoneArg(int32_t n) : literal_(std::to_string(n)), type_("integer") {}
  LoneArg(int64_t n) : literal_(std::to_string(n)), type_("bigint") {}
  LoneArg(bool b) : literal_(b ? "true" : "false"), type_("boolean") {}
  LoneArg(std::optional<int64_t> n)
      : literal_(n.has_value() ? std::to_string(*n) : "NULL"), type_("bigint") {}

 private:
  friend class Connection;
  std::string literal_;
  const char* type_;
  bool quoted_ = false;
};

// A connection of a Pool, lent to one call of Pool::Run for the call's duration. Not
// thread-safe (one call uses it).
class Connection {
 public:
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs `sql` (one statement) alone in autocommit under the pool's timeouts and search path:
  // StatementPrefix and `sql` as one simple query, one round trip, so no transaction (nor any
  // lock it takes) stays open between round trips. Throws libpqxx's exceptions.
  pqxx::result ExecAlone(const std::string& sql);
  // Calls mailroom's function `function` with `args` as ExecAlone does, one statement alone in
  // autocommit: SELECT * FROM mailroom.FUNCTION(arg::type, ...), each argument a literal of its
  // type (a lone statement has no parameters). Throws libpqxx's exceptions.
  pqxx::result CallAlone(const std::string& function, std::initializer_list<LoneArg> args);

 private:
  friend class Pool;
  friend class Transaction;
  Connection(pqxx::connection& conn, const std::string& begin, const std::string& prefix)
      : conn_(conn), begin_(begin), prefix_(prefix) {}

  pqxx::connection& conn_;
  const std::string& begin_;   // BeginCommand of the pool's timeouts
  const std::string& prefix_;  // StatementPrefix of the pool's timeouts
};

// A READ COMMITTED read-write transaction on a lent Connection, begun with the pool's
// BeginCommand (its timeouts and search path set in the round trip of its BEGIN). commit()
// commits it; destroyed without a commit (an error, an early return), it is rolled back, so
// the connection goes back to the pool outside any transaction. Its methods are named and
// behave as pqxx::work's (and throw libpqxx's exceptions). One at a time on a Connection.
class Transaction {
 public:
  explicit Transaction(Connection& c);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  pqxx::result exec(const std::string& sql) {
    return Guarded([&] { return tx_.exec(sql); });
  }
  pqxx::row exec1(const std::string& sql) {
    return Guarded([&] { return tx_.exec1(sql); });
  }
  template <typename... Args>
  pqxx::result exec_params(const std::string& sql, Args&&... args) {
    return Guarded([&] { return tx_.exec_params(sql, std::forward<Args>(args)...); });
  }
  template <typename... Args>
  pqxx::row exec_params1(const std::string& sql, Args&&... args) {
    return Guarded([&] { return tx_.exec_params1(sql, std::forward<Args>(args)...); });
  }
  // Commits. Throws if a statement of the transaction had failed (PostgreSQL would answer the
  // COMMIT with a ROLLBACK: SQLSTATE 25P02, nothing committed) or the commit does (a lost
  // connection leaves its outcome unknown).
  void commit();

 private:
  // Runs a statement of the transaction; a failed one fails the transaction.
  template <typename Statement>
  auto Guarded(Statement statement) -> decltype(statement()) {
    CheckOpen();
    try {
      return statement();
    } catch (...) {
      failed_ = true;
      throw;
    }
  }
  void CheckOpen() const;
  void Rollback() noexcept;

  pqxx::connection& conn_;
  // A libpqxx "transaction" that adds no BEGIN of its own: this class sends BEGIN, COMMIT and
  // ROLLBACK itself (libpqxx's public API has no transaction with a BEGIN of one's choosing).
  pqxx::nontransaction tx_;
  bool open_ = false;
  bool failed_ = false;  // a statement failed: PostgreSQL aborted the transaction
};

// A pool of at most `size` connections to one URL, opened on first need and reopened after a
// failure that may have broken them; idle connections are kept open. Thread-safe: calls run
// concurrently, each on a connection of its own, up to `size` at once; more wait their turn.
class Pool {
 public:
  explicit Pool(PoolOptions options);
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Runs `fn(Connection&)` on a connection of the pool: an idle one, else a new one while fewer
  // than `size` are open, else the next one given back, waited for until `deadline` (then
  // kUnavailable, and `fn` does not run). `fn` returns a T or an absl::StatusOr<T>. A libpqxx
  // exception out of `fn` (or out of opening the connection) becomes the Status PgFailureOf
  // maps it to, prefixed with `what` ("renewing leases"), and the connection is closed when
  // the mapping says so or it is no longer open. No exception leaves Run.
  template <typename T, typename Fn>
  absl::StatusOr<T> Run(const char* what, Fn&& fn, absl::Time deadline = absl::InfiniteFuture());
  // As Run, for an `fn` that returns nothing.
  template <typename Fn>
  absl::Status Do(const char* what, Fn&& fn, absl::Time deadline = absl::InfiniteFuture()) {
    return Run<bool>(
               what,
               [&fn](Connection& c) {
                 fn(c);
                 return true;
               },
               deadline)
        .status();
  }

  // How many connections are open (idle or lent) or being opened.
  int open() const;

 private:
  // An idle connection, or null with the right to open one; kUnavailable at `deadline`.
  absl::StatusOr<std::unique_ptr<pqxx::connection>> Take(const char* what, absl::Time deadline);
  // Gives `conn` back after a call: kept idle if `keep` and still open, else closed.
  void Give(std::unique_ptr<pqxx::connection> conn, bool keep);
  bool CanTake() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PoolOptions options_;
  const std::string begin_;   // BeginCommand(options_.timeouts)
  const std::string prefix_;  // StatementPrefix(options_.timeouts)
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<pqxx::connection>> idle_ ABSL_GUARDED_BY(mu_);
  int open_ ABSL_GUARDED_BY(mu_) = 0;
};

template <typename T, typename Fn>
absl::StatusOr<T> Pool::Run(const char* what, Fn&& fn, absl::Time deadline) {
  absl::StatusOr<std::unique_ptr<pqxx::connection>> taken = Take(what, deadline);
  if (!taken.ok()) return taken.status();
  std::unique_ptr<pqxx::connection> conn = *std::move(taken);
  absl::StatusOr<T> result = absl::UnknownError(what);
  bool keep = true;
  try {
    if (conn == nullptr) conn = std::make_unique<pqxx::connection>(options_.url);
    Connection lent(*conn, begin_, prefix_);
    result = fn(lent);
  } catch (const std::exception& e) {
    PgFailure failure = PgFailureOf(what, e);
    result = std::move(failure.status);
    keep = failure.keep_connection;
  }
  Give(std::move(conn), keep);
  return result;
}

}  // namespace mailroom
