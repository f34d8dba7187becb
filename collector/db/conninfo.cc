#include "collector/db/conninfo.h"

#include <postgresql/libpq-fe.h>  // Debian: libpq-dev

#include <algorithm>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace mailroom {
bool ValidConninfo(const std::string& conninfo) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
  if (err != nullptr) PQfreemem(err);
  if (opts == nullptr) return false;
  PQconninfoFree(opts);
  return true;
}

absl::Duration IdleInTransactionTimeout(absl::Duration lease) {
  return std::clamp(lease / 4, absl::Milliseconds(100), absl::Seconds(5));
}

namespace {

// The session settings WithConnectionDefaults puts into `options`.
struct SessionTimeouts {
  absl::Duration statement_timeout;
  absl::Duration idle_in_transaction;
};

// `conninfo` with the keepalive defaults added and, when `timeouts` is given, the session
// timeouts in `options` (see WithConnectionDefaults).
std::string AddDefaults(const std::string& conninfo, const SessionTimeouts* timeouts) {
  char* err = nullptr;
  std::unique_ptr<PQconninfoOption, void (*)(PQconninfoOption*)> opts(
      PQconninfoParse(conninfo.c_str(), &err), PQconninfoFree);
  if (err != nullptr) PQfreemem(err);
  if (opts == nullptr) return conninfo;
  // Only explicitly given options come back with a value; libpq's environment fallbacks
  // (PGHOST, PGAPPNAME, ...) still apply to what we leave out.
  std::string out;
  auto add = [&out](absl::string_view key, absl::string_view value) {
    if (!out.empty()) out += ' ';
    absl::StrAppend(&out, key, "='");
    for (char ch : value) {
      if (ch == '\\' || ch == '\'') out += '\\';
      out += ch;
    }
    out += '\'';
  };
  std::set<std::string> given;
  std::string options;
  for (PQconninfoOption* o = opts.get(); o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    given.insert(o->keyword);
    if (std::string(o->keyword) == "options") {
      options = o->val;
      continue;
    }
    add(o->keyword, o->val);
  }
  const std::pair<const char*, std::string> defaults[] = {
      {"keepalives", "1"},       {"keepalives_idle", "10"},     {"keepalives_interval", "5"},
      {"keepalives_count", "3"}, {"tcp_user_timeout", "30000"},
  };
  for (const auto& [key, value] : defaults) {
    if (given.count(key) == 0) add(key, value);
  }
  if (timeouts != nullptr && !absl::StrContains(options, "statement_timeout")) {
    if (!options.empty()) options += ' ';
    absl::StrAppend(&options, "-c statement_timeout=",
                    absl::ToInt64Milliseconds(timeouts->statement_timeout));
  }
  if (timeouts != nullptr && !absl::StrContains(options, "idle_in_transaction_session_timeout")) {
    if (!options.empty()) options += ' ';
    absl::StrAppend(&options, "-c idle_in_transaction_session_timeout=",
                    absl::ToInt64Milliseconds(timeouts->idle_in_transaction));
  }
  if (!options.empty()) add("options", options);
  return out;
}

}  // namespace

std::string WithConnectionDefaults(const std::string& conninfo, absl::Duration statement_timeout,
                                   absl::Duration idle_in_transaction_timeout) {
  const SessionTimeouts timeouts{statement_timeout, idle_in_transaction_timeout};
  return AddDefaults(conninfo, &timeouts);
}

std::string WithKeepaliveDefaults(const std::string& conninfo) {
  return AddDefaults(conninfo, nullptr);
}

}  // namespace mailroom
