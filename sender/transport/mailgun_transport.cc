#include "sender/transport/mailgun_transport.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace mailroom {
namespace {

constexpr char kDefaultUrl[] = "https://api.mailgun.net";

HttpRequest Authenticated(const TransportConfig& config, const std::string& path, bool post) {
  HttpRequest r = ProviderTransport::ApiRequest(config, kDefaultUrl, path,
                                                {"Accept: application/json"}, post);
  r.basic_auth = absl::StrCat("api:", config.provider_api_key);
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

HttpRequest Request(const OutgoingEmail& email, const TransportConfig& config) {
  HttpRequest r = Authenticated(config, absl::StrCat("/v3/", config.mailgun_domain, "/messages"),
                                true);
  r.content_type = "application/x-www-form-urlencoded";
  r.body = MailgunTransport::Body(email, config.group);
  return r;
}

HttpRequest CheckRequest(const TransportConfig& config) {
  return Authenticated(config, absl::StrCat("/v4/domains/", config.mailgun_domain), false);
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

}  // namespace mailroom
