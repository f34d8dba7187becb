#include "collector/feedback/https_get.h"

#include <curl/curl.h>

#include "absl/strings/str_cat.h"
#include "common/http/http_client.h"

namespace mailroom {

absl::StatusOr<std::string> HttpsGet(const std::string& url, const std::string& ca_file,
                                     bool allow_http, size_t max_bytes, absl::Duration timeout) {
  OutboundRequest request;
  request.url = url;
  request.post = false;
  request.protocols = allow_http ? "http,https" : "https";
  request.ca_file = ca_file;
  request.max_body = max_bytes;
  request.long_body = OutboundRequest::LongBody::kFail;
  // The whole fetch is bounded by `timeout`, the connection included.
  request.connect_timeout = timeout;
  request.timeout = timeout;
  OutboundResult result = PerformOutbound(request);
  if (result.body_too_large) {
    return absl::OutOfRangeError(absl::StrCat("https get: body larger than ", max_bytes));
  }
  if (result.code != CURLE_OK) {
    // libcurl's error buffer names a host or a reason, never the URL's query.
    return absl::UnavailableError(absl::StrCat(
        "https get: ", result.error.empty() ? curl_easy_strerror(result.code) : result.error));
  }
  const long http = result.answer.status;
  if (http >= 400 && http < 500 && http != 408 && http != 429) {
    return absl::NotFoundError(absl::StrCat("https get: HTTP ", http));
  }
  if (http < 200 || http >= 300) {
    return absl::UnavailableError(absl::StrCat("https get: HTTP ", http));
  }
  return std::move(result.answer.body);
}

}  // namespace mailroom
