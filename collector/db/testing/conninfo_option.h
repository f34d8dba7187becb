#pragma once

#include <postgresql/libpq-fe.h>

#include <optional>
#include <string>

namespace mailroom {

// For tests: the value libpq would use for `key` in `conninfo` (nullopt when unset,
// "<unparsable>" when libpq cannot parse `conninfo`).
inline std::optional<std::string> ConninfoOption(const std::string& conninfo,
                                                 const std::string& key) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
  if (err != nullptr) PQfreemem(err);
  if (opts == nullptr) return std::string("<unparsable>");
  std::optional<std::string> out;
  for (PQconninfoOption* o = opts; o->keyword != nullptr; ++o) {
    if (key == o->keyword && o->val != nullptr) out = o->val;
  }
  PQconninfoFree(opts);
  return out;
}

}  // namespace mailroom
