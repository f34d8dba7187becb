#pragma once

// Other roles of a shared database, for the tests that attack mailroom's border there: a role
// that can only connect and squats on every advisory lock key, and a role that can create in
// `public` and plants look-alikes of mailroom's functions and tables there.

#include <pqxx/pqxx>

#include <memory>
#include <string>
#include <vector>

namespace mailroom::testing {

// `url` (postgresql://USER@host:port/db…) with its user replaced by `role`.
std::string UrlAs(const std::string& url, const std::string& role);

// Every advisory lock key mailroom has taken in any release, as SQL expressions: the migration
// lock, the retention pass's lock, the wake-up mark's turn and an address's limit lock.
const std::vector<std::string>& MailroomAdvisoryKeys();

// A session of `role` (created LOGIN with no right but PostgreSQL's defaults to PUBLIC, plus
// USAGE on mailroom's schema, as the application's role has) holding every key of
// MailroomAdvisoryKeys() as a session lock until destroyed. `admin_url` is a superuser's.
class AdvisoryLockSquatter {
 public:
  AdvisoryLockSquatter(const std::string& admin_url, const std::string& role);
  // How many of the keys this session holds (all of them, unless the server refused).
  int Held();

 private:
  std::unique_ptr<pqxx::connection> conn_;
};

// Creates `role` (LOGIN, CREATE on `public`, as a database's owner has) and, as that role, in
// `public`: for every function of mailroom's schema a function of the same name and arity whose
// parameters are all text (what an untyped parameter resolves to first), and a table of the
// same name as each of mailroom's tables. Each look-alike function, when called, records its
// name in public.lookalike_calls (writable by every role) and tries to grant `role` DELETE on
// mailroom.suppressions. Returns how many functions it planted.
int PlantLookalikes(const std::string& admin_url, const std::string& role);

// The rights `role` holds on any table, sequence or function of mailroom's schema, as
// "object:privilege" lines (empty: none), plus any look-alike call recorded.
std::vector<std::string> IntruderGains(const std::string& admin_url, const std::string& role);

}  // namespace mailroom::testing
