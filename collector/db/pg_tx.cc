#include "collector/db/pg_tx.h"

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
    absl::StrAppend(&prefix,
                    "SET LOCAL lock_timeout = ", absl::ToInt64Milliseconds(timeouts.lock_timeout),
                    "; ");
  }
  return prefix;
}

std::string TextArray(const std::vector<std::string>& v) {
  std::string out = "{";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ',';
    out += '"';
    for (char c : v[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  return out + "}";
}

}  // namespace mailroom
