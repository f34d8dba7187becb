#include "sender/transport/ses_transport.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/hmac.h"
#include "common/http/http_client.h"
#include "nlohmann/json.hpp"
#include "sender/transport/curl_status.h"
#include "sender/transport/http_call.h"

namespace mailroom {
namespace {

// SES answers are small, except a list of identities (about 100 bytes each, 1000 a page): kept
// whole up to far above any of them.
constexpr size_t kMaxAnswer = 16 << 20;

double Number(const nlohmann::json& j, const char* key, double def) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : def;
}

bool Flag(const nlohmann::json& j, const char* key, bool def) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : def;
}

}  // namespace

SesTransport::SesTransport(const TransportConfig& config)
    : config_(config), url_(ApiUrl(config, "/v2/email/outbound-emails")),
      handles_(config.connections), loop_(config.connections) {}

std::string SesTransport::ApiUrl(const TransportConfig& config, const std::string& path) {
  const SesSettings& ses = config.Get<SesSettings>();
  std::string endpoint = ses.endpoint.empty()
                             ? absl::StrCat("https://email.", ses.region, ".amazonaws.com")
                             : ses.endpoint;
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  return absl::StrCat(endpoint, path);
}

absl::StatusOr<std::string> SesTransport::Call(CURL* c, const TransportConfig& config,
                                               const std::string& url,
                                               std::optional<std::string> body, CurlMultiLoop* loop,
                                               absl::Duration timeout) {
  const SesSettings& ses = config.Get<SesSettings>();
  OutboundRequest request;
  request.url = url;
  request.post = body.has_value();
  if (body.has_value()) {
    // libcurl signs a body it reads through a callback as an empty one unless the request
    // names its hash. (No "Expect:" line to suppress 100-continue, as http_call has: libcurl
    // would sign that header without sending it.)
    request.headers.push_back(
        absl::StrCat("x-amz-content-sha256: ", absl::BytesToHexString(Sha256(*body))));
    request.body = std::move(*body);
    request.expect_continue = true;
  }
  if (!ses.session_token.empty()) {
    request.headers.push_back(absl::StrCat("x-amz-security-token: ", ses.session_token));
  }
  request.connect_timeout = config.connect_timeout;
  request.timeout = std::min(config.timeout, timeout);
  request.max_body = kMaxAnswer;
  const std::string sigv4 = absl::StrCat("aws:amz:", ses.region, ":ses");
  const std::string userpwd = absl::StrCat(ses.access_key_id, ":", ses.secret_access_key);
  curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(c, CURLOPT_USERPWD, userpwd.c_str());
  OutboundResult result = PerformOnLoop(c, request, loop);
  if (result.code != CURLE_OK) return HttpTransferStatus(c, result.code, result.error);
  std::string error_type = result.answer.Header("x-amzn-errortype");
  error_type = error_type.substr(0, error_type.find(':'));
  absl::Status st = ResponseStatus(result.answer.status, error_type, result.answer.body);
  if (!st.ok()) return st;
  return std::move(result.answer.body);
}

absl::Status SesTransport::ResponseStatus(long http, const std::string& header_type,
                                          const std::string& body) {
  if (http >= 200 && http < 300) return absl::OkStatus();
  std::string type = header_type, message;
  auto json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (json.is_object()) {
    if (type.empty() && json.contains("__type") && json["__type"].is_string()) {
      type = json["__type"].get<std::string>();
      type = type.substr(type.rfind('#') + 1);
    }
    for (const char* k : {"message", "Message"}) {
      if (json.contains(k) && json[k].is_string()) message = json[k].get<std::string>();
    }
  }
  const std::string what = absl::StrCat("ses ", http, type.empty() ? "" : " ", type,
                                        message.empty() ? "" : ": ", message.substr(0, 300));
  // Throttling is about pace, not about being able to send: this message waits its turn.
  if (http == 429 || absl::StrContains(type, "TooManyRequests") ||
      absl::StrContains(type, "Throttl") || absl::StrContains(type, "LimitExceeded")) {
    return absl::UnavailableError(what);
  }
  // SES itself down, our credentials, signature or clock refused, or the account unable to
  // send: nothing can go out to anyone until that changes.
  for (const char* provider_wide :
       {"AccessDenied", "SignatureDoesNotMatch", "InvalidSignature", "IncompleteSignature",
        "InvalidClientTokenId", "UnrecognizedClient", "MissingAuthenticationToken", "ExpiredToken",
        "RequestExpired", "RequestTimeTooSkewed", "RequestTimeTooSkew", "SendingPaused",
        "AccountSuspended", "MailFromDomainNotVerified", "NotFound", "ServiceUnavailable",
        "InternalFailure"}) {
    if (absl::StrContains(type, provider_wide)) return ProviderError(what);
  }
  if (http >= 500 || http == 401 || http == 403 || http == 404) return ProviderError(what);
  return absl::InvalidArgumentError(what);  // MessageRejected, BadRequest, ...
}

absl::StatusOr<SendResult> SesTransport::Send(const OutgoingEmail& email) {
  nlohmann::json req = {
      {"FromEmailAddress", email.from_address},
      {"Destination", {{"ToAddresses", {email.to_address}}}},
      {"Content", {{"Raw", {{"Data", absl::Base64Escape(email.mime)}}}}},
  };
  if (!ses_.configuration_set.empty()) {
    req["ConfigurationSetName"] = ses_.configuration_set;
  }
  nlohmann::json tags = nlohmann::json::array();
  for (const auto& [name, value] : email.tags) tags.push_back({{"Name", name}, {"Value", value}});
  if (!config_.group.empty())
    tags.push_back({{"Name", "mailroom_group"}, {"Value", config_.group}});
  if (!tags.empty()) req["EmailTags"] = std::move(tags);

  CurlHandlePool::Loan handle = handles_.Acquire();
  auto response = Call(handle.get(), config_, url_, req.dump(), &loop_,
                       AttemptTimeout(email, config_.timeout));
  if (!response.ok()) return response.status();
  auto json = nlohmann::json::parse(*response, nullptr, false);
  std::string id = json.is_object() && json.contains("MessageId") && json["MessageId"].is_string()
                       ? json["MessageId"].get<std::string>()
                       : "";
  return SendResult{id, id};
}

absl::StatusOr<SesAccountInfo> ParseSesAccount(absl::string_view body) {
  auto j = nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError("ses GetAccount: not a JSON object");
  SesAccountInfo info;
  info.sending_enabled = Flag(j, "SendingEnabled", true);
  info.production_access = Flag(j, "ProductionAccessEnabled", true);
  if (j.contains("EnforcementStatus") && j["EnforcementStatus"].is_string()) {
    info.enforcement_status = j["EnforcementStatus"].get<std::string>();
  }
  if (j.contains("SendQuota") && j["SendQuota"].is_object()) {
    const auto& q = j["SendQuota"];
    info.max_send_rate = std::max(0.0, Number(q, "MaxSendRate", 0));
    info.max_24_hour_send = Number(q, "Max24HourSend", -1);
    info.sent_last_24_hours = std::max(0.0, Number(q, "SentLast24Hours", 0));
  }
  return info;
}

absl::StatusOr<SesAccountInfo> FetchSesAccount(const TransportConfig& config) {
  CurlHandle c(curl_easy_init());
  if (c == nullptr) return absl::ResourceExhaustedError("curl_easy_init failed");
  auto response = SesTransport::Call(c.get(), config,
                                     SesTransport::ApiUrl(config, "/v2/email/account"),
                                     /*body=*/std::nullopt);
  if (!response.ok()) return response.status();
  return ParseSesAccount(*response);
}

}  // namespace mailroom
