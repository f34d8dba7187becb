#include "testing/intruder.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mailroom::testing {

std::string UrlAs(const std::string& url, const std::string& role) {
  const size_t scheme = url.find("://");
  const size_t at = url.find('@');
  if (scheme == std::string::npos || at == std::string::npos) return url;
  return absl::StrCat(url.substr(0, scheme + 3), role, url.substr(at));
}

const std::vector<std::string>& MailroomAdvisoryKeys() {
  static const auto* const keys = new std::vector<std::string>{
      "x'6d61696c726f6f6d'::BIGINT",                             // "mailroom": migrations
      "x'6d61696c7072756e'::BIGINT",                             // "mailprun": retention pass
      "hashtextextended('mailroom.collector_mark', 0)",          // the wake-up mark's turn
      "hashtextextended('mailroom.address:a@example.test', 0)",  // an address's limits
  };
  return *keys;
}

namespace {

void CreateRole(pqxx::connection& admin, const std::string& role, const std::string& grants) {
  pqxx::nontransaction tx(admin);
  if (tx.exec_params1("SELECT count(*) FROM pg_roles WHERE rolname = $1", role)[0].as<int>() == 0) {
    tx.exec("CREATE ROLE " + tx.quote_name(role) + " LOGIN");
  }
  if (!grants.empty()) tx.exec(grants);
}

}  // namespace

AdvisoryLockSquatter::AdvisoryLockSquatter(const std::string& admin_url, const std::string& role) {
  pqxx::connection admin(admin_url);
  CreateRole(admin, role,
             absl::StrCat("DO $$ BEGIN IF to_regnamespace('mailroom') IS NOT NULL THEN"
                          " GRANT USAGE ON SCHEMA mailroom TO ",
                          admin.quote_name(role), "; END IF; END $$"));
  conn_ = std::make_unique<pqxx::connection>(UrlAs(admin_url, role));
  pqxx::nontransaction tx(*conn_);
  for (const std::string& key : MailroomAdvisoryKeys()) {
    tx.exec(absl::StrCat("SELECT pg_advisory_lock(", key, ")"));
  }
}

int AdvisoryLockSquatter::Held() {
  pqxx::nontransaction tx(*conn_);
  return tx
      .exec1("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
             " AND pid = pg_backend_pid()")[0]
      .as<int>();
}

int PlantLookalikes(const std::string& admin_url, const std::string& role) {
  pqxx::connection admin(admin_url);
  CreateRole(admin, role, "");
  {
    pqxx::nontransaction tx(admin);
    const std::string r = tx.quote_name(role);
    tx.exec(absl::StrCat("GRANT CREATE ON SCHEMA public TO ", r,
                         ";"
                         "CREATE TABLE IF NOT EXISTS public.lookalike_calls (name text);"
                         "GRANT INSERT, SELECT ON public.lookalike_calls TO PUBLIC"));
  }
  std::vector<std::string> ddl;
  {
    pqxx::nontransaction tx(admin);
    for (const auto& row :
         tx.exec("SELECT p.proname, p.pronargs FROM pg_proc p"
                 " WHERE p.pronamespace = 'mailroom'::regnamespace AND p.prokind = 'f'"
                 "   AND p.prorettype <> 'trigger'::regtype"
                 " GROUP BY 1, 2 ORDER BY 1, 2")) {
      const std::string name = row[0].as<std::string>();
      std::vector<std::string> args(row[1].as<int>(), "text");
      ddl.push_back(absl::StrCat("CREATE FUNCTION public.", tx.quote_name(name), "(",
                                 absl::StrJoin(args, ", "),
                                 ") RETURNS SETOF record LANGUAGE plpgsql AS $f$ BEGIN"
                                 " INSERT INTO public.lookalike_calls VALUES (",
                                 tx.quote(name),
                                 ");"
                                 " EXECUTE 'GRANT DELETE ON mailroom.suppressions TO ",
                                 tx.quote_name(role),
                                 "';"
                                 " RETURN; END $f$"));
    }
    for (const auto& row : tx.exec("SELECT c.relname FROM pg_class c"
                                   " WHERE c.relnamespace = 'mailroom'::regnamespace"
                                   "   AND c.relkind = 'r' ORDER BY 1")) {
      ddl.push_back(absl::StrCat("CREATE TABLE public.", tx.quote_name(row[0].as<std::string>()),
                                 " (lookalike int)"));
    }
  }
  pqxx::connection as_role(UrlAs(admin_url, role));
  pqxx::nontransaction tx(as_role);
  int functions = 0;
  for (const std::string& d : ddl) {
    tx.exec(d);
    if (d.rfind("CREATE FUNCTION", 0) == 0) ++functions;
  }
  return functions;
}

std::vector<std::string> IntruderGains(const std::string& admin_url, const std::string& role) {
  pqxx::connection admin(admin_url);
  pqxx::nontransaction tx(admin);
  std::vector<std::string> gains;
  const bool planted =
      tx.exec1("SELECT to_regclass('public.lookalike_calls') IS NOT NULL")[0].as<bool>();
  for (const auto& row : tx.exec_params(
           std::string(
               "SELECT c.relname || ':' || p.privilege FROM pg_class c"
               " CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) "
               "p(privilege)"
               " WHERE c.relnamespace = 'mailroom'::regnamespace AND c.relkind IN ('r', 'v')"
               "   AND has_table_privilege($1, c.oid, p.privilege)"
               " UNION ALL"
               " SELECT c.relname || ':' || p.privilege FROM pg_class c"
               " CROSS JOIN unnest(ARRAY['UPDATE', 'USAGE']) p(privilege)"
               " WHERE c.relnamespace = 'mailroom'::regnamespace AND c.relkind = 'S'"
               "   AND has_sequence_privilege($1, c.oid, p.privilege)") +
               std::string(planted
                               ? " UNION ALL SELECT 'called ' || name FROM public.lookalike_calls"
                               : "") +
               " ORDER BY 1",
           role)) {
    gains.push_back(row[0].as<std::string>());
  }
  return gains;
}

}  // namespace mailroom::testing
