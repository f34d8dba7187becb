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
#include "sender/transport/curl_status.h"

namespace mailroom {
namespace {

constexpr char kSecretPrefix[] = "whsec_";
// The receiver's answer is read for a message id or a reason; a longer one is cut here.
constexpr size_t kMaxResponse = 64 * 1024;
constexpr size_t kMaxReason = 200;

size_t Collect(char* ptr, size_t size, size_t nmemb, void* userdata) {
  auto* out = static_cast<std::string*>(userdata);
  const size_t n = size * nmemb;
  out->append(ptr, std::min(n, kMaxResponse - std::min(kMaxResponse, out->size())));
  return n;
}

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
  auto keys = ParseSecrets(config.http_secret);
  if (!keys.ok()) return keys.status();
  return std::unique_ptr<HttpTransport>(new HttpTransport(config, *std::move(keys)));
}

HttpTransport::HttpTransport(const TransportConfig& config, std::vector<std::string> keys)
    : config_(config), keys_(std::move(keys)), handles_(config.connections),
      loop_(config.connections) {}

absl::StatusOr<std::vector<std::string>> HttpTransport::ParseSecrets(absl::string_view secrets) {
  std::vector<std::string> keys;
  int n = 0;
  for (absl::string_view s : absl::StrSplit(secrets, ' ', absl::SkipWhitespace())) {
    ++n;
    s = absl::StripAsciiWhitespace(s);
    std::string key;
    if (!absl::ConsumePrefix(&s, kSecretPrefix)) {
      return absl::InvalidArgumentError(
          absl::StrCat("MAILROOM_HTTP_SECRET: secret ", n, " must start with whsec_"));
    }
    if (!absl::Base64Unescape(s, &key) || key.size() < 24 || key.size() > 64) {
      return absl::InvalidArgumentError(
          absl::StrCat("MAILROOM_HTTP_SECRET: secret ", n,
                       " must be whsec_ and the base64 of 24 to 64 random bytes"));
    }
    keys.push_back(std::move(key));
  }
  if (keys.empty()) {
    return absl::InvalidArgumentError(
        "MAILROOM_HTTP_SECRET: required when MAILROOM_TRANSPORT=http (whsec_ and base64)");
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
      {"expires_at", c.expires_at == absl::InfinitePast()
                         ? std::string()
                         : absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", c.expires_at,
                                           absl::UTCTimeZone())},
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
  // The receiver overloaded, down or timing out: nothing goes out to anyone until it is back.
  if (http == 408 || http == 429 || http >= 500) return ProviderError(what);
  // The receiver refusing our signature or credentials, a wrong URL, a redirect we do not
  // follow (the URL must be the final one), an endpoint gone: our configuration, not this
  // email.
  if (http < 200 || (http >= 300 && http < 400) || http == 401 || http == 403 || http == 404 ||
      http == 405 || http == 407 || http == 410) {
    return ProviderError(what);
  }
  // A conflict (the receiver still busy with this webhook-id, say): try this email again.
  if (http == 409) return absl::UnavailableError(what);
  return SaysSuppress(body) ? RecipientRejected(what) : absl::InvalidArgumentError(what);
}

std::string HttpTransport::MessageIdOf(absl::string_view body) {
  auto json = nlohmann::json::parse(body.begin(), body.end(), nullptr, false);
  if (!json.is_object() || !json.contains("message_id") || !json["message_id"].is_string()) {
    return "";
  }
  std::string id = json["message_id"].get<std::string>();
  // The collector refuses an outcome whose provider id is longer or holds a NUL: the whole
  // acknowledgement would be lost for an id it cannot store.
  if (id.empty() || id.size() > 256) return "";
  for (char ch : id) {
    if (ch < 0x21 || ch > 0x7e) return "";
  }
  return id;
}

absl::StatusOr<SendResult> HttpTransport::Send(const OutgoingEmail& email) {
  const std::string id = WebhookId(config_.group, email.content.job_id);
  const std::string body = Body(email, config_.group);
  const int64_t timestamp = absl::ToUnixSeconds(absl::Now());
  CurlSlist headers(curl_slist_append(nullptr, "Content-Type: application/json"));
  for (const std::string& h :
       {absl::StrCat("webhook-id: ", id), absl::StrCat("webhook-timestamp: ", timestamp),
        absl::StrCat("webhook-signature: ", Signature(keys_, id, timestamp, body)),
        // No round trip waiting for "100 Continue": the body is small.
        std::string("Expect:")}) {
    headers.reset(curl_slist_append(headers.release(), h.c_str()));
  }
  if (!config_.http_authorization.empty()) {
    headers.reset(curl_slist_append(
        headers.release(), absl::StrCat("Authorization: ", config_.http_authorization).c_str()));
  }

  CurlHandlePool::Loan handle = handles_.Acquire();
  CURL* c = handle.get();
  char errbuf[CURL_ERROR_SIZE] = {0};
  std::string response;
  curl_easy_setopt(c, CURLOPT_URL, config_.http_url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "mailroom-sender");
  curl_easy_setopt(c, CURLOPT_POST, 1L);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &response);
  if (!config_.http_ca_file.empty()) {
    curl_easy_setopt(c, CURLOPT_CAINFO, config_.http_ca_file.c_str());
  }
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(config_.connect_timeout)));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(absl::ToInt64Milliseconds(
                                              AttemptTimeout(email, config_.timeout))));
  const CURLcode rc = loop_.Perform(c);
  if (rc != CURLE_OK) return HttpTransferStatus(c, rc, errbuf);
  long http = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http);
  absl::Status st = ResponseStatus(http, response);
  if (!st.ok()) return st;
  // Without an id of the receiver's, feedback names the email by its webhook-id.
  std::string message_id = MessageIdOf(response);
  if (message_id.empty()) message_id = id;
  return SendResult{message_id, message_id};
}

}  // namespace mailroom
