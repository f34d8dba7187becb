#include "sender/transport/ses_transport.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/hmac.h"
#include "nlohmann/json.hpp"
#include "sender/transport/curl_body.h"
#include "sender/transport/curl_status.h"

namespace mailroom {
namespace {

size_t Collect(char* ptr, size_t size, size_t nmemb, void* userdata) {
  static_cast<std::string*>(userdata)->append(ptr, size * nmemb);
  return size * nmemb;
}

// Picks x-amzn-ErrorType out of the response headers.
size_t Header(char* ptr, size_t size, size_t nmemb, void* userdata) {
  absl::string_view line(ptr, size * nmemb);
  if (absl::StartsWithIgnoreCase(line, "x-amzn-ErrorType:")) {
    line.remove_prefix(strlen("x-amzn-ErrorType:"));
    line = absl::StripAsciiWhitespace(line);
    *static_cast<std::string*>(userdata) = std::string(line.substr(0, line.find(':')));
  }
  return size * nmemb;
}

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
                                               const std::string& url, const std::string* body,
                                               CurlMultiLoop* loop, absl::Duration timeout) {
  const SesSettings& ses = config.Get<SesSettings>();
  char errbuf[CURL_ERROR_SIZE] = {0};
  std::string response, error_type;
  CurlSlist headers(nullptr);
  if (body != nullptr) {
    // libcurl signs a body it reads through a callback as an empty one unless the request
    // names its hash. (No "Expect:" line to suppress 100-continue, as http_call has: libcurl
    // would sign that header without sending it.)
    for (const std::string& h :
         {std::string("Content-Type: application/json"),
          absl::StrCat("x-amz-content-sha256: ", absl::BytesToHexString(Sha256(*body)))}) {
      headers.reset(curl_slist_append(headers.release(), h.c_str()));
    }
  }
  if (!ses.session_token.empty()) {
    headers.reset(curl_slist_append(
        headers.release(), absl::StrCat("x-amz-security-token: ", ses.session_token).c_str()));
  }
  const std::string sigv4 = absl::StrCat("aws:amz:", ses.region, ":ses");
  const std::string userpwd = absl::StrCat(ses.access_key_id, ":", ses.secret_access_key);
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  SetHttpConnectionOptions(c);
  // Read through a callback that refuses a rewind once read: libcurl never sends it twice.
  CurlBody post(body == nullptr ? absl::string_view() : absl::string_view(*body));
  if (body != nullptr) {
    post.Attach(c);
  } else {
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(c, CURLOPT_USERPWD, userpwd.c_str());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &response);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, Header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &error_type);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(config.connect_timeout)));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(std::min(config.timeout, timeout))));
  const CURLcode rc = loop == nullptr ? curl_easy_perform(c) : loop->Perform(c);
  if (rc != CURLE_OK) return HttpTransferStatus(c, rc, errbuf);
  long http = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http);
  absl::Status st = ResponseStatus(http, error_type, response);
  if (!st.ok()) return st;
  return response;
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
  const std::string body = req.dump();

  CurlHandlePool::Loan handle = handles_.Acquire();
  auto response = Call(handle.get(), config_, url_, &body, &loop_,
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
  std::unique_ptr<CURL, void (*)(CURL*)> c(curl_easy_init(), curl_easy_cleanup);
  if (c == nullptr) return absl::ResourceExhaustedError("curl_easy_init failed");
  auto response = SesTransport::Call(c.get(), config,
                                     SesTransport::ApiUrl(config, "/v2/email/account"),
                                     /*body=*/nullptr);
  if (!response.ok()) return response.status();
  return ParseSesAccount(*response);
}

}  // namespace mailroom
