#include "collector/db/pool.h"

#include "absl/strings/str_cat.h"

namespace mailroom {

pqxx::result Connection::ExecAlone(const std::string& sql) {
  pqxx::nontransaction tx(conn_);
  return tx.exec(prefix_ + sql);
}

pqxx::result Connection::CallAlone(const std::string& function,
                                   std::initializer_list<LoneArg> args) {
  std::string sql = absl::StrCat("SELECT * FROM mailroom.", function, "(");
  const char* comma = "";
  for (const LoneArg& a : args) {
    absl::StrAppend(&sql, comma, a.quoted_ ? conn_.quote(a.literal_) : a.literal_, "::", a.type_);
    comma = ", ";
  }
  sql += ")";
  return ExecAlone(sql);
}

Transaction::Transaction(Connection& c) : conn_(c.conn_), tx_(c.conn_) {
  open_ = true;
  try {
    tx_.exec(c.begin_);
  } catch (...) {
    // BEGIN may have run and a SET LOCAL after it failed: the session is in a failed
    // transaction, which must not go back to the pool.
    Rollback();
    throw;
  }
}

Transaction::~Transaction() { Rollback(); }

void Transaction::CheckOpen() const {
  if (!open_) throw pqxx::usage_error("statement after the end of a transaction");
}

void Transaction::commit() {
  CheckOpen();
  if (failed_) {
    Rollback();
    throw pqxx::sql_error("the transaction had failed and was rolled back", "COMMIT", "25P02");
  }
  open_ = false;
  tx_.exec("COMMIT");
}

void Transaction::Rollback() noexcept {
  if (!open_) return;
  open_ = false;
  // A broken connection has no transaction left to end (and the pool closes it).
  if (!conn_.is_open()) return;
  try {
    tx_.exec("ROLLBACK");
  } catch (...) {
    // The pool closes a connection whose call failed in a way that may have broken it.
  }
}

Pool::Pool(PoolOptions options)
    : options_(std::move(options)), begin_(BeginCommand(options_.timeouts)),
      prefix_(StatementPrefix(options_.timeouts)) {}

int Pool::open() const {
  absl::MutexLock lock(&mu_);
  return open_;
}

bool Pool::CanTake() const { return !idle_.empty() || open_ < options_.size; }

absl::StatusOr<std::unique_ptr<pqxx::connection>> Pool::Take(const char* what,
                                                             absl::Time deadline) {
  std::unique_ptr<pqxx::connection> conn;
  {
    absl::MutexLock lock(&mu_);
    const absl::Condition can_take(this, &Pool::CanTake);
    if (deadline == absl::InfiniteFuture()) {
      mu_.Await(can_take);
    } else if (!mu_.AwaitWithDeadline(can_take, deadline)) {
      return absl::UnavailableError(
          absl::StrCat(what, ": all ", options_.size, " database connections are busy; retry"));
    }
    if (idle_.empty()) {
      ++open_;  // opened by the caller, outside the lock
      return conn;
    }
    conn = std::move(idle_.back());
    idle_.pop_back();
  }
  // Closed since it was given back (libpqxx noticed the server end it): open a new one.
  if (!conn->is_open()) conn.reset();
  return conn;
}

void Pool::Give(std::unique_ptr<pqxx::connection> conn, bool keep) {
  if (conn != nullptr && (!keep || !conn->is_open())) conn.reset();  // closed outside the lock
  absl::MutexLock lock(&mu_);
  if (conn == nullptr) {
    --open_;
  } else {
    idle_.push_back(std::move(conn));
  }
}

}  // namespace mailroom
