#include "collector/pg_tx.h"

#include "absl/strings/str_cat.h"

namespace mailroom {

std::string BeginCommand(const TxTimeouts& timeouts) {
  std::string begin = absl::StrCat("BEGIN; ", kPinSearchPath);
  if (timeouts.statement_timeout > absl::ZeroDuration()) {
    absl::StrAppend(&begin, "; SET LOCAL statement_timeout = ",
                    absl::ToInt64Milliseconds(timeouts.statement_timeout));
  }
  if (timeouts.idle_in_transaction > absl::ZeroDuration()) {
    absl::StrAppend(&begin, "; SET LOCAL idle_in_transaction_session_timeout = ",
                    absl::ToInt64Milliseconds(timeouts.idle_in_transaction));
  }
  if (timeouts.lock_timeout > absl::ZeroDuration()) {
    absl::StrAppend(&begin, "; SET LOCAL lock_timeout = ",
                    absl::ToInt64Milliseconds(timeouts.lock_timeout));
  }
  return begin;
}

std::string StatementPrefix(const TxTimeouts& timeouts) {
  std::string prefix = absl::StrCat(kPinSearchPath, "; ");
  if (timeouts.statement_timeout > absl::ZeroDuration()) {
    absl::StrAppend(&prefix, "SET LOCAL statement_timeout = ",
                    absl::ToInt64Milliseconds(timeouts.statement_timeout), "; ");
  }
  if (timeouts.lock_timeout > absl::ZeroDuration()) {
    absl::StrAppend(&prefix, "SET LOCAL lock_timeout = ",
                    absl::ToInt64Milliseconds(timeouts.lock_timeout), "; ");
  }
  return prefix;
}

}  // namespace mailroom
