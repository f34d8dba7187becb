#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"

namespace mailroom {

// Structured one-line logs on stderr: `ts=<RFC3339> level=<l> msg="<event>" key=value ...`.
// Values containing spaces, quotes or control characters are quoted and escaped, so a hostile
// value cannot forge a line. Thread-safe (one write per line). Callers must never pass secrets
// or tokens; log job ids instead.
enum class LogLevel { kDebug, kInfo, kWarn, kError };

using LogField = std::pair<absl::string_view, std::string>;

void Log(LogLevel level, absl::string_view msg, std::initializer_list<LogField> fields = {});

// Sets the minimum level written (default kInfo); from MAILROOM_LOG_LEVEL in main().
void SetLogLevel(LogLevel level);

// The level a MAILROOM_LOG_LEVEL value names: "debug", "info", "warn" or "error" (exactly, as
// the lines show them); nullopt for anything else (the services' config refuses it at start).
std::optional<LogLevel> ParseLogLevel(absl::string_view name);

// Formats one line (without the newline); exposed for tests.
std::string FormatLogLine(LogLevel level, absl::string_view msg,
                          std::initializer_list<LogField> fields);

inline void LogInfo(absl::string_view msg, std::initializer_list<LogField> f = {}) {
  Log(LogLevel::kInfo, msg, f);
}
inline void LogWarn(absl::string_view msg, std::initializer_list<LogField> f = {}) {
  Log(LogLevel::kWarn, msg, f);
}
inline void LogError(absl::string_view msg, std::initializer_list<LogField> f = {}) {
  Log(LogLevel::kError, msg, f);
}

// An identifier as logs show it: its first 12 characters and "..." when longer. For ids that
// are worth something to whoever knows them whole (subscription ids, grant holders).
inline std::string ShortId(absl::string_view id) {
  return id.size() <= 12 ? std::string(id) : std::string(id.substr(0, 12)) + "...";
}

}  // namespace mailroom
