#include "sender/transport/sendgrid_transport.h"

#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "sender/transport/provider_entry.h"

namespace mailroom {
std::string SendgridTransport::Body(const OutgoingEmail& email, const std::string& group) {
  const EmailContent& c = email.content;
  nlohmann::json custom_args = nlohmann::json::object();
  for (const auto& [name, value] : Metadata(email, group)) custom_args[name] = value;
  nlohmann::json from = {{"email", email.from_address}};
  const std::string name = DisplayName(c.from);
  if (!name.empty()) from["name"] = name;
  nlohmann::json content = nlohmann::json::array();
  // SendGrid wants text/plain first, then text/html.
  if (!c.text.empty()) content.push_back({{"type", "text/plain"}, {"value", c.text}});
  if (!c.html.empty()) content.push_back({{"type", "text/html"}, {"value", c.html}});
  nlohmann::json body = {
      {"personalizations",
       {{{"to", {{{"email", email.to_address}}}}, {"custom_args", std::move(custom_args)}}}},
      {"from", std::move(from)},
      {"subject", c.subject},
      {"content", std::move(content)},
      {"tracking_settings",
       {{"click_tracking", {{"enable", false}, {"enable_text", false}}},
        {"open_tracking", {{"enable", false}}}}},
  };
  if (!c.action.empty()) body["categories"] = {c.action};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

constexpr char kDefaultUrl[] = "https://api.sendgrid.com";

OutboundRequest Request(const OutgoingEmail& email, const TransportConfig& config) {
  OutboundRequest r = ProviderTransport::ApiRequest(config, kDefaultUrl, "/v3/mail/send",
                                                    {ProviderTransport::BearerHeader(config)});
  r.body = SendgridTransport::Body(email, config.group);
  return r;
}

OutboundRequest CheckRequest(const TransportConfig& config) {
  return ProviderTransport::ApiRequest(config, kDefaultUrl, "/v3/scopes",
                                       {ProviderTransport::BearerHeader(config)}, /*post=*/false);
}

absl::Status ResponseStatus(long http, const std::string& body) {
  if (http >= 200 && http < 300) return absl::OkStatus();
  auto json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  std::string message, field;
  if (json.is_object() && json.contains("errors") && json["errors"].is_array() &&
      !json["errors"].empty() && json["errors"][0].is_object()) {
    const auto& e = json["errors"][0];
    if (e.contains("message") && e["message"].is_string()) message = e["message"];
    if (e.contains("field") && e["field"].is_string()) field = e["field"];
  }
  const std::string what = absl::StrCat("sendgrid ", http, ": ",
                                        field.empty() ? "" : absl::StrCat(field, ": "),
                                        ReasonText(message.empty() ? body : message));
  if (http == 400 && absl::StartsWith(field, "personalizations.") &&
      absl::StrContains(field, ".to")) {
    return RecipientRejected(what);
  }
  return HttpApiStatus(http, what);
}

}  // namespace

const ProviderApi kSendgridApi = {"sendgrid",   kDefaultUrl, Request,       ResponseStatus,
                                  CheckRequest, nullptr,     "x-message-id"};

namespace {

// The scopes read (GET /v3/scopes) must include mail.send, or SendGrid refuses every email.
std::optional<DoctorLine> JudgeSendgrid(const OutboundAnswer& answer, const std::string& where,
                                        const ProviderSettings&) {
  if (answer.status < 200 || answer.status >= 300) return std::nullopt;
  auto json = nlohmann::json::parse(answer.body, nullptr, false);
  bool can_send = false;
  if (json.is_object() && json.contains("scopes") && json["scopes"].is_array()) {
    for (const auto& s : json["scopes"]) can_send |= s.is_string() && s == "mail.send";
  }
  return can_send ? DoctorLine::Ok("sendgrid", absl::StrCat("API key accepted by ", where,
                                                            "; it has the mail.send scope"))
                  : DoctorLine::Fail("sendgrid",
                                     absl::StrCat("the API key lacks the mail.send scope at ",
                                                  where, ": SendGrid refuses every email (403)"));
}

constexpr ProviderInfo kSendgrid = {
    "sendgrid",
    &kSendgridApi,
    "SENDGRID_API_KEY",
    "sendgrid: an API key with mail.send (required)",
    "SENDGRID_API_URL",
    "sendgrid: API base URL (default: SendGrid's)",
    "API key",
    /*more_rows=*/nullptr,
    /*load_more=*/nullptr,
    JudgeSendgrid,
    "whether MAILROOM_FROM is a verified sender identity (SendGrid refuses the first email with "
    "403)",
};

}  // namespace

constexpr TransportEntry kSendgridEntry = ProviderEntry<kSendgrid>();

}  // namespace mailroom
