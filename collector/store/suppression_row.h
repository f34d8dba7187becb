#pragma once

// How the stores read a row of the suppression functions (mailroom_list_suppressions's columns:
// address, reason, source, first_seen, last_seen, expires_at) into a SuppressionRow. Internal to
// collector/store.

#include <pqxx/pqxx>

#include <cstdint>
#include <string>

#include "collector/store/store.h"

namespace mailroom {

inline SuppressionRow SuppressionFromRow(const pqxx::row& row) {
  SuppressionRow s;
  s.address = row["address"].as<std::string>();
  s.reason = row["reason"].as<std::string>();
  s.source = row["source"].as<std::string>();
  s.first_seen = row["first_seen"].as<int64_t>();
  s.last_seen = row["last_seen"].as<int64_t>();
  s.expires_at = row["expires_at"].as<int64_t>();
  return s;
}

}  // namespace mailroom
