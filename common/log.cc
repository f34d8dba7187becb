#include "common/log.h"

#include <unistd.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace mailroom {
namespace {

std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};

const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
  }
  return "info";
}

void AppendValue(std::string* out, absl::string_view v) {
  bool plain = !v.empty();
  for (unsigned char c : v) {
    if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f) {
      plain = false;
      break;
    }
  }
  if (plain) {
    out->append(v.data(), v.size());
    return;
  }
  out->push_back('"');
  for (unsigned char c : v) {
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        if (c < 0x20 || c == 0x7f) {
          absl::StrAppendFormat(out, "\\x%02x", c);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

}  // namespace

void SetLogLevel(LogLevel level) { min_level = static_cast<int>(level); }

std::optional<LogLevel> ParseLogLevel(absl::string_view name) {
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
    if (name == LevelName(l)) return l;
  }
  return std::nullopt;
}

std::string FormatLogLine(LogLevel level, absl::string_view msg,
                          std::initializer_list<LogField> fields) {
  std::string line = absl::StrCat(
      "ts=", absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()),
      " level=", LevelName(level), " msg=");
  AppendValue(&line, msg);
  for (const auto& [k, v] : fields) {
    absl::StrAppend(&line, " ", k, "=");
    AppendValue(&line, v);
  }
  return line;
}

void Log(LogLevel level, absl::string_view msg, std::initializer_list<LogField> fields) {
  if (static_cast<int>(level) < min_level.load()) return;
  std::string line = FormatLogLine(level, msg, fields);
  line.push_back('\n');
  // One write(2) per line keeps lines whole when threads log at once.
  ssize_t unused = write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace mailroom
