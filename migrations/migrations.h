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

// One file of functions/ or views/: the current definition of a function (with its overloads
// and, for a trigger function, its triggers) or of a view. `collector migrate` re-applies it
// whenever its text changed.
struct Source {
  const char* name;  // its path under migrations/, e.g. "functions/mailroom_dequeue.sql"
  const char* sql;
};

// The migrations in this directory, compiled into the binary, ordered by version.
const std::vector<Migration>& EmbeddedMigrations();

// The files of functions/ and views/, compiled into the binary: functions first, then views,
// each sorted by name.
const std::vector<Source>& EmbeddedSources();

}  // namespace mailroom
