#pragma once

#include <vector>

namespace mailroom {

// One schema migration: `up` applies it, `down` reverts it. Both are plain SQL scripts run in
// one transaction by the collector's `migrate` command.
struct Migration {
  int version;       // NNNN from the file name; strictly increasing
  const char* name;  // the file name's rest, e.g. "accounts_tokens"
  const char* up;
  const char* down;
};

// The migrations in this directory, compiled into the binary, ordered by version.
const std::vector<Migration>& EmbeddedMigrations();

}  // namespace mailroom
