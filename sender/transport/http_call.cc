#include "sender/transport/http_call.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "sender/transport/curl_body.h"
#include "sender/transport/curl_handle.h"
#include "sender/transport/curl_status.h"
#include "sender/transport/transport.h"

namespace mailroom {
namespace {

// An answer is read for a message id or a reason; a longer one is cut here.
constexpr size_t kMaxAnswer = 64 * 1024;
constexpr size_t kMaxReason = 200;

size_t Collect(char* ptr, size_t size, size_t nmemb, void* userdata) {
  auto* out = static_cast<std::string*>(userdata);
  const size_t n = size * nmemb;
  out->append(ptr, std::min(n, kMaxAnswer - std::min(kMaxAnswer, out->size())));
  return n;
}

size_t CollectHeader(char* ptr, size_t size, size_t nmemb, void* userdata) {
  auto* answer = static_cast<HttpAnswer*>(userdata);
  absl::string_view line(ptr, size * nmemb);
  // A new status line (after "100 Continue", say) starts the headers afresh.
  if (absl::StartsWith(line, "HTTP/")) answer->headers.clear();
  const size_t colon = line.find(':');
  if (colon != absl::string_view::npos && answer->headers.size() < 100) {
    answer->headers.emplace_back(absl::AsciiStrToLower(line.substr(0, colon)),
                                 std::string(absl::StripAsciiWhitespace(line.substr(colon + 1))));
  }
  return size * nmemb;
}

long Millis(absl::Duration d) { return static_cast<long>(absl::ToInt64Milliseconds(d)); }

}  // namespace

std::string HttpAnswer::Header(absl::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (n == name) return v;
  }
  return "";
}

absl::StatusOr<HttpAnswer> PerformHttp(CURL* c, const HttpRequest& request, CurlMultiLoop* loop) {
  CurlSlist headers(nullptr);
  std::vector<std::string> lines = request.headers;
  if (request.post) {
    lines.push_back(absl::StrCat("Content-Type: ", request.content_type));
    // No round trip waiting for "100 Continue": the bodies are small.
    lines.push_back("Expect:");
  }
  for (const std::string& h : lines) headers.reset(curl_slist_append(headers.release(), h.c_str()));

  char errbuf[CURL_ERROR_SIZE] = {0};
  HttpAnswer answer;
  curl_easy_setopt(c, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "mailroom-sender");
  SetHttpConnectionOptions(c);
  // Read through a callback that refuses a rewind once read: libcurl never sends it twice.
  CurlBody body(request.body);
  if (request.post) {
    body.Attach(c);
  } else {
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  if (!request.basic_auth.empty()) {
    curl_easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    curl_easy_setopt(c, CURLOPT_USERPWD, request.basic_auth.c_str());
  }
  if (!request.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, request.ca_file.c_str());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &answer.body);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, CollectHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &answer);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, Millis(request.connect_timeout));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, Millis(std::max(absl::Milliseconds(1), request.timeout)));
  const CURLcode rc = loop == nullptr ? curl_easy_perform(c) : loop->Perform(c);
  if (rc != CURLE_OK) return HttpTransferStatus(c, rc, errbuf);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &answer.status);
  return answer;
}

absl::Status HttpApiStatus(long http, absl::string_view what) {
  if (http >= 200 && http < 300) return absl::OkStatus();
  // The provider overloaded, throttling us or down: nothing goes out to anyone until it is back.
  if (http == 408 || http == 429 || http >= 500) return ProviderError(what);
  // Our credentials or URL refused, a redirect we do not follow (the URL must be the final
  // one), an endpoint gone: our configuration, not this email.
  if (http < 200 || (http >= 300 && http < 400) || http == 401 || http == 403 || http == 404 ||
      http == 405 || http == 407 || http == 410) {
    return ProviderError(what);
  }
  // A conflict (the same request still in progress, say): try this email again.
  if (http == 409) return absl::UnavailableError(what);
  return absl::InvalidArgumentError(what);
}

std::optional<absl::Duration> RetryAfter(const HttpAnswer& answer, absl::Time now) {
  const std::string retry_after = answer.Header("retry-after");
  int64_t n = 0;
  if (!retry_after.empty()) {
    if (absl::SimpleAtoi(retry_after, &n)) {
      if (n < 0) return std::nullopt;
      return absl::Seconds(std::min<int64_t>(n, 366LL * 86400));
    }
    absl::Time at;
    std::string err;
    // IMF-fixdate, the form RFC 9110 requires senders to use.
    if (!absl::ParseTime("%a, %d %b %Y %H:%M:%S GMT", retry_after, absl::UTCTimeZone(), &at,
                         &err)) {
      return std::nullopt;
    }
    return std::max(absl::ZeroDuration(), at - now);
  }
  const std::string reset = answer.Header("x-ratelimit-reset");
  if (reset.empty() || !absl::SimpleAtoi(reset, &n) || n < 0) return std::nullopt;
  return std::max(absl::ZeroDuration(), absl::FromUnixSeconds(n) - now);
}

std::string UsableMessageId(absl::string_view id) {
  if (id.size() >= 2 && id.front() == '<' && id.back() == '>') id = id.substr(1, id.size() - 2);
  // The collector refuses an outcome whose provider id is longer or holds a NUL: the whole
  // acknowledgement would be lost for an id it cannot store.
  if (id.empty() || id.size() > 256) return "";
  for (char ch : id) {
    if (ch < 0x21 || ch > 0x7e) return "";
  }
  return std::string(id);
}

std::string FormEncode(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out;
  auto append = [&out](absl::string_view s) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (unsigned char ch : s) {
      if (absl::ascii_isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
        out.push_back(static_cast<char>(ch));
      } else {
        out.push_back('%');
        out.push_back(kHex[ch >> 4]);
        out.push_back(kHex[ch & 15]);
      }
    }
  };
  for (const auto& [name, value] : fields) {
    if (!out.empty()) out.push_back('&');
    append(name);
    out.push_back('=');
    append(value);
  }
  return out;
}

std::string ReasonText(absl::string_view text) {
  return SanitizeUtf8(absl::StripAsciiWhitespace(text), kMaxReason);
}

}  // namespace mailroom
