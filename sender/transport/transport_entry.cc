#include "sender/transport/transport_entry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "sender/transport/outbound_url.h"

namespace mailroom {

std::string TransportVars::Mailroom(absl::string_view suffix) const {
  return absl::StrCat(failover_ ? "MAILROOM_FAILOVER_" : "MAILROOM_", suffix);
}

std::string TransportVars::Aws(absl::string_view suffix) const {
  return absl::StrCat(failover_ ? "MAILROOM_FAILOVER_AWS_" : "AWS_", suffix);
}

std::string TransportVars::Help(absl::string_view help) const {
  return absl::StrCat(failover_ ? "secondary " : "", help);
}

const SettingSpec& TransportVars::Row(const SettingsTable& rows, absl::string_view suffix) const {
  return FindSetting(rows, Mailroom(suffix));
}

std::string TransportVars::RequiredWhen(absl::string_view kind) const {
  return absl::StrCat("required when ", Mailroom("TRANSPORT"), "=", kind);
}

std::string HostOf(absl::string_view url) {
  size_t scheme = url.find("://");
  if (scheme != absl::string_view::npos) url.remove_prefix(scheme + 3);
  url = url.substr(0, url.find_first_of("/?#"));
  size_t at = url.rfind('@');
  if (at != absl::string_view::npos) url.remove_prefix(at + 1);
  return std::string(url);
}

absl::Status BadSetting(absl::string_view var, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(var, ": ", what));
}

bool OneLine(const std::string& s, size_t max) {
  if (s.size() > max) return false;
  for (unsigned char ch : s) {
    if (ch < 0x20 || ch == 0x7f) return false;
  }
  return true;
}

bool HeaderToken(const std::string& s, size_t max) {
  if (s.empty() || s.size() > max) return false;
  for (unsigned char ch : s) {
    if (ch <= 0x20 || ch >= 0x7f) return false;
  }
  return true;
}

absl::Status CheckUrl(const std::string& var, const std::string& url, const UrlRule& rule) {
  absl::StatusOr<OutboundUrl> u = ParseOutboundUrl(url);
  if (!u.ok()) return BadSetting(var, u.status().message());
  if (std::find(rule.schemes.begin(), rule.schemes.end(), u->scheme) == rule.schemes.end()) {
    return BadSetting(var, rule.wrong_scheme);
  }
  if (u->userinfo) {
    return BadSetting(var, absl::StrCat("must not hold a user name or password (userinfo ",
                                        "refused): ", rule.credentials));
  }
  if (rule.plain_http_loopback_only && u->scheme == "http" && !u->loopback) {
    return BadSetting(var, rule.wrong_scheme);
  }
  return absl::OkStatus();
}

UrlRule HttpsOrLoopback(std::string credentials) {
  return {{"https", "http"},
          true,
          "must start with https:// (http:// only to a loopback address)",
          std::move(credentials)};
}

}  // namespace mailroom
