#include "sender/transport/mailgun_transport.h"

#include <optional>

#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "sender/transport/provider_entry.h"

namespace mailroom {
namespace {

constexpr char kDefaultUrl[] = "https://api.mailgun.net";

OutboundRequest Authenticated(const TransportConfig& config, const std::string& path, bool post) {
  OutboundRequest r = ProviderTransport::ApiRequest(config, kDefaultUrl, path,
                                                    {"Accept: application/json"}, post);
  r.basic_auth = absl::StrCat("api:", config.Get<ProviderSettings>().api_key);
  return r;
}

}  // namespace

std::string MailgunTransport::Body(const OutgoingEmail& email, const std::string& group) {
  const EmailContent& c = email.content;
  std::vector<std::pair<std::string, std::string>> fields = {
      {"from", c.from.empty() ? email.from_address : c.from},
      {"to", email.to_address},
      {"subject", c.subject},
      {"text", c.text},
      {"html", c.html},
      {"o:tracking-clicks", "no"},
      {"o:tracking-opens", "no"},
  };
  if (!c.action.empty()) fields.emplace_back("o:tag", c.action);
  for (const auto& [name, value] : Metadata(email, group)) {
    fields.emplace_back(absl::StrCat("v:", name), value);
  }
  return FormEncode(fields);
}

namespace {

OutboundRequest Request(const OutgoingEmail& email, const TransportConfig& config) {
  OutboundRequest r = Authenticated(
      config, absl::StrCat("/v3/", config.Get<ProviderSettings>().mailgun_domain, "/messages"),
      true);
  r.content_type = "application/x-www-form-urlencoded";
  r.body = MailgunTransport::Body(email, config.group);
  return r;
}

OutboundRequest CheckRequest(const TransportConfig& config) {
  return Authenticated(config,
                       absl::StrCat("/v4/domains/", config.Get<ProviderSettings>().mailgun_domain),
                       false);
}

absl::Status ResponseStatus(long http, const std::string& body) {
  if (http >= 200 && http < 300) return absl::OkStatus();
  std::string message = ProviderTransport::JsonString(body, "message");
  if (message.empty()) message = body;  // Mailgun answers a refused key with "Forbidden"
  const std::string what = absl::StrCat("mailgun ", http, ": ", ReasonText(message));
  // "'to' parameter is not a valid address. please check documentation"
  if (http == 400 && absl::StrContains(message, "not a valid address") &&
      (absl::StrContains(message, "'to'") || absl::StartsWith(message, "to "))) {
    return RecipientRejected(what);
  }
  return HttpApiStatus(http, what);
}

}  // namespace

const ProviderApi kMailgunApi = {"mailgun",    kDefaultUrl, Request, ResponseStatus,
                                 CheckRequest, "id",        nullptr};

namespace {

SettingsTable MailgunRows(const TransportVars& v) {
  return {
      {v.Mailroom("MAILGUN_DOMAIN"), "", "", "", v.Help("mailgun: the sending domain (required)")}};
}

absl::Status LoadMailgun(const Env& env, const TransportVars& v, ProviderSettings* s) {
  const std::string domain_var = v.Mailroom("MAILGUN_DOMAIN");
  std::string& domain = s->mailgun_domain;
  domain = absl::AsciiStrToLower(env.String(FindSetting(MailgunRows(v), domain_var)));
  bool ok = domain.size() <= 253 && domain.find('.') != std::string::npos &&
            domain.front() != '.' && domain.back() != '.';
  for (char ch : domain) {
    if (!(absl::ascii_isalnum(ch) || ch == '-' || ch == '.')) ok = false;
  }
  if (domain.empty()) return BadSetting(domain_var, v.RequiredWhen("mailgun"));
  if (!ok) return BadSetting(domain_var, "must be a domain name (mg.example.com)");
  return absl::OkStatus();
}

// GET /v4/domains/<domain>: the domain must exist and be active. A domain sending key can only
// send: it cannot read its domain, like a wrong key.
std::optional<DoctorLine> JudgeMailgun(const OutboundAnswer& answer, const std::string& where,
                                       const ProviderSettings& s) {
  const long http = answer.status;
  const std::string what = absl::StrCat("mailgun ", http);
  if (http == 401 || http == 403) {
    return DoctorLine::Warn("mailgun", absl::StrCat(where, " refused to show domain ",
                                                    s.mailgun_domain, " (", what,
                                                    "): the API key is wrong, or it is a domain "
                                                    "sending key, which cannot be checked "
                                                    "without sending"));
  }
  if (http == 404) {
    return DoctorLine::Fail("mailgun",
                            absl::StrCat("no sending domain ", s.mailgun_domain, " at ", where,
                                         " (EU domains need MAILROOM_MAILGUN_API_URL="
                                         "https://api.eu.mailgun.net)"));
  }
  if (http < 200 || http >= 300) return std::nullopt;
  auto json = nlohmann::json::parse(answer.body, nullptr, false);
  std::string state;
  if (json.is_object() && json.contains("domain") && json["domain"].is_object() &&
      json["domain"].contains("state") && json["domain"]["state"].is_string()) {
    state = json["domain"]["state"].get<std::string>();
  }
  if (state != "active") {
    return DoctorLine::Fail("mailgun",
                            absl::StrCat("sending domain ", s.mailgun_domain, " is ",
                                         state.empty() ? "in an unknown state" : state,
                                         ": Mailgun sends only from an active (verified) domain"));
  }
  return DoctorLine::Ok("mailgun", absl::StrCat("API key accepted by ", where, "; domain ",
                                                s.mailgun_domain, " is active"));
}

constexpr ProviderInfo kMailgun = {
    "mailgun",
    &kMailgunApi,
    "MAILGUN_API_KEY",
    "mailgun: an API or domain sending key (required)",
    "MAILGUN_API_URL",
    "mailgun: API base URL (default: Mailgun's US one)",
    "API key",
    MailgunRows,
    LoadMailgun,
    JudgeMailgun,
    "whether the account may send to any recipient (a sandbox domain sends only to authorised "
    "recipients)",
};

}  // namespace

constexpr TransportEntry kMailgunEntry = ProviderEntry<kMailgun>();

}  // namespace mailroom
