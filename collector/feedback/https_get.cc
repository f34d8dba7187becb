#include "collector/feedback/https_get.h"

#include <curl/curl.h>

#include <memory>

#include "absl/strings/str_cat.h"

namespace mailroom {
namespace {

struct Body {
  std::string data;
  size_t max = 0;
  bool too_big = false;
};

size_t Collect(char* ptr, size_t size, size_t nmemb, void* userdata) {
  Body* b = static_cast<Body*>(userdata);
  if (b->data.size() + size * nmemb > b->max) {
    b->too_big = true;
    return 0;  // aborts the transfer
  }
  b->data.append(ptr, size * nmemb);
  return size * nmemb;
}

struct CurlFree {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};

}  // namespace

absl::StatusOr<std::string> HttpsGet(const std::string& url, const std::string& ca_file,
                                     bool allow_http, size_t max_bytes, absl::Duration timeout) {
  static const bool kInit = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  (void)kInit;
  std::unique_ptr<CURL, CurlFree> c(curl_easy_init());
  if (c == nullptr) return absl::UnavailableError("https get: curl_easy_init failed");
  Body body;
  body.max = max_bytes;
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(c.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(c.get(), CURLOPT_PROTOCOLS_STR, allow_http ? "http,https" : "https");
  curl_easy_setopt(c.get(), CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c.get(), CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(c.get(), CURLOPT_SSL_VERIFYHOST, 2L);
  if (!ca_file.empty()) curl_easy_setopt(c.get(), CURLOPT_CAINFO, ca_file.c_str());
  curl_easy_setopt(c.get(), CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(c.get(), CURLOPT_TIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(timeout)));
  CURLcode rc = curl_easy_perform(c.get());
  if (body.too_big) {
    return absl::OutOfRangeError(absl::StrCat("https get: body larger than ", max_bytes));
  }
  if (rc != CURLE_OK) {
    return absl::UnavailableError(
        absl::StrCat("https get: ", errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc)));
  }
  long http = 0;
  curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &http);
  if (http >= 400 && http < 500 && http != 408 && http != 429) {
    return absl::NotFoundError(absl::StrCat("https get: HTTP ", http));
  }
  if (http < 200 || http >= 300) {
    return absl::UnavailableError(absl::StrCat("https get: HTTP ", http));
  }
  return std::move(body.data);
}

}  // namespace mailroom
