#include "collector/db/pg_status.h"

#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"

namespace mailroom {

PgFailure PgFailureOfSqlstate(absl::string_view state, absl::string_view message) {
  const absl::string_view cls = state.substr(0, 2);
  const std::string text(message);
  // The session is gone or in an unknown state: a retry on a new connection may work.
  if (state.size() != 5 || cls == "08" || (cls == "57" && state != "57014") || state == "25P03" ||
      cls == "53" || cls == "58") {
    return {absl::UnavailableError(text), false};
  }
  // The statement or transaction failed and was rolled back; the session is fine.
  if (state == "57014" || state == "55P03" || cls == "40") {
    return {absl::UnavailableError(text), true};
  }
  if (state == "P0002") return {absl::NotFoundError(text), true};
  if (cls == "22" || cls == "23") return {absl::InvalidArgumentError(text), true};
  return {absl::FailedPreconditionError(text), true};
}

PgFailure PgFailureOf(absl::string_view what, const std::exception& e) {
  if (dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr) {
    return {absl::UnavailableError(absl::StrCat(what, ": database connection lost: ", e.what())),
            false};
  }
  // libpqxx 6.4 throws class 40 (serialization failure, deadlock) as transaction_rollback,
  // which carries no SQLSTATE.
  if (dynamic_cast<const pqxx::transaction_rollback*>(&e) != nullptr) {
    return {absl::UnavailableError(absl::StrCat(what, ": ", e.what())), true};
  }
  if (const auto* sql = dynamic_cast<const pqxx::sql_error*>(&e); sql != nullptr) {
    return PgFailureOfSqlstate(sql->sqlstate(), absl::StrCat(what, ": ", e.what()));
  }
  return {absl::UnavailableError(absl::StrCat(what, ": ", e.what())), false};
}

}  // namespace mailroom
