#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "migrations/migrations.h"

namespace mailroom {

// How long a migration waits for another's turn to end (index builds on large tables may take
// minutes).
inline constexpr absl::Duration kMigrationTurnWait = absl::Minutes(10);

// Schema migrations against the database at `url` (a libpq connection string or URL).
//
// Everything lives in the schema `mailroom`, which the first call creates. Every call then takes
// the migration turn (a lock on the table mailroom.mailroom_migration_turn, which only
// mailroom's roles may take; never an advisory lock, which any role may hold), so two
// collectors starting at once apply each migration exactly once: the second waits, up to
// `turn_wait`, then finds it applied. Not had within `turn_wait`: DeadlineExceeded naming the
// session that holds it. Each migration
// runs in its own transaction together with its row in `schema_migrations`, so a failing
// migration leaves the schema as it was before it. Errors name the migration or source file
// and carry PostgreSQL's message (never the URL's password).
//
// The oldest migration is the baseline: a database with versions older than it but without it
// is refused (it must first be migrated by the release that still carried those versions).

// Applies the migrations not yet applied, in order, up to `target` (all when unset). Once no
// migration is pending, it then applies, in the same lock and one transaction, every source in
// `sources` whose text changed since it was last applied (SHA-256 recorded in
// `schema_sources`): functions first, with check_function_bodies off, then views, each view
// dropped and created again. The names of the sources applied go to `sources_applied` when
// given. Returns the versions applied by this call (empty when the schema was already current).
absl::StatusOr<std::vector<int>> MigrateUp(const std::string& url,
                                           const std::vector<Migration>& migrations,
                                           std::optional<int> target = std::nullopt,
                                           const std::vector<Source>& sources = EmbeddedSources(),
                                           std::vector<std::string>* sources_applied = nullptr,
                                           absl::Duration turn_wait = kMigrationTurnWait);

// The names of the sources whose text differs from the one last applied (all when none was).
absl::StatusOr<std::vector<std::string>> PendingSources(const std::string& url,
                                                        const std::vector<Source>& sources);

// Reverts applied migrations newer than `target`, newest first (target 0 reverts all), and
// forgets the applied sources (the next MigrateUp applies them all again). Returns the versions
// reverted.
absl::StatusOr<std::vector<int>> MigrateDown(const std::string& url,
                                             const std::vector<Migration>& migrations, int target,
                                             absl::Duration turn_wait = kMigrationTurnWait);

// The versions recorded in `schema_migrations`, ascending (empty when none).
absl::StatusOr<std::vector<int>> AppliedVersions(const std::string& url);

// Sets the NOTIFY channel the token trigger uses and the collector listens on (the one place
// it is configured). `channel` must match ^[a-z_][a-z0-9_]{0,62}$.
absl::Status SetChannel(const std::string& url, const std::string& channel);

// Whether the role `url` connects as can run mailroom's collector: USAGE on the schema mailroom,
// SELECT on mailroom.mailroom_settings and EXECUTE on mailroom.mailroom_dequeue (the migrations'
// role has them all). FailedPrecondition naming the role and each right it lacks (e.g. the
// application's role, given by mistake); OK when it has them, or when the schema or its settings
// are not there yet (not migrated: the collector waits for them as before); Unavailable when
// the database cannot be reached. The message never carries the URL.
absl::Status CheckCollectorRights(const std::string& url);

}  // namespace mailroom
