#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sender/transport/curl_handle.h"
#include "sender/transport/curl_multi_loop.h"
#include "sender/transport/http_call.h"
#include "sender/transport/transport.h"

namespace mailroom {

// What the HTTP sending APIs of email providers (postmark, sendgrid, mailgun, resend) share:
// one email per request, built by the provider's subclass from the rendered parts
// (OutgoingEmail::content), sent over `connections` kept-alive HTTP connections whose transfers
// run on one event-loop thread (CurlMultiLoop), each bounded by the transport's timeouts (and
// the email's own, OutgoingEmail::timeout). The subclass says what the provider's answer
// means (Answer); what every one of them shares:
//  * an accepted email is SENT, the provider's message id its SendResult's provider_id and
//    feedback_id (the id the provider's webhooks name the message by);
//  * a transfer that failed after the request left, with no answer refusing it (a timeout, a
//    dropped connection, a cut answer) is MaybeSent: charged and retried once by the engine;
//  * 429 and 5xx are provider errors (the breaker holds every job), as are refusals of our
//    credentials, account or URL (HttpApiStatus).
// Every request carries the email's tags and mailroom_group (TransportConfig::group) as the
// provider's metadata, which come back in its webhooks. Click and open tracking are turned off
// where the request can say so: a tracking redirect would carry the token's link through the
// provider's servers. Thread-safe.
class ProviderTransport : public Transport {
 public:
  absl::StatusOr<SendResult> Send(const OutgoingEmail& email) final;
  int Concurrency() const override { return handles_.size(); }

  // The email's tags and ("mailroom_group", `group`): what every provider's metadata carries.
  static std::vector<std::pair<std::string, std::string>> Metadata(const OutgoingEmail& email,
                                                                   absl::string_view group);
  // `configured` without trailing slashes, or `default_url` when it is empty.
  static std::string BaseUrl(const std::string& configured, absl::string_view default_url);
  // The display name of a "Name <addr>" mailbox (quotes removed), "" for a bare address.
  static std::string DisplayName(absl::string_view mailbox);
  // The string member `key` of the JSON object `body`, or "" (not JSON, absent, not a string).
  static std::string JsonString(absl::string_view body, const char* key);
  // A request for `path` under the provider's base URL (`config`'s provider_api_url, or
  // `default_url`) with `headers`: a POST, or a GET when `post` is false.
  static HttpRequest ApiRequest(const TransportConfig& config, absl::string_view default_url,
                                absl::string_view path, std::vector<std::string> headers,
                                bool post = true);

 protected:
  explicit ProviderTransport(const TransportConfig& config);

  // The request that sends `email` (URL, credentials, body); timeouts are set by Send.
  virtual HttpRequest Request(const OutgoingEmail& email) const = 0;
  // What the provider's answer means: the accepted email's ids, or the failure.
  virtual absl::StatusOr<SendResult> Answer(const HttpAnswer& answer) const = 0;
  // Answer for a provider whose answer's status is `status` and whose accepted email's id is
  // the JSON string `id_key` of the body.
  static absl::StatusOr<SendResult> JsonIdAnswer(const absl::Status& status,
                                                 const HttpAnswer& answer, const char* id_key);

  const TransportConfig config_;

 private:
  CurlHandlePool handles_;  // one per kept-alive HTTP connection
  CurlMultiLoop loop_;      // destroyed first: no transfer outlives its handle
};

}  // namespace mailroom
