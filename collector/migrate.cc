#include "collector/migrate.h"

#include <algorithm>
#include <functional>
#include <pqxx/pqxx>
#include <set>

#include "absl/strings/str_cat.h"

namespace mailroom {
namespace {

// "mailroom" in ASCII: the advisory lock key that serialises migrations.
constexpr int64_t kMigrateLockKey = 0x6d61696c726f6f6d;

constexpr char kCreateTable[] =
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " version INT PRIMARY KEY, name TEXT NOT NULL,"
    " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())";

// Holds the migration lock for the lifetime of the object.
class LockedConnection {
 public:
  explicit LockedConnection(const std::string& url) : conn_(url) {
    pqxx::nontransaction tx(conn_);
    tx.exec("SET client_min_messages = warning");
    tx.exec(absl::StrCat("SELECT pg_advisory_lock(", kMigrateLockKey, ")"));
    tx.exec(kCreateTable);
  }
  ~LockedConnection() {
    try {
      pqxx::nontransaction tx(conn_);
      tx.exec(absl::StrCat("SELECT pg_advisory_unlock(", kMigrateLockKey, ")"));
    } catch (...) {
      // The lock dies with the session anyway.
    }
  }
  pqxx::connection& conn() { return conn_; }

 private:
  pqxx::connection conn_;
};

std::set<int> Applied(pqxx::connection& conn) {
  pqxx::nontransaction tx(conn);
  std::set<int> versions;
  for (const auto& row : tx.exec("SELECT version FROM schema_migrations")) {
    versions.insert(row[0].as<int>());
  }
  return versions;
}

absl::Status DbError(const std::string& what, const std::exception& e) {
  return absl::UnavailableError(absl::StrCat(what, ": ", e.what()));
}

}  // namespace

namespace {

enum class Direction { kUp, kDown };

// Runs the `direction` script of every migration that `select(version, applied)` picks, in
// order (ascending up, descending down), each in its own transaction together with its row in
// schema_migrations, under the migration lock. Up and down differ only in these three places.
absl::StatusOr<std::vector<int>> Apply(const std::string& url, std::vector<Migration> ordered,
                                       Direction direction,
                                       const std::function<bool(int, bool)>& select) {
  std::sort(ordered.begin(), ordered.end(), [direction](const Migration& a, const Migration& b) {
    return direction == Direction::kUp ? a.version < b.version : a.version > b.version;
  });
  std::vector<int> done;
  std::string current = "connect";
  try {
    LockedConnection locked(url);
    const std::set<int> applied = Applied(locked.conn());
    for (const Migration& m : ordered) {
      if (!select(m.version, applied.count(m.version) > 0)) continue;
      current = absl::StrCat(direction == Direction::kUp ? "migration " : "reverting migration ",
                             m.version, "_", m.name);
      pqxx::work tx(locked.conn());
      if (direction == Direction::kUp) {
        tx.exec(m.up);
        tx.exec_params("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                       m.version, std::string(m.name));
      } else {
        tx.exec(m.down);
        tx.exec_params("DELETE FROM schema_migrations WHERE version = $1", m.version);
      }
      tx.commit();
      done.push_back(m.version);
    }
  } catch (const pqxx::sql_error& e) {
    return absl::FailedPreconditionError(absl::StrCat(current, " failed: ", e.what()));
  } catch (const std::exception& e) {
    return DbError(current, e);
  }
  return done;
}

}  // namespace

absl::StatusOr<std::vector<int>> MigrateUp(const std::string& url,
                                           const std::vector<Migration>& migrations,
                                           std::optional<int> target) {
  return Apply(url, migrations, Direction::kUp, [target](int version, bool applied) {
    return !applied && (!target.has_value() || version <= *target);
  });
}

absl::StatusOr<std::vector<int>> MigrateDown(const std::string& url,
                                             const std::vector<Migration>& migrations,
                                             int target) {
  return Apply(url, migrations, Direction::kDown,
               [target](int version, bool applied) { return applied && version > target; });
}

absl::StatusOr<std::vector<int>> AppliedVersions(const std::string& url) {
  try {
    pqxx::connection conn(url);
    pqxx::nontransaction tx(conn);
    auto exists = tx.exec1("SELECT to_regclass('schema_migrations') IS NOT NULL");
    std::vector<int> versions;
    if (!exists[0].as<bool>()) return versions;
    for (const auto& row : tx.exec("SELECT version FROM schema_migrations ORDER BY version")) {
      versions.push_back(row[0].as<int>());
    }
    return versions;
  } catch (const std::exception& e) {
    return DbError("reading schema_migrations", e);
  }
}

absl::Status SetChannel(const std::string& url, const std::string& channel) {
  try {
    pqxx::connection conn(url);
    pqxx::work tx(conn);
    tx.exec_params("UPDATE mailroom_settings SET channel = $1", channel);
    tx.commit();
  } catch (const pqxx::sql_error& e) {
    return absl::InvalidArgumentError(absl::StrCat("setting the channel: ", e.what()));
  } catch (const std::exception& e) {
    return DbError("setting the channel", e);
  }
  return absl::OkStatus();
}

}  // namespace mailroom
