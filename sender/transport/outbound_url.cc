#include "sender/transport/outbound_url.h"

#include <curl/curl.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/env.h"

namespace mailroom {
namespace {

struct UrlDeleter {
  void operator()(CURLU* u) const { curl_url_cleanup(u); }
};

// Copies one part of the parsed URL into `out` (when not null); false when the URL has none.
bool Part(CURLU* u, CURLUPart part, unsigned flags, std::string* out) {
  char* value = nullptr;
  if (curl_url_get(u, part, &value, flags) != CURLUE_OK) return false;
  if (out != nullptr) *out = value;
  curl_free(value);
  return true;
}

}  // namespace

absl::StatusOr<OutboundUrl> ParseOutboundUrl(const std::string& url) {
  std::unique_ptr<CURLU, UrlDeleter> u(curl_url());
  if (u == nullptr) return absl::ResourceExhaustedError("libcurl could not allocate a URL");
  // CURLOPT_URL parses with CURLU_GUESS_SCHEME too; leaving it out only refuses URLs without a
  // scheme, and a URL with one is read the same either way.
  const CURLUcode rc = curl_url_set(u.get(), CURLUPART_URL, url.c_str(), CURLU_NON_SUPPORT_SCHEME);
  if (rc != CURLUE_OK) {
    return absl::InvalidArgumentError(
        absl::StrCat("libcurl cannot parse it (", curl_url_strerror(rc), ")"));
  }
  OutboundUrl out;
  if (!Part(u.get(), CURLUPART_SCHEME, 0, &out.scheme) ||
      !Part(u.get(), CURLUPART_HOST, 0, &out.host) || out.host.empty()) {
    return absl::InvalidArgumentError("libcurl cannot parse it (no scheme or no host)");
  }
  out.scheme = absl::AsciiStrToLower(out.scheme);
  Part(u.get(), CURLUPART_PORT, CURLU_DEFAULT_PORT, &out.port);
  out.userinfo = Part(u.get(), CURLUPART_USER, 0, nullptr) ||
                 Part(u.get(), CURLUPART_PASSWORD, 0, nullptr) ||
                 Part(u.get(), CURLUPART_OPTIONS, 0, nullptr);
  // IsLoopbackAddress reads host:port; an IPv6 host keeps its brackets, so the last colon is
  // the port's.
  out.loopback = IsLoopbackAddress(absl::StrCat(out.host, ":", out.port));
  return out;
}

}  // namespace mailroom
