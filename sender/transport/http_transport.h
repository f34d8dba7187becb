#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/http/curl_handle.h"
#include "sender/transport/curl_multi_loop.h"
#include "sender/transport/transport.h"

namespace mailroom {

// The http transport's own settings.
struct HttpSettings {
  std::string url;  // https:// (http:// only where the configuration allows it)
  // The Standard Webhooks signing secrets, "whsec_<base64>", separated by spaces: each signs
  // every request (a receiver rotating its secret accepts either). Secret.
  std::string secret;
  std::string authorization;  // an Authorization header value, "" for none (secret)
  std::string ca_file;        // PEM CA trusted for the receiver instead of the system's
  bool allow_plain = false;   // http:// to a network address (checked by the configuration)
};

// A generic webhook: each email POSTed as JSON (see Body) to the team's own URL
// (HttpSettings::url), signed the way the Standard Webhooks convention specifies, so
// a receiver in any language can verify it:
//   webhook-id: WebhookId (one per job and group: the same on every try of that email, so a
//               receiver de-duplicates the retry of an answer it sent but we lost)
//   webhook-timestamp: Unix seconds
//   webhook-signature: "v1,<base64(HMAC-SHA256(key, id "." timestamp "." body))>", one per
//               configured secret, separated by spaces
// What the receiver's answer means (ResponseStatus): 2xx is sent, its JSON "message_id" (if
// any) the provider id; 4xx but 401/403/404/405/407/408/409/410/429 is a rejection of this
// email (suppressing the recipient when the body says "suppress": true); 408, 429, 5xx, the
// refusals of our credentials or URL, redirects and connection failures are provider errors
// (the breaker holds every job); 409 is retried. A timeout after the request left is
// MaybeSent, as for SES. `connections` HTTP connections are kept alive; the transfers run on
// one event-loop thread (CurlMultiLoop). Thread-safe.
class HttpTransport : public Transport {
 public:
  // InvalidArgument naming MAILROOM_HTTP_SECRET when a secret does not parse (ParseSecrets).
  static absl::StatusOr<std::unique_ptr<HttpTransport>> Create(const TransportConfig& config);

  absl::StatusOr<SendResult> Send(const OutgoingEmail& email) override;
  int Concurrency() const override { return handles_.size(); }
  std::string Name() const override { return "http"; }

  // The signing keys of "whsec_<base64> [whsec_<base64> ...]": each 24 to 64 bytes once
  // decoded (Standard Webhooks). The error names `variable` and says which secret is wrong,
  // never its value; an empty list is "required when MAILROOM_TRANSPORT=`kind`".
  static absl::StatusOr<std::vector<std::string>> ParseSecrets(
      absl::string_view secrets, absl::string_view variable = "MAILROOM_HTTP_SECRET",
      absl::string_view kind = "http");
  // "msg_<group>_<job id>": unique per email, the same on every try of it.
  static std::string WebhookId(absl::string_view group, uint64_t job_id);
  // The request's JSON body for `email` sent by `group` (docs/configuration.md has the schema).
  static std::string Body(const OutgoingEmail& email, absl::string_view group);
  // The webhook-signature header's value for `keys` (one "v1,<base64>" each, space-separated).
  static std::string Signature(const std::vector<std::string>& keys, absl::string_view id,
                               int64_t timestamp, absl::string_view body);
  // Maps the receiver's answer (status and body) to a Status; OK for 2xx.
  static absl::Status ResponseStatus(long http_status, absl::string_view body);
  // The receiver's message id in a 2xx body ({"message_id": "..."}: 1 to 256 printable ASCII
  // characters, angle brackets around it removed), or "" when there is none or it is not
  // usable.
  static std::string MessageIdOf(absl::string_view body);

 private:
  HttpTransport(const TransportConfig& config, std::vector<std::string> keys);

  const TransportConfig config_;
  const HttpSettings& http_ = config_.Get<HttpSettings>();
  const std::vector<std::string> keys_;
  CurlHandlePool handles_;  // one per kept-alive HTTP connection
  CurlMultiLoop loop_;      // destroyed first: no transfer outlives its handle
};

}  // namespace mailroom
