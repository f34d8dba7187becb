#include "collector/migrate.h"

#include <algorithm>
#include <functional>
#include <map>
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
    " applied_at TIMESTAMPTZ NOT NULL DEFAULT now());"
    "CREATE TABLE IF NOT EXISTS schema_sources ("
    " name TEXT PRIMARY KEY, checksum TEXT NOT NULL,"
    " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())";

constexpr char kChecksum[] = "SELECT encode(sha256(convert_to($1, 'UTF8')), 'hex')";

bool IsView(const Source& s) { return std::string(s.name).rfind("views/", 0) == 0; }

// "views/delivery_states.sql" -> "delivery_states".
std::string ViewName(const Source& s) {
  std::string name = std::string(s.name).substr(6);
  return name.substr(0, name.size() - 4);
}

// The checksum `schema_sources` holds for each source applied.
std::map<std::string, std::string> StoredChecksums(pqxx::transaction_base& tx) {
  std::map<std::string, std::string> stored;
  if (!tx.exec1("SELECT to_regclass('schema_sources') IS NOT NULL")[0].as<bool>()) return stored;
  for (const auto& row : tx.exec("SELECT name, checksum FROM schema_sources")) {
    stored[row[0].as<std::string>()] = row[1].as<std::string>();
  }
  return stored;
}

// The sources, functions first, each whose checksum differs from `stored`.
std::vector<const Source*> Changed(pqxx::transaction_base& tx, const std::vector<Source>& sources,
                                   const std::map<std::string, std::string>& stored) {
  std::vector<const Source*> ordered;
  for (const Source& s : sources) ordered.push_back(&s);
  std::stable_sort(ordered.begin(), ordered.end(), [](const Source* a, const Source* b) {
    return !IsView(*a) && IsView(*b);
  });
  std::vector<const Source*> changed;
  for (const Source* s : ordered) {
    auto it = stored.find(s->name);
    const std::string sum = tx.exec_params1(kChecksum, std::string(s->sql))[0].as<std::string>();
    if (it == stored.end() || it->second != sum) changed.push_back(s);
  }
  return changed;
}

// "functions/mailroom_ack.sql" -> "mailroom_ack": each function file defines the function (or
// overloads) of its name.
std::string FunctionName(const Source& s) {
  const std::string path(s.name);
  const std::string file = path.substr(path.find('/') + 1);
  return file.substr(0, file.size() - 4);
}

// Each function of `name` in the current schema, by signature ("f(integer,text[])"), with its
// catalogue row version (xmin: a CREATE OR REPLACE writes a new one).
std::map<std::string, std::string> Overloads(pqxx::transaction_base& tx, const std::string& name) {
  std::map<std::string, std::string> found;
  for (const auto& row : tx.exec_params(
           "SELECT p.oid::regprocedure::text, p.xmin::text FROM pg_proc p"
           " WHERE p.proname = $1 AND p.pronamespace = current_schema()::regnamespace",
           name)) {
    found[row[0].as<std::string>()] = row[1].as<std::string>();
  }
  return found;
}

// Applies a function file so that the functions of its name are exactly those it defines. CREATE
// OR REPLACE cannot rename an input parameter or change the return type (42P13): the old function
// is dropped first. A changed parameter type creates another overload: the overloads the file did
// not create or replace are dropped after it (a call that fits both would be ambiguous).
void ApplyFunction(pqxx::dbtransaction& tx, const Source& s) {
  const std::string name = FunctionName(s);
  const std::map<std::string, std::string> before = Overloads(tx, name);
  try {
    pqxx::subtransaction sub(tx, "function_source");
    sub.exec(s.sql);
    sub.commit();
  } catch (const pqxx::sql_error& e) {
    if (e.sqlstate() != "42P13") throw;
    for (const auto& [signature, version] : before) tx.exec("DROP FUNCTION " + signature);
    tx.exec(s.sql);
  }
  for (const auto& [signature, version] : Overloads(tx, name)) {
    auto it = before.find(signature);
    if (it != before.end() && it->second == version) tx.exec("DROP FUNCTION " + signature);
  }
}

// Applies the changed sources in one transaction; returns their names. `current` names the
// file being applied, for errors.
std::vector<std::string> ApplySources(pqxx::connection& conn, const std::vector<Source>& sources,
                                      std::string* current) {
  pqxx::work tx(conn);
  tx.exec("SET LOCAL check_function_bodies = off");
  std::vector<std::string> done;
  for (const Source* s : Changed(tx, sources, StoredChecksums(tx))) {
    *current = absl::StrCat("source ", s->name);
    // A view is created afresh: CREATE OR REPLACE cannot drop, rename or retype its columns.
    if (IsView(*s)) {
      tx.exec("DROP VIEW IF EXISTS " + tx.quote_name(ViewName(*s)));
      tx.exec(s->sql);
    } else {
      ApplyFunction(tx, *s);
    }
    tx.exec_params(
        "INSERT INTO schema_sources (name, checksum) VALUES ($1, encode(sha256(convert_to($2,"
        " 'UTF8')), 'hex')) ON CONFLICT (name) DO UPDATE"
        " SET checksum = EXCLUDED.checksum, applied_at = now()",
        std::string(s->name), std::string(s->sql));
    done.push_back(s->name);
  }
  tx.commit();
  return done;
}

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

// Refuses a database whose versions predate the baseline (the oldest migration) without it.
absl::Status CheckBaseline(const std::set<int>& applied, const std::vector<Migration>& ordered) {
  if (applied.empty() || ordered.empty()) return absl::OkStatus();
  const Migration& baseline = *std::min_element(
      ordered.begin(), ordered.end(),
      [](const Migration& a, const Migration& b) { return a.version < b.version; });
  if (*applied.begin() >= baseline.version || applied.count(baseline.version) > 0) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "the database is at schema version ", *applied.rbegin(), ", older than version ",
      baseline.version, " (", baseline.name,
      ") this release starts from: migrate it with the previous release first (its "
      "`collector migrate` brings it to version ",
      baseline.version, "), then run this one"));
}

// Runs the `direction` script of every migration that `select(version, applied)` picks, in
// order (ascending up, descending down), each in its own transaction together with its row in
// schema_migrations, under the migration lock. Up and down differ only in these places. Up
// then applies the changed `sources` once no migration is pending.
absl::StatusOr<std::vector<int>> Apply(const std::string& url, std::vector<Migration> ordered,
                                       Direction direction,
                                       const std::function<bool(int, bool)>& select,
                                       const std::vector<Source>* sources = nullptr,
                                       std::vector<std::string>* sources_applied = nullptr) {
  std::sort(ordered.begin(), ordered.end(), [direction](const Migration& a, const Migration& b) {
    return direction == Direction::kUp ? a.version < b.version : a.version > b.version;
  });
  std::vector<int> done;
  std::string current = "connect";
  try {
    LockedConnection locked(url);
    std::set<int> applied = Applied(locked.conn());
    if (direction == Direction::kUp) {
      absl::Status baseline = CheckBaseline(applied, ordered);
      if (!baseline.ok()) return baseline;
    }
    for (const Migration& m : ordered) {
      if (!select(m.version, applied.count(m.version) > 0)) continue;
      current = absl::StrCat(direction == Direction::kUp ? "migration " : "reverting migration ",
                             m.version, "_", m.name);
      pqxx::work tx(locked.conn());
      if (direction == Direction::kUp) {
        tx.exec(m.up);
        tx.exec_params("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                       m.version, std::string(m.name));
        applied.insert(m.version);
      } else {
        tx.exec(m.down);
        tx.exec_params("DELETE FROM schema_migrations WHERE version = $1", m.version);
        tx.exec("DELETE FROM schema_sources");
      }
      tx.commit();
      done.push_back(m.version);
    }
    const bool current_schema = std::all_of(ordered.begin(), ordered.end(), [&](const Migration& m) {
      return applied.count(m.version) > 0;
    });
    if (sources != nullptr && current_schema) {
      std::vector<std::string> names = ApplySources(locked.conn(), *sources, &current);
      if (sources_applied != nullptr) *sources_applied = std::move(names);
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
                                           std::optional<int> target,
                                           const std::vector<Source>& sources,
                                           std::vector<std::string>* sources_applied) {
  if (sources_applied != nullptr) sources_applied->clear();
  return Apply(
      url, migrations, Direction::kUp,
      [target](int version, bool applied) {
        return !applied && (!target.has_value() || version <= *target);
      },
      &sources, sources_applied);
}

absl::StatusOr<std::vector<int>> MigrateDown(const std::string& url,
                                             const std::vector<Migration>& migrations,
                                             int target) {
  return Apply(url, migrations, Direction::kDown,
               [target](int version, bool applied) { return applied && version > target; });
}

absl::StatusOr<std::vector<std::string>> PendingSources(const std::string& url,
                                                        const std::vector<Source>& sources) {
  try {
    pqxx::connection conn(url);
    pqxx::nontransaction tx(conn);
    std::vector<std::string> names;
    for (const Source* s : Changed(tx, sources, StoredChecksums(tx))) names.push_back(s->name);
    return names;
  } catch (const std::exception& e) {
    return DbError("reading schema_sources", e);
  }
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
