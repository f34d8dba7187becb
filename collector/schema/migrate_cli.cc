#include "collector/schema/migrate_cli.h"

#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collector/db/conninfo.h"
#include "collector/schema/migrate.h"
#include "common/log.h"

namespace mailroom {

int PrintCollectorUsage(std::FILE* err) {
  std::fprintf(err, "usage: collector [serve]\n"
                    "       collector migrate [up [VERSION] | down VERSION | status]\n"
                    "       collector --version\n"
                    "Configuration: MAILROOM_* environment variables (see README).\n");
  return 2;
}

int RunMigrateCli(const std::vector<std::string>& args, const Env& env, std::FILE* out,
                  std::FILE* err) {
  // Migrations hold a session advisory lock: direct to PostgreSQL, not through a pooler.
  const char* var = env.String("MAILROOM_DIRECT_DATABASE_URL", "").empty()
                        ? "MAILROOM_DATABASE_URL"
                        : "MAILROOM_DIRECT_DATABASE_URL";
  auto url = env.Required(var);
  if (!url.ok()) {
    std::fprintf(err, "config error: %s\n", std::string(url.status().message()).c_str());
    return 2;
  }
  if (!ValidConninfo(*url)) {
    std::fprintf(err,
                 "config error: %s: not a PostgreSQL connection URL or "
                 "key=value string (postgresql://user:password@host:5432/database)\n",
                 var);
    return 2;
  }
  const std::string cmd = args.empty() ? "up" : args[0];
  if (cmd == "status") {
    auto v = AppliedVersions(*url);
    if (!v.ok()) {
      std::fprintf(err, "migrate: %s\n", std::string(v.status().message()).c_str());
      return 1;
    }
    auto pending = PendingSources(*url, EmbeddedSources());
    if (!pending.ok()) {
      std::fprintf(err, "migrate: %s\n", std::string(pending.status().message()).c_str());
      return 1;
    }
    std::fprintf(out, "applied: [%s]; available: %zu\npending sources: [%s]\n",
                 absl::StrJoin(*v, ", ").c_str(), EmbeddedMigrations().size(),
                 absl::StrJoin(*pending, ", ").c_str());
    return 0;
  }
  std::optional<int> target;
  if (args.size() > 1) {
    int t;
    if (!absl::SimpleAtoi(args[1], &t) || t < 0) return PrintCollectorUsage(err);
    target = t;
  }
  absl::StatusOr<std::vector<int>> done;
  std::vector<std::string> sources;
  if (cmd == "up") {
    done = MigrateUp(*url, EmbeddedMigrations(), target, EmbeddedSources(), &sources);
  } else if (cmd == "down" && target.has_value()) {
    done = MigrateDown(*url, EmbeddedMigrations(), *target);
  } else {
    return PrintCollectorUsage(err);
  }
  if (!done.ok()) {
    LogError("migrate failed", {{"error", std::string(done.status().message())}});
    return 1;
  }
  LogInfo(cmd == "up" ? "migrations applied" : "migrations reverted",
          {{"versions", absl::StrCat("[", absl::StrJoin(*done, ","), "]")},
           {"sources", absl::StrCat("[", absl::StrJoin(sources, ","), "]")}});
  const std::string channel = env.String("MAILROOM_CHANNEL", "");
  if (cmd == "up" && !channel.empty()) {
    absl::Status st = SetChannel(*url, channel);
    if (!st.ok()) {
      LogError("setting the channel failed", {{"error", std::string(st.message())}});
      return 1;
    }
    LogInfo("channel set", {{"channel", channel}});
  }
  return 0;
}

}  // namespace mailroom
