#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "common/env.h"

namespace mailroom {

// `collector migrate [up [VERSION] | down VERSION | status]`: `args` are the words after
// `migrate`. Reads MAILROOM_DATABASE_URL (required) and MAILROOM_CHANNEL (applied after `up`
// when set) from `env`. `status` prints to `out`; usage and configuration errors go to `err`,
// progress to the log. Returns the process exit code: 0 done, 1 the database refused or failed,
// 2 bad usage or configuration. Never prints the URL.
int RunMigrateCli(const std::vector<std::string>& args, const Env& env, std::FILE* out,
                  std::FILE* err);

// The usage text of the collector binary (both subcommands), printed to `err`; returns 2.
int PrintCollectorUsage(std::FILE* err);

}  // namespace mailroom
