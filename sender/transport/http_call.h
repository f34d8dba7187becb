#pragma once

#include <curl/curl.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/http/http_client.h"
#include "sender/transport/curl_multi_loop.h"

namespace mailroom {

// PerformOutbound (common/http/http_client.h) of `request` on `c` through `loop`, or on the
// calling thread (curl_easy_perform) when `loop` is null.
OutboundResult PerformOnLoop(CURL* c, const OutboundRequest& request, CurlMultiLoop* loop);

// One request of an HTTP transport (http, postmark, sendgrid, mailgun, resend, the sandbox's
// events): PerformOutbound's (common/http/http_client.h), whose defaults are theirs (http and
// https, no "Expect: 100-continue" round trip, an answer cut at 64 KiB: it is read for an id
// or a reason only).
//
// Runs `request` on the easy handle `c` (reset, not in use elsewhere) through `loop` (on the
// calling thread, curl_easy_perform, when it is null), as "mailroom-sender" (User-Agent). Any
// answer with an HTTP status is returned, whatever the status; a transfer that fails is mapped
// by HttpTransferStatus (marked MaybeSent when the request had left and no answer refused it).
// The body goes through a CurlBody: libcurl never sends the request a second time by itself
// (a kept-alive connection closed unanswered ends the transfer, MaybeSent).
// Credentials in the request never appear in the status.
absl::StatusOr<OutboundAnswer> PerformHttp(CURL* c, const OutboundRequest& request,
                                           CurlMultiLoop* loop);

// What an HTTP API's status means when the API says nothing more precise (`what` is the
// message of the status: "postmark 503: ...", never a credential): 2xx is OK; 408, 429 and
// 5xx (the provider overloaded, throttling or down), any other status outside 4xx, 401, 403,
// 404, 405, 407 and 410 (our credentials, URL or account refused) are provider errors
// (ProviderError: the breaker holds every job); 409 is kUnavailable (this email, later); any
// other 4xx is a refusal of this email (kInvalidArgument).
absl::Status HttpApiStatus(long http_status, absl::string_view what);

// The wait a provider's answer asks for, as of `now`: its Retry-After (RFC 9110: seconds, or
// an HTTP date) or else SendGrid's X-RateLimit-Reset (the Unix time, in seconds, its window
// resets); a time already past is a wait of 0. nullopt when it asks for none or says it in a
// form neither header has.
std::optional<absl::Duration> RetryAfter(const OutboundAnswer& answer, absl::Time now);

// A provider's message id as the collector stores it: 1 to 256 printable ASCII characters
// (surrounding angle brackets removed), or "" when `id` is not usable.
std::string UsableMessageId(absl::string_view id);

// `fields` as an application/x-www-form-urlencoded body (UTF-8 percent-encoded).
std::string FormEncode(const std::vector<std::pair<std::string, std::string>>& fields);

// A provider's words for a refusal, safe to report: valid UTF-8, no controls, at most 200
// bytes.
std::string ReasonText(absl::string_view text);

}  // namespace mailroom
