#pragma once

#include <curl/curl.h>

#include <memory>
#include <string>

#include "absl/status/status.h"

namespace mailroom {

// RAII owners for libcurl objects.
struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct CurlSlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using CurlHandle = std::unique_ptr<CURL, CurlDeleter>;
using CurlSlist = std::unique_ptr<curl_slist, CurlSlistDeleter>;

// Initialises libcurl once per process (thread-safe).
void CurlGlobalInit();

// The one map from a transfer's outcome to a Status. `response_code` is
// CURLINFO_RESPONSE_CODE (the SMTP reply or HTTP status, 0 if none); `detail` is curl's error
// buffer. A server reply decides when there is one (4xx -> kUnavailable, 5xx -> permanent; for
// HTTP the caller handles statuses itself); otherwise the CURLcode: connection-level problems
// are kUnavailable, TLS/auth/configuration problems are permanent.
absl::Status CurlStatus(CURLcode code, long response_code, const std::string& detail,
                        bool smtp);

}  // namespace mailroom
