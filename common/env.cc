#include "common/env.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace mailroom {
namespace {

absl::Status Bad(const char* name, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", what));
}

}  // namespace

Env::Env(Getter getenv) : getenv_(getenv ? std::move(getenv) : Getter(::getenv)) {}

void Env::Note(const char* name, std::string def, std::string min, std::string max) const {
  for (Setting& s : settings_) {
    if (s.name != name) continue;
    // A variable read twice (say, as a string to see whether it is "off", then as host:port)
    // keeps its first default and gains the range of the typed read.
    if (s.default_value.empty()) s.default_value = std::move(def);
    if (s.min.empty()) s.min = std::move(min);
    if (s.max.empty()) s.max = std::move(max);
    return;
  }
  settings_.push_back({name, std::move(def), std::move(min), std::move(max)});
}

std::optional<std::string> Env::Get(const char* name) const {
  Note(name, "");
  const char* v = getenv_(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

absl::StatusOr<std::string> Env::Required(const char* name, bool secret) const {
  auto v = Get(name);
  if (!v.has_value()) return Bad(name, "required but not set");
  (void)secret;
  return *v;
}

std::string Env::String(const char* name, const std::string& def) const {
  Note(name, def);
  return Get(name).value_or(def);
}

absl::StatusOr<int64_t> Env::Int(const char* name, int64_t def, int64_t min, int64_t max) const {
  Note(name, absl::StrCat(def), absl::StrCat(min), absl::StrCat(max));
  auto v = Get(name);
  if (!v.has_value()) return def;
  int64_t n;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*v), &n)) {
    return Bad(name, absl::StrCat("\"", *v, "\" is not an integer"));
  }
  if (n < min || n > max) {
    return Bad(name, absl::StrCat(n, " is out of range [", min, ", ", max, "]"));
  }
  return n;
}

absl::StatusOr<double> Env::Double(const char* name, double def, double min, double max) const {
  Note(name, absl::StrCat(def), absl::StrCat(min), absl::StrCat(max));
  auto v = Get(name);
  if (!v.has_value()) return def;
  double d;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(*v), &d) || d != d) {
    return Bad(name, absl::StrCat("\"", *v, "\" is not a number"));
  }
  if (d < min || d > max) {
    return Bad(name, absl::StrCat(*v, " is out of range [", min, ", ", max, "]"));
  }
  return d;
}

absl::StatusOr<absl::Duration> Env::Millis(const char* name, int64_t def_ms, int64_t min_ms,
                                           int64_t max_ms) const {
  auto ms = Int(name, def_ms, min_ms, max_ms);
  if (!ms.ok()) return ms.status();
  return absl::Milliseconds(*ms);
}

absl::StatusOr<bool> Env::Bool(const char* name, bool def) const {
  Note(name, def ? "true" : "false");
  auto v = Get(name);
  if (!v.has_value()) return def;
  std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(*v));
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  return Bad(name, absl::StrCat("\"", *v, "\" is not a boolean (true/false)"));
}

absl::StatusOr<std::string> Env::HostPort(const char* name, const std::string& def,
                                          bool allow_zero_port) const {
  Note(name, def);
  std::string v = String(name, def);
  size_t colon = v.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return Bad(name, absl::StrCat("\"", v, "\" is not host:port"));
  }
  int port;
  if (!absl::SimpleAtoi(v.substr(colon + 1), &port) || port < (allow_zero_port ? 0 : 1) ||
      port > 65535) {
    return Bad(name, absl::StrCat("\"", v, "\" has no valid port"));
  }
  return v;
}

std::vector<std::string> Env::List(const char* name) const {
  std::vector<std::string> out;
  auto v = Get(name);
  if (!v.has_value()) return out;
  for (absl::string_view item : absl::StrSplit(*v, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (!item.empty()) out.emplace_back(item);
  }
  return out;
}

absl::StatusOr<std::string> Env::File(const char* name) const {
  auto v = Get(name);
  if (!v.has_value()) return std::string();
  if (access(v->c_str(), R_OK) != 0) {
    return Bad(name, absl::StrCat("cannot read file \"", *v, "\""));
  }
  return *v;
}

namespace {

// A row's number; 0 for a word (off, unlimited): such a setting is read as a number only when
// it is given.
template <typename T>
T Number(const std::string& text) {
  T v{};
  if constexpr (std::is_same_v<T, double>) {
    if (!absl::SimpleAtod(text, &v)) return 0;
  } else {
    if (!absl::SimpleAtoi(text, &v)) return 0;
  }
  return v;
}

}  // namespace

absl::StatusOr<int64_t> Env::Int(const SettingSpec& s) const {
  return Int(s.name.c_str(), Number<int64_t>(s.default_value), Number<int64_t>(s.min),
             Number<int64_t>(s.max));
}

absl::StatusOr<double> Env::Double(const SettingSpec& s) const {
  return Double(s.name.c_str(), Number<double>(s.default_value), Number<double>(s.min),
                Number<double>(s.max));
}

absl::StatusOr<absl::Duration> Env::Millis(const SettingSpec& s) const {
  return Millis(s.name.c_str(), Number<int64_t>(s.default_value), Number<int64_t>(s.min),
                Number<int64_t>(s.max));
}

absl::StatusOr<bool> Env::Bool(const SettingSpec& s) const {
  return Bool(s.name.c_str(), s.default_value == "true");
}

std::string Env::String(const SettingSpec& s) const {
  return String(s.name.c_str(), s.default_value);
}

absl::StatusOr<std::string> Env::HostPort(const SettingSpec& s) const {
  return HostPort(s.name.c_str(), s.default_value);
}

const SettingSpec& FindSetting(const SettingsTable& table, const std::string& name) {
  for (const SettingSpec& s : table) {
    if (s.name == name) return s;
  }
  std::fprintf(stderr, "%s: not in the service's settings table\n", name.c_str());
  std::abort();
}

std::string SettingsHelp(const SettingsTable& table) {
  std::string out;
  for (const SettingSpec& s : table) {
    absl::StrAppend(&out, s.name,
                    "  (default: ", s.default_value.empty() ? "none" : s.default_value);
    if (!s.min.empty()) absl::StrAppend(&out, "; ", s.min, "..", s.max);
    absl::StrAppend(&out, s.secret ? "; secret)\n" : ")\n", "    ", s.help, "\n");
  }
  return out;
}

bool IsLoopbackAddress(const std::string& host_port) {
  std::string host = host_port.substr(0, host_port.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (absl::AsciiStrToLower(host) == "localhost") return true;
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

}  // namespace mailroom
