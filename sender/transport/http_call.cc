#include "sender/transport/http_call.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "sender/transport/curl_status.h"
#include "sender/transport/transport.h"

namespace mailroom {
namespace {

constexpr size_t kMaxReason = 200;

}  // namespace

OutboundResult PerformOnLoop(CURL* c, const OutboundRequest& request, CurlMultiLoop* loop) {
  if (loop == nullptr) return PerformOutbound(c, request);
  return PerformOutbound(c, request, [loop](CURL* easy) { return loop->Perform(easy); });
}

absl::StatusOr<OutboundAnswer> PerformHttp(CURL* c, const OutboundRequest& request,
                                           CurlMultiLoop* loop) {
  curl_easy_setopt(c, CURLOPT_USERAGENT, "mailroom-sender");
  OutboundResult result = PerformOnLoop(c, request, loop);
  if (result.code != CURLE_OK) return HttpTransferStatus(c, result.code, result.error);
  return std::move(result.answer);
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

std::optional<absl::Duration> RetryAfter(const OutboundAnswer& answer, absl::Time now) {
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
