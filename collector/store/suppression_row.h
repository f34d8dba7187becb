#pragma once

// How the stores read a row of mailroom.suppressions (aliased `s`): the columns, in order, and
// the SuppressionRow they make. Internal to collector/store.

#include <pqxx/pqxx>

#include <cstdint>
#include <string>

#include "collector/store/store.h"

namespace mailroom {

// The columns SuppressionFromRow reads, in order.
inline constexpr char kSuppressionColumns[] =
    "s.address, s.reason, s.source, EXTRACT(EPOCH FROM s.first_seen)::BIGINT,"
    " EXTRACT(EPOCH FROM s.last_seen)::BIGINT,"
    " coalesce(EXTRACT(EPOCH FROM s.expires_at)::BIGINT, 0)";

inline SuppressionRow SuppressionFromRow(const pqxx::row& row) {
  SuppressionRow s;
  s.address = row[0].as<std::string>();
  s.reason = row[1].as<std::string>();
  s.source = row[2].as<std::string>();
  s.first_seen = row[3].as<int64_t>();
  s.last_seen = row[4].as<int64_t>();
  s.expires_at = row[5].as<int64_t>();
  return s;
}

}  // namespace mailroom
