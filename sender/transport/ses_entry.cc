#include "sender/transport/ses_entry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/http/curl_handle.h"
#include "nlohmann/json.hpp"
#include "sender/transport/ses_transport.h"

namespace mailroom {
namespace {

constexpr bool kSecret = true;

SettingsTable SesRows(const TransportVars& v) {
  SettingsTable rows = {
      // AWS_REGION is the primary's fallback only: a secondary in another region says so.
      {v.Mailroom("SES_REGION"), "us-east-1", "", "",
       v.failover() ? v.Help("ses: region") : "ses: region (default: AWS_REGION, else us-east-1)"},
      {v.Mailroom("SES_ENDPOINT"), "", "", "",
       v.Help("ses: endpoint override (emulators, VPC endpoints)")},
      {v.Mailroom("SES_CONFIGURATION_SET"), "", "", "", v.Help("ses: configuration set name")},
      {v.Aws("ACCESS_KEY_ID"), "", "", "", v.Help("ses: access key id (required)")},
      {v.Aws("SECRET_ACCESS_KEY"), "", "", "", v.Help("ses: secret access key (required)"),
       kSecret},
      {v.Aws("SESSION_TOKEN"), "", "", "", v.Help("ses: session token"), kSecret},
  };
  if (!v.failover()) {
    rows.push_back(
        {"AWS_REGION", "us-east-1", "", "", "ses: region if MAILROOM_SES_REGION is unset"});
  }
  return rows;
}

absl::Status ReadSes(const Env& env, const TransportVars& v, TransportConfig* config) {
  const SettingsTable rows = SesRows(v);
  auto row = [&rows](const std::string& name) -> const SettingSpec& {
    return FindSetting(rows, name);
  };
  SesSettings& s = config->Mutable<SesSettings>();
  // AWS_REGION is the primary's fallback only: a secondary in another region says so itself.
  const std::string region_var = v.Mailroom("SES_REGION");
  s.region = v.failover() ? env.String(row(region_var))
                          : env.String(region_var.c_str(), env.String(row("AWS_REGION")));
  s.endpoint = env.String(row(v.Mailroom("SES_ENDPOINT")));
  s.configuration_set = env.String(row(v.Mailroom("SES_CONFIGURATION_SET")));
  s.access_key_id = env.String(row(v.Aws("ACCESS_KEY_ID")));
  s.secret_access_key = env.String(row(v.Aws("SECRET_ACCESS_KEY")));
  s.session_token = env.String(row(v.Aws("SESSION_TOKEN")));
  return absl::OkStatus();
}

// Checks an ses transport's settings: the keys, the region, the configuration set, the endpoint.
absl::Status CheckSes(const Env&, const TransportVars& v, TransportConfig* config) {
  const SesSettings& s = config->Get<SesSettings>();
  if (s.access_key_id.empty()) {
    return BadSetting(v.Aws("ACCESS_KEY_ID"), v.RequiredWhen("ses"));
  }
  if (s.secret_access_key.empty()) {
    return BadSetting(v.Aws("SECRET_ACCESS_KEY"), v.RequiredWhen("ses"));
  }
  // Region names are lower-case words joined by dashes, ending in a number (eu-west-2).
  bool region_ok = s.region.size() <= 32 && s.region.find('-') != std::string::npos &&
                   absl::ascii_isdigit(s.region.back());
  for (char ch : s.region) {
    if (!(absl::ascii_islower(ch) || absl::ascii_isdigit(ch) || ch == '-')) region_ok = false;
  }
  if (!region_ok) return BadSetting(v.Mailroom("SES_REGION"), "must look like us-east-1");
  for (char ch : s.configuration_set) {
    if (!(absl::ascii_isalnum(ch) || ch == '-' || ch == '_') || s.configuration_set.size() > 64) {
      return BadSetting(v.Mailroom("SES_CONFIGURATION_SET"),
                        "must be letters, digits, - or _ (at most 64)");
    }
  }
  if (!s.endpoint.empty()) {
    absl::Status url = CheckUrl(v.Mailroom("SES_ENDPOINT"), s.endpoint,
                                {{"https", "http"},
                                 false,
                                 "must start with https:// or http://",
                                 absl::StrCat("the keys go in ", v.Aws("ACCESS_KEY_ID"), " and ",
                                              v.Aws("SECRET_ACCESS_KEY"))});
    if (!url.ok()) return url;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Transport>> MakeSes(const TransportConfig& config) {
  return std::unique_ptr<Transport>(new SesTransport(config));
}

std::vector<DoctorLine> DoctorSes(const TransportConfig& config, const DoctorContext& context) {
  TransportConfig tc = config;
  tc.timeout = std::min(tc.timeout, kDoctorCheckTimeout);
  tc.connect_timeout = std::min(tc.connect_timeout, kDoctorCheckTimeout);
  const std::string where = absl::StrCat(HostOf(SesTransport::ApiUrl(tc, "")), " (region ",
                                         config.Get<SesSettings>().region, ")");
  auto account = FetchSesAccount(tc);
  if (!account.ok()) {
    const std::string what(account.status().message());
    const bool refused = absl::StrContains(what, "ses 401") || absl::StrContains(what, "ses 403");
    const bool unreachable = absl::StrContains(what, "(curl ");
    return {DoctorLine::Fail("ses", absl::StrCat("GetAccount at ", where, ": ",
                                                 refused ? "credentials, region or clock refused: "
                                                 : unreachable ? "cannot reach the endpoint: "
                                                               : "",
                                                 what))};
  }
  std::vector<DoctorLine> out = {
      DoctorLine::Ok("ses", absl::StrCat("GetAccount at ", where, ": signed request accepted"))};
  for (DoctorLine& line : JudgeSesAccount(*account)) out.push_back(std::move(line));
  if (context.from_address.empty()) return out;  // its own line already
  // The first page holds every identity of almost any account; a query string needs no
  // escaping in the signed path (curl 7.88 signs the path as written).
  CurlHandle h(curl_easy_init());
  auto listed = SesTransport::Call(h.get(), tc,
                                   SesTransport::ApiUrl(tc, "/v2/email/identities?PageSize=1000"),
                                   std::nullopt);
  if (!listed.ok()) {
    out.push_back(DoctorLine::Warn("ses", absl::StrCat("the sending identity was not checked: "
                                                       "ListEmailIdentities failed (",
                                                       listed.status().message(), ")")));
    return out;
  }
  out.push_back(JudgeSesIdentity(*listed, context.from_address));
  return out;
}

}  // namespace

std::vector<DoctorLine> JudgeSesAccount(const SesAccountInfo& a) {
  std::vector<DoctorLine> out;
  if (!a.sending_enabled) {
    out.push_back(DoctorLine::Fail("ses",
                                   "sending is disabled for the account (SendingEnabled=false): "
                                   "nothing is sent until it is enabled again"));
  }
  if (a.enforcement_status == "SHUTDOWN") {
    out.push_back(DoctorLine::Fail("ses", "the account is shut down (EnforcementStatus SHUTDOWN)"));
  } else if (a.enforcement_status == "PROBATION") {
    out.push_back(DoctorLine::Warn("ses",
                                   "the account is on probation (EnforcementStatus PROBATION): "
                                   "bounces or complaints are too high"));
  }
  if (!a.production_access) {
    out.push_back(
        DoctorLine::Fail("ses", "the account is in the sandbox (ProductionAccessEnabled=false): "
                                "only verified addresses receive mail; request production access"));
  }
  const std::string quota = a.max_24_hour_send < 0
                                ? std::string("no 24-hour quota")
                                : absl::StrCat(a.sent_last_24_hours, " of ", a.max_24_hour_send,
                                               " sent in the last 24 hours");
  if (a.max_24_hour_send >= 0 && a.sent_last_24_hours >= a.max_24_hour_send) {
    out.push_back(DoctorLine::Fail("ses", absl::StrCat("the 24-hour quota is used up: ", quota)));
  } else if (a.max_24_hour_send > 0 && a.sent_last_24_hours >= 0.9 * a.max_24_hour_send) {
    out.push_back(
        DoctorLine::Warn("ses", absl::StrCat("the 24-hour quota is nearly used up: ", quota)));
  }
  if (out.empty()) {
    out.push_back(DoctorLine::Ok(
        "ses",
        absl::StrCat("account: production access, sending enabled",
                     a.enforcement_status.empty() ? "" : absl::StrCat(", ", a.enforcement_status),
                     ", ", quota,
                     a.max_send_rate > 0 ? absl::StrCat(", at most ", a.max_send_rate, " emails/s")
                                         : "")));
  }
  return out;
}

DoctorLine JudgeSesIdentity(absl::string_view list, const std::string& address) {
  const std::string domain = address.substr(address.find('@') + 1);
  auto j = nlohmann::json::parse(list.begin(), list.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("EmailIdentities") || !j["EmailIdentities"].is_array()) {
    return DoctorLine::Warn("ses",
                            "the sending identity was not checked: ListEmailIdentities answered "
                            "something else than a list");
  }
  // SES accepts mail from an address that is an identity itself or whose domain is one.
  for (const std::string& name : {address, domain}) {
    for (const auto& identity : j["EmailIdentities"]) {
      if (!identity.is_object() || !identity.contains("IdentityName") ||
          !identity["IdentityName"].is_string() ||
          !absl::EqualsIgnoreCase(identity["IdentityName"].get<std::string>(), name)) {
        continue;
      }
      const bool sending = identity.contains("SendingEnabled") &&
                           identity["SendingEnabled"].is_boolean() &&
                           identity["SendingEnabled"].get<bool>();
      if (sending)
        return DoctorLine::Ok("ses", absl::StrCat("sending identity ", name, " is verified"));
      const std::string status = identity.contains("VerificationStatus") &&
                                         identity["VerificationStatus"].is_string()
                                     ? identity["VerificationStatus"].get<std::string>()
                                     : "unknown";
      return DoctorLine::Fail("ses",
                              absl::StrCat("identity ", name, " cannot send (VerificationStatus ",
                                           status, "): SES refuses mail from ", address));
    }
  }
  if (j.contains("NextToken") && j["NextToken"].is_string() &&
      !j["NextToken"].get<std::string>().empty()) {
    return DoctorLine::Warn("ses", absl::StrCat("neither ", address, " nor ", domain,
                                                " is among the account's first 1000 identities"));
  }
  return DoctorLine::Fail("ses",
                          absl::StrCat("neither ", address, " nor ", domain,
                                       " is a verified identity "
                                       "of the account in this region: SES refuses mail from ",
                                       address, " (verify the domain, or set MAILROOM_FROM)"));
}

const TransportEntry kSesEntry = {
    "ses", "ses", /*reaches_recipients=*/true, SesRows, ReadSes, CheckSes, MakeSes, DoctorSes,
};

}  // namespace mailroom
