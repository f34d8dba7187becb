#include "sender/transport/resend_transport.h"

#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "sender/transport/provider_entry.h"

namespace mailroom {
std::string ResendTransport::Body(const OutgoingEmail& email, const std::string& group) {
  const EmailContent& c = email.content;
  nlohmann::json tags = nlohmann::json::array();
  for (const auto& [name, value] : Metadata(email, group)) {
    tags.push_back({{"name", name}, {"value", value}});
  }
  nlohmann::json body = {
      {"from", c.from.empty() ? email.from_address : c.from},
      {"to", {email.to_address}},
      {"subject", c.subject},
      {"text", c.text},
      {"html", c.html},
      {"tags", std::move(tags)},
  };
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ResendTransport::IdempotencyKey(absl::string_view group, uint64_t job_id) {
  return absl::StrCat("mailroom/", group, "/", job_id);
}

namespace {

constexpr char kDefaultUrl[] = "https://api.resend.com";

OutboundRequest Request(const OutgoingEmail& email, const TransportConfig& config) {
  OutboundRequest r = ProviderTransport::ApiRequest(
      config, kDefaultUrl, "/emails",
      {ProviderTransport::BearerHeader(config),
       absl::StrCat("Idempotency-Key: ",
                    ResendTransport::IdempotencyKey(config.group, email.content.job_id))});
  r.body = ResendTransport::Body(email, config.group);
  return r;
}

OutboundRequest CheckRequest(const TransportConfig& config) {
  return ProviderTransport::ApiRequest(config, kDefaultUrl, "/domains",
                                       {ProviderTransport::BearerHeader(config)}, /*post=*/false);
}

absl::Status ResponseStatus(long http, const std::string& body) {
  if (http >= 200 && http < 300) return absl::OkStatus();
  const std::string name = ProviderTransport::JsonString(body, "name");
  const std::string message = ProviderTransport::JsonString(body, "message");
  const std::string what = absl::StrCat("resend ", http, name.empty() ? "" : " ", name, ": ",
                                        ReasonText(message.empty() ? body : message));
  if (name == "invalid_idempotent_request") return MaybeSent(absl::UnavailableError(what));
  if ((http == 400 || http == 422) && name == "validation_error" &&
      absl::StrContains(message, "`to`")) {
    return RecipientRejected(what);
  }
  return HttpApiStatus(http, what);
}

}  // namespace

const ProviderApi kResendApi = {"resend",     kDefaultUrl, Request, ResponseStatus,
                                CheckRequest, "id",        nullptr};

namespace {

// A restricted (sending-only) key cannot list domains: Resend says so by name, and it sends.
std::optional<DoctorLine> JudgeResend(const OutboundAnswer& answer, const std::string& where,
                                      const ProviderSettings&) {
  if (answer.status == 401 &&
      ProviderTransport::JsonString(answer.body, "name") == "restricted_api_key") {
    return DoctorLine::Ok("resend",
                          absl::StrCat("API key accepted by ", where, " (sending access only)"));
  }
  return std::nullopt;
}

constexpr ProviderInfo kResend = {
    "resend",
    &kResendApi,
    "RESEND_API_KEY",
    "resend: an API key with sending access (required)",
    "RESEND_API_URL",
    "resend: API base URL (default: Resend's)",
    "API key",
    /*more_rows=*/nullptr,
    /*load_more=*/nullptr,
    JudgeResend,
    "whether MAILROOM_FROM's domain is verified at Resend (Resend refuses the first email with "
    "403)",
};

}  // namespace

constexpr TransportEntry kResendEntry = ProviderEntry<kResend>();

}  // namespace mailroom
