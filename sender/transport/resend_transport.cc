#include "sender/transport/resend_transport.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace mailroom {
namespace {

std::string Bearer(const TransportConfig& config) {
  return absl::StrCat("Authorization: Bearer ", config.provider_api_key);
}

}  // namespace

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

HttpRequest ResendTransport::Request(const OutgoingEmail& email) const {
  HttpRequest r = ApiRequest(config_, kDefaultUrl, "/emails",
                             {Bearer(config_),
                              absl::StrCat("Idempotency-Key: ",
                                           IdempotencyKey(config_.group, email.content.job_id))});
  r.body = Body(email, config_.group);
  return r;
}

HttpRequest ResendTransport::CheckRequest(const TransportConfig& config) {
  return ApiRequest(config, kDefaultUrl, "/domains", {Bearer(config)}, /*post=*/false);
}

absl::Status ResendTransport::ResponseStatus(long http, const std::string& body) {
  if (http >= 200 && http < 300) return absl::OkStatus();
  const std::string name = JsonString(body, "name");
  const std::string message = JsonString(body, "message");
  const std::string what = absl::StrCat("resend ", http, name.empty() ? "" : " ", name, ": ",
                                        ReasonText(message.empty() ? body : message));
  if (name == "invalid_idempotent_request") return MaybeSent(absl::UnavailableError(what));
  if ((http == 400 || http == 422) && name == "validation_error" &&
      absl::StrContains(message, "`to`")) {
    return RecipientRejected(what);
  }
  return HttpApiStatus(http, what);
}

absl::StatusOr<SendResult> ResendTransport::Answer(const HttpAnswer& answer) const {
  return JsonIdAnswer(ResponseStatus(answer.status, answer.body), answer, "id");
}

}  // namespace mailroom
