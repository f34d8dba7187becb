#include "collector/schema/migrate.h"

#include <algorithm>
#include <functional>
#include <map>
#include <pqxx/pqxx>
#include <set>
#include <stdexcept>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mailroom {
namespace {

// mailroom's schema and the table whose lock is the migration turn: created by whichever
// `collector migrate` comes first (two at once may race to create them: the loser retries).
constexpr char kCreateSchema[] = "CREATE SCHEMA IF NOT EXISTS mailroom;"
                                 "CREATE TABLE IF NOT EXISTS mailroom.mailroom_migration_turn ()";

// Every statement of a migration runs with this search path: mailroom's schema first (what a
// migration creates goes there; nobody else may create in it), then the system catalogue, then
// the session's temporary schema. Never a schema others may create in: an operator or function
// planted there with a better-matching signature would run with the migrations' rights.
constexpr char kPinSearchPath[] = "SET search_path = mailroom, pg_catalog, pg_temp";

// A migration's statements wait at most this long for a lock (a DDL statement queued behind a
// transaction that holds its table would make every later statement on that table queue behind
// it): the migration then fails with PostgreSQL's lock timeout, naming itself, and is run again.
constexpr char kMigrationLockTimeout[] = "SET lock_timeout = '30s'";

// Who owns the schema `mailroom`, and whether PUBLIC may create in it: the schema must be the
// migrations' role's (or a role it belongs to), with CREATE for no one else.
constexpr char kSchemaOwner[] =
    "SELECT n.nspowner::regrole::text,"
    "       n.nspowner = (SELECT r.oid FROM pg_roles r WHERE r.rolname = current_user)"
    "       OR EXISTS (SELECT 1 FROM pg_auth_members m WHERE m.roleid = n.nspowner"
    "                     AND m.member = (SELECT r.oid FROM pg_roles r"
    "                                      WHERE r.rolname = current_user)),"
    "       coalesce(has_schema_privilege('public', n.oid, 'CREATE'), false)"
    "  FROM pg_namespace n WHERE n.nspname = 'mailroom'";

// The schemas that hold mailroom's objects from before they had a schema of their own: read from
// the catalogue, never through a search path (a table of the same name that another role
// created elsewhere is not mailroom's): the schemas other than `mailroom` with a table
// `schema_migrations` owned by the migrations' role or a role it is a member of (by a grant, not
// by being a superuser: a superuser's migrations must not take another role's tables for
// mailroom's), with that owner, whose objects alone are moved.
constexpr char kOldSchemas[] =
    "SELECT n.nspname, c.relowner::oid::text FROM pg_class c"
    "  JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE c.relname = 'schema_migrations' AND c.relkind = 'r' AND n.nspname <> 'mailroom'"
    "   AND (c.relowner = (SELECT r.oid FROM pg_roles r WHERE r.rolname = current_user)"
    "        OR EXISTS (SELECT 1 FROM pg_auth_members m WHERE m.roleid = c.relowner"
    "                      AND m.member = (SELECT r.oid FROM pg_roles r"
    "                                       WHERE r.rolname = current_user)))"
    "   AND to_regclass('mailroom.schema_migrations') IS NULL";

// Moves every object of mailroom's, owned by the role whose oid is the setting
// mailroom.move_owner, from the schema named by the setting mailroom.move_from into
// `mailroom`: its tables (with their indexes, constraints, triggers, owned sequences and grants),
// its standalone sequences, types, view and functions, the version tables first. Each role that
// held a right on one of those tables gets USAGE on `mailroom`, so that it keeps reaching them.
// Run once, in the migration turn, before any pending migration; objects that do not exist there
// are skipped, and so are objects of the same names that another role owns.
constexpr char kMoveIntoOwnSchema[] = R"SQL(
DO $move$
DECLARE
    v_old  text := current_setting('mailroom.move_from');
    v_ns   oid := (SELECT n.oid FROM pg_namespace n WHERE n.nspname = v_old);
    v_own  oid := current_setting('mailroom.move_owner')::oid;
    v_name text;
    v_oid  oid;
    v_role text;
    v_tables text[] := ARRAY[
        'schema_migrations', 'schema_sources',
        'accounts', 'tokens', 'budget_grants', 'budget_months', 'budget_subscriptions',
        'consumer_groups', 'deliveries', 'delivery_counts', 'group_budgets', 'group_usage',
        'lease_batches', 'mailroom_address_requests', 'mailroom_collectors', 'mailroom_settings',
        'mailroom_signups', 'reputation_hourly', 'sns_messages', 'soft_bounces', 'suppressions'];
BEGIN
    FOR v_role IN
        SELECT DISTINCT a.grantee::regrole::text
          FROM pg_class c, aclexplode(c.relacl) a
         WHERE c.relnamespace = v_ns AND c.relname = ANY (v_tables) AND c.relowner = v_own
           AND a.grantee <> 0 AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT USAGE ON SCHEMA mailroom TO %s', v_role);
    END LOOP;
    FOREACH v_name IN ARRAY v_tables LOOP
        IF EXISTS (SELECT 1 FROM pg_class c WHERE c.relnamespace = v_ns AND c.relname = v_name
                      AND c.relkind = 'r' AND c.relowner = v_own) THEN
            EXECUTE format('ALTER TABLE %I.%I SET SCHEMA mailroom', v_old, v_name);
        END IF;
    END LOOP;
    FOREACH v_name IN ARRAY ARRAY['mailroom_idle_collectors', 'mailroom_collection_xact'] LOOP
        IF EXISTS (SELECT 1 FROM pg_class c WHERE c.relnamespace = v_ns AND c.relname = v_name
                      AND c.relkind = 'S' AND c.relowner = v_own) THEN
            EXECUTE format('ALTER SEQUENCE %I.%I SET SCHEMA mailroom', v_old, v_name);
        END IF;
    END LOOP;
    FOREACH v_name IN ARRAY ARRAY['account_status', 'delivery_state', 'token_action'] LOOP
        IF EXISTS (SELECT 1 FROM pg_type t WHERE t.typnamespace = v_ns AND t.typname = v_name
                      AND t.typtype = 'e' AND t.typowner = v_own) THEN
            EXECUTE format('ALTER TYPE %I.%I SET SCHEMA mailroom', v_old, v_name);
        END IF;
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_class c WHERE c.relnamespace = v_ns AND c.relname = 'delivery_states'
                  AND c.relkind = 'v' AND c.relowner = v_own) THEN
        EXECUTE format('ALTER VIEW %I.delivery_states SET SCHEMA mailroom', v_old);
    END IF;
    -- mailroom's functions of that time (the function files replace them afterwards).
    FOR v_oid IN
        SELECT p.oid FROM pg_proc p
         WHERE p.pronamespace = v_ns AND p.proowner = v_own
           AND (p.proname LIKE 'mailroom\_%' OR p.proname IN (
                'trg_after_token_consumed', 'trg_after_token_inserted', 'trg_before_account_insert',
                'trg_before_account_status_change', 'trg_before_token_insert_limits',
                'trg_deliveries_count_insert', 'trg_deliveries_count_update',
                'trg_wake_collector'))
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET SCHEMA mailroom', v_oid::regprocedure);
    END LOOP;
END
$move$)SQL";

constexpr char kCreateTable[] = "CREATE TABLE IF NOT EXISTS mailroom.schema_migrations ("
                                " version INT PRIMARY KEY, name TEXT NOT NULL,"
                                " applied_at TIMESTAMPTZ NOT NULL DEFAULT now());"
                                "CREATE TABLE IF NOT EXISTS mailroom.schema_sources ("
                                " name TEXT PRIMARY KEY, checksum TEXT NOT NULL,"
                                " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())";

// PostgreSQL lets PUBLIC execute every new function: mailroom's are executed by mailroom's roles,
// and the application's interface only through the grants of mailroom.grant_application. Left
// to PUBLIC: pgcrypto's functions (the extension's) and mailroom_random_code, which the
// tokens' defaults call as the role that inserts (an application that inserts tokens itself).
// Only functions PUBLIC may still execute are touched, so unchanged functions keep their
// catalogue rows.
constexpr char kRevokePublicExecute[] =
    "DO $$ DECLARE f regprocedure; BEGIN"
    " FOR f IN SELECT p.oid FROM pg_proc p"
    "   WHERE p.pronamespace = 'mailroom'::regnamespace"
    "     AND p.proname <> 'mailroom_random_code'"
    "     AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass"
    "                        AND d.objid = p.oid AND d.deptype = 'e')"
    "     AND has_function_privilege('public', p.oid, 'EXECUTE')"
    " LOOP EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f); END LOOP; END $$";

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
  if (!tx.exec1("SELECT to_regclass('mailroom.schema_sources') IS NOT NULL")[0].as<bool>()) {
    return stored;
  }
  for (const auto& row : tx.exec("SELECT name, checksum FROM mailroom.schema_sources")) {
    stored[row[0].as<std::string>()] = row[1].as<std::string>();
  }
  return stored;
}

// The sources, functions first, each whose checksum differs from `stored`.
std::vector<const Source*> Changed(pqxx::transaction_base& tx, const std::vector<Source>& sources,
                                   const std::map<std::string, std::string>& stored) {
  std::vector<const Source*> ordered;
  for (const Source& s : sources) ordered.push_back(&s);
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const Source* a, const Source* b) { return !IsView(*a) && IsView(*b); });
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

// Each function of `name` in mailroom's schema, by signature ("f(integer,text[])"), with its
// catalogue row version (xmin: a CREATE OR REPLACE writes a new one).
std::map<std::string, std::string> Overloads(pqxx::transaction_base& tx, const std::string& name) {
  std::map<std::string, std::string> found;
  for (const auto& row :
       tx.exec_params("SELECT p.oid::regprocedure::text, p.xmin::text FROM pg_proc p"
                      " WHERE p.proname = $1 AND p.pronamespace = 'mailroom'::regnamespace",
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

// The GRANTs that give again the rights others than its owner hold on view `name` (the
// application role's SELECT from grant_application, an operator's own): DROP VIEW takes them.
std::vector<std::string> ViewGrants(pqxx::transaction_base& tx, const std::string& name) {
  std::vector<std::string> grants;
  for (const auto& row : tx.exec_params(
           "SELECT format('GRANT %s ON mailroom.%I TO %s%s', a.privilege_type, c.relname,"
           "              CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END,"
           "              CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)"
           "  FROM pg_class c, aclexplode(c.relacl) a"
           " WHERE c.relname = $1 AND c.relnamespace = 'mailroom'::regnamespace"
           "   AND a.grantee <> c.relowner",
           name)) {
    grants.push_back(row[0].as<std::string>());
  }
  return grants;
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
    // The rights given on it are given again.
    if (IsView(*s)) {
      const std::vector<std::string> grants = ViewGrants(tx, ViewName(*s));
      tx.exec("DROP VIEW IF EXISTS mailroom." + tx.quote_name(ViewName(*s)));
      tx.exec(s->sql);
      for (const std::string& grant : grants) tx.exec(grant);
    } else {
      ApplyFunction(tx, *s);
    }
    tx.exec_params("INSERT INTO mailroom.schema_sources (name, checksum) VALUES ($1, "
                   "encode(sha256(convert_to($2,"
                   " 'UTF8')), 'hex')) ON CONFLICT (name) DO UPDATE"
                   " SET checksum = EXCLUDED.checksum, applied_at = now()",
                   std::string(s->name), std::string(s->sql));
    done.push_back(s->name);
  }
  tx.exec(kRevokePublicExecute);
  tx.commit();
  return done;
}

// A database whose layout mailroom will not migrate (whose schema `mailroom` is not its own).
class SchemaRefused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Creates mailroom's schema and the migration turn's table unless they exist. Two first
// migrations at once both see them missing and one loses the race on the catalogue's unique
// index (23505) or finds the schema just created (42P06): it tries again and finds them.
void CreateSchema(pqxx::connection& conn) {
  for (int attempt = 1;; ++attempt) {
    try {
      pqxx::nontransaction(conn).exec(kCreateSchema);
      return;
    } catch (const pqxx::sql_error& e) {
      if (attempt >= 3 || (e.sqlstate() != "23505" && e.sqlstate() != "42P06")) throw;
    }
  }
}

// What a role refused the migration turn (permission denied for the database, the schema or
// the turn's table) needs, naming the role and the database where they can be read.
std::string MigrationRightsHint(const std::string& url) {
  std::string role = "ROLE", database = "DATABASE";
  try {
    pqxx::connection conn(url);
    pqxx::row r = pqxx::nontransaction(conn).exec1("SELECT current_user, current_database()");
    // As the operator would type them: quoted only where SQL needs it.
    auto name = [&conn](const std::string& n) {
      const bool plain = !n.empty() && std::all_of(n.begin(), n.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
      }) && !(n[0] >= '0' && n[0] <= '9');
      return plain ? n : conn.quote_name(n);
    };
    role = name(r[0].as<std::string>());
    database = name(r[1].as<std::string>());
  } catch (const std::exception&) {
    // The hint keeps its placeholders.
  }
  return absl::StrCat(
      ": collector migrate runs as the role that owns the schema mailroom, or creates it: the "
      "first run needs CREATE on the database (as its owner: GRANT CREATE ON DATABASE ",
      database, " TO ", role,
      "), later runs need to own the schema (ALTER SCHEMA mailroom OWNER TO ", role,
      ", as its owner or a superuser); run it as that role (MAILROOM_DIRECT_DATABASE_URL, or "
      "MAILROOM_DATABASE_URL)");
}

// Who holds the migration turn, for the error of one that waited in vain.
std::string TurnHolder(pqxx::connection& conn) {
  pqxx::nontransaction tx(conn);
  pqxx::result r = tx.exec(
      "SELECT a.pid, coalesce(a.application_name, ''), a.xact_start FROM pg_locks l"
      " JOIN pg_stat_activity a ON a.pid = l.pid"
      " WHERE l.relation = 'mailroom.mailroom_migration_turn'::regclass AND l.granted");
  if (r.empty()) return "another session";
  return absl::StrCat("the session of pid ", r[0][0].c_str(), " (", r[0][1].c_str(), ", since ",
                      r[0][2].c_str(), ")");
}

// Holds the migration turn for the lifetime of the object: a second connection whose open
// transaction has locked mailroom.mailroom_migration_turn (EXCLUSIVE mode needs UPDATE, DELETE
// or TRUNCATE on the table, which only mailroom's roles have; an advisory lock, which any role
// may take, would let any role that can connect hang every migration). The lock takes no
// transaction id, so the idle transaction holds back no vacuum. The migrations run on `conn()`,
// whose search path is mailroom's schema (then the old one, while objects are left there).
class LockedConnection {
 public:
  // `baseline`: the oldest version this release migrates from; a database older than that is
  // left as it is (the previous release migrates it first, and finds it where it left it).
  LockedConnection(const std::string& url, absl::Duration wait, int baseline)
      : turn_(url), conn_(url) {
    pqxx::nontransaction(conn_).exec(
        absl::StrCat("SET client_min_messages = warning; ", kPinSearchPath));
    CreateSchema(conn_);
    // The turn: SHARE UPDATE EXCLUSIVE conflicts with itself, and with no lock a statement takes
    // while it is parsed, before its rights are checked (a role that may only name the table
    // could otherwise hold a weaker lock on it through PREPARE and stop every migration).
    pqxx::nontransaction turn(turn_);
    turn.exec(
        absl::StrCat("SET idle_in_transaction_session_timeout = 0; ", kPinSearchPath,
                     "; SET lock_timeout = ", std::max<int64_t>(1, absl::ToInt64Milliseconds(wait)),
                     "; BEGIN; LOCK TABLE mailroom.mailroom_migration_turn"
                     " IN SHARE UPDATE EXCLUSIVE MODE"));
    // No exception: the turn is ours. A lock_timeout (55P03) is reported by the caller.
    pqxx::work tx(conn_);
    pqxx::row owner = tx.exec1(kSchemaOwner);
    if (!owner[1].as<bool>() || owner[2].as<bool>()) {
      throw SchemaRefused(absl::StrCat(
          "the schema mailroom belongs to role ", owner[0].as<std::string>(),
          owner[2].as<bool>() ? " and PUBLIC may create in it" : "",
          ": mailroom's schema must be the migrations' role's, with CREATE for no one else"));
    }
    pqxx::result old = tx.exec(kOldSchemas);
    if (old.size() > 1) {
      throw SchemaRefused("mailroom's tables were found in several schemas; move all but one "
                          "away before migrating");
    }
    if (!old.empty()) {
      const std::string schema = old[0][0].as<std::string>();
      const pqxx::field newest = tx.exec1(absl::StrCat(
          "SELECT max(version) FROM ", tx.quote_name(schema), ".schema_migrations"))[0];
      if (!newest.is_null() && newest.as<int>() >= baseline) {
        tx.exec_params("SELECT set_config('mailroom.move_from', $1, true),"
                       " set_config('mailroom.move_owner', $2, true)",
                       schema, old[0][1].as<std::string>());
        tx.exec(kMoveIntoOwnSchema);
      } else {
        // Older than this release's baseline: left untouched, and refused (CheckBaseline)
        // from the versions it records there.
        versions_ = absl::StrCat(tx.quote_name(schema), ".schema_migrations");
        tx.commit();
        return;
      }
    }
    tx.exec(kCreateTable);
    tx.commit();
    pqxx::nontransaction(conn_).exec(kMigrationLockTimeout);
  }
  ~LockedConnection() {
    try {
      pqxx::nontransaction(turn_).exec("COMMIT");
    } catch (...) {
      // The turn ends with the session anyway.
    }
  }
  pqxx::connection& conn() { return conn_; }
  // The table of applied versions.
  const std::string& versions() const { return versions_; }

 private:
  pqxx::connection turn_;
  pqxx::connection conn_;
  std::string versions_ = "mailroom.schema_migrations";
};

std::set<int> Applied(pqxx::connection& conn, const std::string& table) {
  pqxx::nontransaction tx(conn);
  std::set<int> versions;
  for (const auto& row : tx.exec("SELECT version FROM " + table)) {
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
  const Migration& baseline = *std::min_element(ordered.begin(), ordered.end(),
                                                [](const Migration& a, const Migration& b) {
                                                  return a.version < b.version;
                                                });
  if (*applied.begin() >= baseline.version || applied.count(baseline.version) > 0) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat("the database is at schema version ", *applied.rbegin(), ", older than version ",
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
                                       absl::Duration turn_wait,
                                       const std::vector<Source>* sources = nullptr,
                                       std::vector<std::string>* sources_applied = nullptr) {
  std::sort(ordered.begin(), ordered.end(), [direction](const Migration& a, const Migration& b) {
    return direction == Direction::kUp ? a.version < b.version : a.version > b.version;
  });
  std::vector<int> done;
  std::string current = "taking the migration turn";
  try {
    const int baseline = ordered.empty()
                             ? 0
                             : std::min_element(ordered.begin(), ordered.end(),
                                                [](const Migration& a, const Migration& b) {
                                                  return a.version < b.version;
                                                })
                                   ->version;
    LockedConnection locked(url, turn_wait, baseline);
    std::set<int> applied = Applied(locked.conn(), locked.versions());
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
        tx.exec_params("INSERT INTO mailroom.schema_migrations (version, name) VALUES ($1, $2)",
                       m.version, std::string(m.name));
        applied.insert(m.version);
      } else {
        tx.exec(m.down);
        tx.exec_params("DELETE FROM mailroom.schema_migrations WHERE version = $1", m.version);
        tx.exec("DELETE FROM mailroom.schema_sources");
      }
      tx.commit();
      done.push_back(m.version);
    }
    const bool current_schema = std::all_of(ordered.begin(), ordered.end(),
                                            [&](const Migration& m) {
                                              return applied.count(m.version) > 0;
                                            });
    if (sources != nullptr && current_schema) {
      std::vector<std::string> names = ApplySources(locked.conn(), *sources, &current);
      if (sources_applied != nullptr) *sources_applied = std::move(names);
    }
  } catch (const SchemaRefused& e) {
    return absl::FailedPreconditionError(e.what());
  } catch (const pqxx::sql_error& e) {
    if (e.sqlstate() == "55P03" && current == "taking the migration turn") {
      std::string holder = "another session";
      try {
        pqxx::connection conn(url);
        holder = TurnHolder(conn);
      } catch (const std::exception&) {
        // The error below still says what happened.
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "the migration turn (a lock on mailroom.mailroom_migration_turn) was not had within ",
          absl::FormatDuration(turn_wait), ": ", holder,
          " holds it; another collector migrate is running, or a transaction left it locked"));
    }
    // insufficient_privilege; libpqxx 6.4 does not always carry the SQLSTATE of an error
    // raised while a multi-statement string runs, so its text is read too.
    if ((e.sqlstate() == "42501" || absl::StrContains(e.what(), "permission denied")) &&
        current == "taking the migration turn") {
      return absl::FailedPreconditionError(
          absl::StrCat(current, " failed: ", e.what(), MigrationRightsHint(url)));
    }
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
                                           std::vector<std::string>* sources_applied,
                                           absl::Duration turn_wait) {
  if (sources_applied != nullptr) sources_applied->clear();
  return Apply(
      url, migrations, Direction::kUp,
      [target](int version, bool applied) {
        return !applied && (!target.has_value() || version <= *target);
      },
      turn_wait, &sources, sources_applied);
}

absl::StatusOr<std::vector<int>> MigrateDown(const std::string& url,
                                             const std::vector<Migration>& migrations, int target,
                                             absl::Duration turn_wait) {
  return Apply(
      url, migrations, Direction::kDown,
      [target](int version, bool applied) { return applied && version > target; }, turn_wait);
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
    auto exists = tx.exec1("SELECT to_regclass('mailroom.schema_migrations') IS NOT NULL");
    std::vector<int> versions;
    if (!exists[0].as<bool>()) return versions;
    for (const auto& row :
         tx.exec("SELECT version FROM mailroom.schema_migrations ORDER BY version")) {
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
    tx.exec_params("UPDATE mailroom.mailroom_settings SET channel = $1::text", channel);
    tx.commit();
  } catch (const pqxx::sql_error& e) {
    return absl::InvalidArgumentError(absl::StrCat("setting the channel: ", e.what()));
  } catch (const std::exception& e) {
    return DbError("setting the channel", e);
  }
  return absl::OkStatus();
}

absl::Status CheckCollectorRights(const std::string& url) {
  try {
    pqxx::connection conn(url);
    pqxx::nontransaction tx(conn);
    // By oid, not by name: naming mailroom.mailroom_settings without USAGE on the schema would
    // fail before saying which right is missing.
    pqxx::row r = tx.exec1(
        "SELECT current_user, n.oid IS NOT NULL, c.oid IS NOT NULL,"
        "       coalesce(has_schema_privilege(n.oid, 'USAGE'), false),"
        "       coalesce(has_table_privilege(c.oid, 'SELECT'), false),"
        "       coalesce((SELECT bool_or(has_function_privilege(p.oid, 'EXECUTE'))"
        "                   FROM pg_proc p WHERE p.pronamespace = n.oid"
        "                    AND p.proname = 'mailroom_dequeue'), false)"
        "  FROM (SELECT 1) one"
        "  LEFT JOIN pg_namespace n ON n.nspname = 'mailroom'"
        "  LEFT JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = 'mailroom_settings'");
    if (!r[1].as<bool>() || !r[2].as<bool>()) return absl::OkStatus();
    std::vector<std::string> missing;
    if (!r[3].as<bool>()) missing.push_back("USAGE on the schema mailroom");
    if (!r[4].as<bool>()) missing.push_back("SELECT on mailroom.mailroom_settings");
    if (!r[5].as<bool>()) missing.push_back("EXECUTE on mailroom.mailroom_dequeue");
    if (missing.empty()) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "role ", r[0].as<std::string>(), " cannot run mailroom: it lacks ",
        absl::StrJoin(missing, ", "),
        " (the collector connects as the migrations' role, the owner of the schema mailroom; "
        "the application's role has only the application's interface)"));
  } catch (const std::exception& e) {
    return DbError("checking the collector's rights", e);
  }
}

}  // namespace mailroom
