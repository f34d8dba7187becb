#pragma once

#include <curl/curl.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

// mailroom's one HTTP client over libcurl: a request, its answer, and the transfer that sets a
// handle up for the request, captures the answer within its caps and says how it ended. The
// sender's transports (their transfers on a handle of their pool, through their multi loop)
// and the collector's fetches (a handle of their own) both run their requests here and map its
// outcome to a Status of their own.
namespace mailroom {

// One outgoing HTTP request.
struct OutboundRequest {
  std::string url;
  // The protocols libcurl may use for `url` (CURLOPT_PROTOCOLS_STR): "https" refuses http://.
  std::string protocols = "http,https";
  // POSTed with `content_type` when `post`, through a CurlBody (libcurl never sends it twice by
  // itself); a GET otherwise.
  bool post = true;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::string> headers;  // "Name: value" lines (may carry credentials)
  std::string basic_auth;            // "user:password" for HTTP basic authentication, or ""
  std::string ca_file;               // PEM CA trusted instead of the system's, or ""
  // "Expect: 100-continue" before a large POST body (libcurl's choice) when true; when false no
  // such round trip: an "Expect:" line turns it off (a header a signing scheme such as SigV4
  // would sign without libcurl sending it, hence the choice).
  bool expect_continue = false;
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration timeout = absl::Seconds(30);  // the whole transfer (at least 1 ms)
  // The answer's body is kept up to `max_body` bytes; a longer one is cut there (kCut: read for
  // an id or a reason only) or ends the transfer (kFail: OutboundResult::body_too_large).
  enum class LongBody { kCut, kFail };
  size_t max_body = 64 * 1024;
  LongBody long_body = LongBody::kCut;
};

// What the server answered: its status, headers (the last answer's, after "100 Continue" say;
// names lower-cased, values trimmed, at most 100) and body (within OutboundRequest::max_body).
struct OutboundAnswer {
  long status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // The first header named `name` (lower case), or "".
  std::string Header(absl::string_view name) const;
};

// How one transfer ended: libcurl's code and its error buffer ("" when it wrote none), and
// what the server answered (its status read only when the code is CURLE_OK, 0 otherwise).
// `body_too_large` when the transfer was ended because the body passed max_body (LongBody::kFail;
// the code is then CURLE_WRITE_ERROR).
struct OutboundResult {
  CURLcode code = CURLE_OK;
  std::string error;
  bool body_too_large = false;
  OutboundAnswer answer;
};

// Runs `request` on the easy handle `c` (reset or fresh, not in use elsewhere): the protocols
// the request allows, certificate and host name verified, no redirects followed, no signals,
// HTTP/1.1 (SetHttpConnectionOptions), the request's timeouts. `perform` runs the configured
// transfer (curl_easy_perform on the calling thread in the overload without it, or a
// CurlMultiLoop's Perform); the handle's infos (CURLINFO_...) are still readable afterwards.
// Options the request does not cover (CURLOPT_AWS_SIGV4, CURLOPT_USERAGENT, ...) may be set on
// `c` before the call: they are left as they are. Credentials of the request are handed to
// libcurl only, never to the result.
OutboundResult PerformOutbound(CURL* c, const OutboundRequest& request,
                               absl::FunctionRef<CURLcode(CURL*)> perform);
OutboundResult PerformOutbound(CURL* c, const OutboundRequest& request);

// `request` on an easy handle of its own, on the calling thread: a one-shot request. The code
// is CURLE_FAILED_INIT (error "curl_easy_init failed") when libcurl cannot make a handle.
// Thread-safe.
OutboundResult PerformOutbound(const OutboundRequest& request);

}  // namespace mailroom
