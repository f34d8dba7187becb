#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mailroom {

// GETs an https:// URL with mailroom's HTTP client (PerformOutbound, common/http/http_client.h):
// certificate and host name verified against `ca_file` ("" = the system trust store), no
// redirects, no other protocol (http:// too with `allow_http`: for content that is
// authenticated otherwise, such as an issuer certificate), at most `max_bytes` of body, within
// `timeout`. Returns the body of a 2xx answer; kNotFound for a 4xx answer other than 408 and 429
// (the server says the URL is wrong: a definite failure), kOutOfRange for a body over
// `max_bytes`, kUnavailable for anything else (no connection, TLS, a timeout, 408, 429, 5xx:
// worth trying again). The error names the URL's problem, not its query string. Thread-safe.
absl::StatusOr<std::string> HttpsGet(const std::string& url, const std::string& ca_file,
                                     bool allow_http = false, size_t max_bytes = 64 * 1024,
                                     absl::Duration timeout = absl::Seconds(10));

}  // namespace mailroom
