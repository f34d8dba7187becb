#include "sender/transport/http_transport.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/hmac.h"
#include "common/utf8.h"
#include "nlohmann/json.hpp"
#include "sender/transport/http_call.h"

namespace mailroom {
namespace {

constexpr char kSecretPrefix[] = "whsec_";
constexpr size_t kMaxReason = 200;

// The receiver's own words for a refusal: a JSON "reason" (or "message", "error") string, else
// the body itself; made safe to report and cut to kMaxReason bytes.
std::string Reason(absl::string_view body) {
  auto json = nlohmann::json::parse(body.begin(), body.end(), nullptr, false);
  if (json.is_object()) {
    for (const char* k : {"reason", "message", "error"}) {
      if (json.contains(k) && json[k].is_string()) {
        return SanitizeUtf8(json[k].get<std::string>(), kMaxReason);
      }
    }
    if (json.empty()) return "";  // "{}" says nothing
  }
  return SanitizeUtf8(absl::StripAsciiWhitespace(body), kMaxReason);
}

bool SaysSuppress(absl::string_view body) {
  auto json = nlohmann::json::parse(body.begin(), body.end(), nullptr, false);
  return json.is_object() && json.contains("suppress") && json["suppress"].is_boolean() &&
         json["suppress"].get<bool>();
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpTransport>> HttpTransport::Create(
    const TransportConfig& config) {
  auto keys = ParseSecrets(config.Get<HttpSettings>().secret);
  if (!keys.ok()) return keys.status();
  return std::unique_ptr<HttpTransport>(new HttpTransport(config, *std::move(keys)));
}

HttpTransport::HttpTransport(const TransportConfig& config, std::vector<std::string> keys)
    : config_(config), keys_(std::move(keys)), handles_(config.connections),
      loop_(config.connections) {}

absl::StatusOr<std::vector<std::string>> HttpTransport::ParseSecrets(absl::string_view secrets,
                                                                     absl::string_view variable,
                                                                     absl::string_view kind) {
  std::vector<std::string> keys;
  int n = 0;
  for (absl::string_view s : absl::StrSplit(secrets, ' ', absl::SkipWhitespace())) {
    ++n;
    s = absl::StripAsciiWhitespace(s);
    std::string key;
    if (!absl::ConsumePrefix(&s, kSecretPrefix)) {
      return absl::InvalidArgumentError(
          absl::StrCat(variable, ": secret ", n, " must start with whsec_"));
    }
    if (!absl::Base64Unescape(s, &key) || key.size() < 24 || key.size() > 64) {
      return absl::InvalidArgumentError(absl::StrCat(
          variable, ": secret ", n, " must be whsec_ and the base64 of 24 to 64 random bytes"));
    }
    keys.push_back(std::move(key));
  }
  if (keys.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(variable, ": required when MAILROOM_TRANSPORT=",
                                                   kind, " (whsec_ and base64)"));
  }
  return keys;
}

std::string HttpTransport::WebhookId(absl::string_view group, uint64_t job_id) {
  return absl::StrCat("msg_", group, "_", job_id);
}

std::string HttpTransport::Body(const OutgoingEmail& email, absl::string_view group) {
  const EmailContent& c = email.content;
  nlohmann::json body = {
      {"type", "email.send"},
      // A string: job ids are 64-bit, more than a JSON number keeps exactly in JavaScript.
      {"job_id", absl::StrCat(c.job_id)},
      {"group", std::string(group)},
      {"attempt", c.attempt},
      {"action", c.action},
      {"to", email.to_address},
      {"from", c.from},
      {"subject", c.subject},
      {"text", c.text},
      {"html", c.html},
      {"headers", {{"Message-ID", absl::StrCat("<", email.message_id, ">")}}},
      {"locale", c.locale},
      {"expires_at",
       c.expires_at == absl::InfinitePast()
           ? std::string()
           : absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", c.expires_at, absl::UTCTimeZone())},
      {"mime", absl::Base64Escape(email.mime)},
  };
  // Templates from a directory may hold bytes that are not UTF-8: replaced, never thrown.
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string HttpTransport::Signature(const std::vector<std::string>& keys, absl::string_view id,
                                     int64_t timestamp, absl::string_view body) {
  const std::string signed_content = absl::StrCat(id, ".", timestamp, ".", body);
  std::string out;
  for (const std::string& key : keys) {
    absl::StrAppend(&out, out.empty() ? "" : " ", "v1,",
                    absl::Base64Escape(HmacSha256(key, signed_content)));
  }
  return out;
}

absl::Status HttpTransport::ResponseStatus(long http, absl::string_view body) {
  if (http >= 200 && http < 300) return absl::OkStatus();
  const std::string reason = Reason(body);
  const std::string what = absl::StrCat("http ", http, reason.empty() ? "" : ": ", reason);
  absl::Status st = HttpApiStatus(http, what);
  // A refusal of this email: of its address too when the receiver says so.
  if (st.code() == absl::StatusCode::kInvalidArgument && SaysSuppress(body)) {
    return RecipientRejected(what);
  }
  return st;
}

std::string HttpTransport::MessageIdOf(absl::string_view body) {
  auto json = nlohmann::json::parse(body.begin(), body.end(), nullptr, false);
  if (!json.is_object() || !json.contains("message_id") || !json["message_id"].is_string()) {
    return "";
  }
  return UsableMessageId(json["message_id"].get<std::string>());
}

absl::StatusOr<SendResult> HttpTransport::Send(const OutgoingEmail& email) {
  const std::string id = WebhookId(config_.group, email.content.job_id);
  const int64_t timestamp = absl::ToUnixSeconds(absl::Now());
  OutboundRequest request;
  request.url = http_.url;
  request.body = Body(email, config_.group);
  request.headers = {
      absl::StrCat("webhook-id: ", id), absl::StrCat("webhook-timestamp: ", timestamp),
      absl::StrCat("webhook-signature: ", Signature(keys_, id, timestamp, request.body))};
  if (!http_.authorization.empty()) {
    request.headers.push_back(absl::StrCat("Authorization: ", http_.authorization));
  }
  request.ca_file = http_.ca_file;
  request.connect_timeout = config_.connect_timeout;
  request.timeout = AttemptTimeout(email, config_.timeout);
  CurlHandlePool::Loan handle = handles_.Acquire();
  auto answer = PerformHttp(handle.get(), request, &loop_);
  if (!answer.ok()) return answer.status();
  absl::Status st = ResponseStatus(answer->status, answer->body);
  if (!st.ok()) return WithRetryAfter(std::move(st), RetryAfter(*answer, absl::Now()));
  // Without an id of the receiver's, feedback names the email by its webhook-id.
  std::string message_id = MessageIdOf(answer->body);
  if (message_id.empty()) message_id = id;
  return SendResult{message_id, message_id};
}

}  // namespace mailroom
