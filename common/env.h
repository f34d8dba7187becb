#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

// Assigns the value of a StatusOr expression to `lhs`, or returns its error from the enclosing
// function (which must return a Status or StatusOr).
#define MAILROOM_ASSIGN_OR_RETURN(lhs, expr) \
  do {                                       \
    auto _r = (expr);                        \
    if (!_r.ok()) return _r.status();        \
    (lhs) = *std::move(_r);                  \
  } while (0)

namespace mailroom {

// One setting of a service. Each service declares all of its settings in one table
// (collector/config/settings.cc, sender/config/settings.cc): its configuration loader reads values
// through the rows (Env's SettingSpec overloads: default and range come from the row), `--help`
// prints them and the documentation test checks docs/configuration.md against them.
struct SettingSpec {
  std::string name;
  // As the docs write it; "" when there is none or the docs describe it in words. A word
  // (off, unlimited) for a setting that is a number or an address when given.
  std::string default_value;
  std::string min, max;  // the numeric range (durations in ms); "" when there is none
  std::string help;      // one line
  bool secret = false;   // never printed with its value
};
using SettingsTable = std::vector<SettingSpec>;

// The row of `name`. A name missing from the table is a programming error that every test of
// the loader finds: it aborts, naming the variable.
const SettingSpec& FindSetting(const SettingsTable& table, const std::string& name);

// The table as `--help` prints it: per row the variable, its default and range, whether it is a
// secret, and the help line. Reads no environment.
std::string SettingsHelp(const SettingsTable& table);

// Reads configuration from environment variables. Every error names the variable and says
// what is wrong; values of variables marked secret are never echoed. Not thread-safe; use it
// once at start-up.
class Env {
 public:
  using Getter = std::function<const char*(const char*)>;
  // `getenv` defaults to ::getenv; tests pass a map lookup.
  explicit Env(Getter getenv = nullptr);

  // The raw value, or nullopt when unset or empty.
  std::optional<std::string> Get(const char* name) const;
  // Required non-empty string.
  absl::StatusOr<std::string> Required(const char* name, bool secret = false) const;
  // Optional string with a default.
  std::string String(const char* name, const std::string& def) const;
  // Integer in [min, max].
  absl::StatusOr<int64_t> Int(const char* name, int64_t def, int64_t min, int64_t max) const;
  // Decimal number in [min, max].
  absl::StatusOr<double> Double(const char* name, double def, double min, double max) const;
  // Milliseconds in [min_ms, max_ms] as a duration.
  absl::StatusOr<absl::Duration> Millis(const char* name, int64_t def_ms, int64_t min_ms,
                                        int64_t max_ms) const;
  // true/false/1/0/yes/no/on/off.
  absl::StatusOr<bool> Bool(const char* name, bool def) const;
  // host:port, with port 1..65535 (port 0 allowed when allow_zero_port).
  absl::StatusOr<std::string> HostPort(const char* name, const std::string& def,
                                       bool allow_zero_port = true) const;
  // Comma-separated list; empty items are dropped.
  std::vector<std::string> List(const char* name) const;
  // A readable file path (checked for existence), or "" when unset.
  absl::StatusOr<std::string> File(const char* name) const;

  // The same reads with the default and range of a settings table's row (see SettingSpec).
  absl::StatusOr<int64_t> Int(const SettingSpec& s) const;
  absl::StatusOr<double> Double(const SettingSpec& s) const;
  absl::StatusOr<absl::Duration> Millis(const SettingSpec& s) const;
  absl::StatusOr<bool> Bool(const SettingSpec& s) const;
  std::string String(const SettingSpec& s) const;
  absl::StatusOr<std::string> HostPort(const SettingSpec& s) const;

  // What a configuration loader asked for: every variable it read, with the default and the
  // range it gave. The loader's calls are the one table of settings: the documentation test
  // checks docs/configuration.md against what these record.
  struct Setting {
    std::string name;
    std::string default_value;  // as the docs write it; "" when there is none
    std::string min, max;       // "" when the setting has no numeric range
  };
  const std::vector<Setting>& Settings() const { return settings_; }

 private:
  void Note(const char* name, std::string def, std::string min = "", std::string max = "") const;

  Getter getenv_;
  mutable std::vector<Setting> settings_;
};

// Whether the host of `host_port` is a loopback address: 127.0.0.0/8, ::1 (also as
// ::ffff:127.x) or "localhost". The wildcards 0.0.0.0 and [::] and every other name are not.
bool IsLoopbackAddress(const std::string& host_port);

}  // namespace mailroom
