#include "sender/transport/postmark_transport.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace mailroom {
namespace {

constexpr char kDefaultUrl[] = "https://api.postmarkapp.com";

std::string TokenHeader(const TransportConfig& config) {
  return absl::StrCat("X-Postmark-Server-Token: ", config.provider_api_key);
}

}  // namespace

std::string PostmarkTransport::Body(const OutgoingEmail& email, const TransportConfig& config) {
  const EmailContent& c = email.content;
  nlohmann::json metadata = nlohmann::json::object();
  for (const auto& [name, value] : Metadata(email, config.group)) metadata[name] = value;
  nlohmann::json body = {
      {"From", c.from.empty() ? email.from_address : c.from},
      {"To", email.to_address},
      {"Subject", c.subject},
      {"TextBody", c.text},
      {"HtmlBody", c.html},
      {"MessageStream", config.postmark_message_stream},
      {"Tag", c.action},
      {"Metadata", std::move(metadata)},
      {"TrackOpens", false},
      {"TrackLinks", "None"},
  };
  // Templates from a directory may hold bytes that are not UTF-8: replaced, never thrown.
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

HttpRequest Request(const OutgoingEmail& email, const TransportConfig& config) {
  HttpRequest r = ProviderTransport::ApiRequest(config, kDefaultUrl, "/email",
                                                {"Accept: application/json", TokenHeader(config)});
  r.body = PostmarkTransport::Body(email, config);
  return r;
}

HttpRequest CheckRequest(const TransportConfig& config) {
  return ProviderTransport::ApiRequest(config, kDefaultUrl, "/server",
                                       {"Accept: application/json", TokenHeader(config)},
                                       /*post=*/false);
}

absl::Status ResponseStatus(long http, const std::string& body) {
  auto json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  int64_t code = -1;
  if (json.is_object() && json.contains("ErrorCode") && json["ErrorCode"].is_number_integer()) {
    code = json["ErrorCode"].get<int64_t>();
  }
  const std::string message = ProviderTransport::JsonString(body, "Message");
  if (http >= 200 && http < 300 && code <= 0) return absl::OkStatus();
  const std::string what = absl::StrCat("postmark ", http,
                                        code >= 0 ? absl::StrCat(" ErrorCode ", code) : "", ": ",
                                        ReasonText(message.empty() ? body : message));
  if (http != 422 && !(http >= 200 && http < 300)) return HttpApiStatus(http, what);
  if (code == 406) return RecipientRejected(what);
  if (code == 10 || code == 100 || code == 400 || code == 401 || code == 405 || code == 412 ||
      code == 413 || absl::StrContains(absl::AsciiStrToLower(message), "message stream") ||
      absl::StrContains(message, "MessageStream")) {
    return ProviderError(what);
  }
  return absl::InvalidArgumentError(what);
}

}  // namespace

const ProviderApi kPostmarkApi = {"postmark",   kDefaultUrl, Request, ResponseStatus,
                                  CheckRequest, "MessageID", nullptr};

}  // namespace mailroom
