#include "sender/transport/provider_entry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/http/curl_handle.h"

namespace mailroom {
namespace provider_entry_internal {

SettingsTable Rows(const ProviderInfo& p, const TransportVars& v) {
  SettingsTable rows = {{v.Mailroom(p.key_var), "", "", "", v.Help(p.key_help), /*secret=*/true}};
  if (p.more_rows != nullptr) {
    for (SettingSpec& s : p.more_rows(v)) rows.push_back(std::move(s));
  }
  rows.push_back({v.Mailroom(p.url_var), "", "", "", v.Help(p.url_help)});
  return rows;
}

// Reads and checks the settings of the provider transport `p`. The key is named, never shown.
absl::Status Load(const ProviderInfo& p, const Env& env, const TransportVars& v,
                  TransportConfig* config) {
  const SettingsTable rows = Rows(p, v);
  const std::string key_var = v.Mailroom(p.key_var);
  const std::string url_var = v.Mailroom(p.url_var);
  ProviderSettings& s = config->Mutable<ProviderSettings>();
  s.api_key = env.String(FindSetting(rows, key_var));
  s.api_url = env.String(FindSetting(rows, url_var));
  if (s.api_key.empty()) return BadSetting(key_var, v.RequiredWhen(p.kind));
  if (!HeaderToken(s.api_key, 1000)) {
    return BadSetting(key_var, "must be printable ASCII without spaces (at most 1000 bytes)");
  }
  // The key crosses to the URL: in clear only to this machine.
  if (!s.api_url.empty()) {
    if (!OneLine(s.api_url, 2000))
      return BadSetting(url_var, "must be one line of at most 2000 bytes");
    absl::Status url = CheckUrl(url_var, s.api_url,
                                HttpsOrLoopback(absl::StrCat("the key goes in ", key_var)));
    if (!url.ok()) return url;
  }
  return p.load_more == nullptr ? absl::OkStatus() : p.load_more(env, v, &s);
}

std::vector<DoctorLine> Doctor(const ProviderInfo& p, const TransportConfig& config) {
  OutboundRequest request = p.api->check_request(config);
  request.timeout = std::min(config.timeout, kDoctorCheckTimeout);
  request.connect_timeout = std::min(config.connect_timeout, kDoctorCheckTimeout);
  const std::string where = HostOf(request.url);
  CurlHandle h(curl_easy_init());
  auto answer = PerformHttp(h.get(), request, nullptr);
  if (!answer.ok()) {
    return {DoctorLine::Fail(p.kind, absl::StrCat("cannot reach ", where, ": ",
                                                  answer.status().message()))};
  }
  std::vector<DoctorLine> out = {
      JudgeProviderCheck(p, *answer, where, config.Get<ProviderSettings>())};
  // What only a send shows.
  if (out[0].level != DoctorLine::Level::kFail) {
    out.push_back(
        DoctorLine::Ok(p.kind, absl::StrCat("not checked without sending: ", p.unchecked)));
  }
  return out;
}

}  // namespace provider_entry_internal

DoctorLine JudgeProviderCheck(const ProviderInfo& p, const OutboundAnswer& answer,
                              const std::string& where, const ProviderSettings& settings) {
  if (p.judge != nullptr) {
    std::optional<DoctorLine> own = p.judge(answer, where, settings);
    if (own.has_value()) return *std::move(own);
  }
  const long http = answer.status;
  const std::string what = absl::StrCat(p.kind, " ", http);
  if (http == 401 || http == 403) {
    return DoctorLine::Fail(p.kind,
                            absl::StrCat("credentials refused by ", where, " (", what, ")"));
  }
  if (http < 200 || http >= 300) {
    return DoctorLine::Fail(p.kind,
                            absl::StrCat("unexpected answer from ", where, " (", what, ")"));
  }
  return DoctorLine::Ok(p.kind, absl::StrCat(p.credential, " accepted by ", where));
}

}  // namespace mailroom
