#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/http/curl_handle.h"
#include "sender/transport/curl_multi_loop.h"
#include "sender/transport/http_call.h"
#include "sender/transport/transport.h"

namespace mailroom {

// The settings of a provider transport (postmark, sendgrid, mailgun, resend).
struct ProviderSettings {
  std::string api_key;  // Postmark server token, SendGrid/Mailgun/Resend API key (secret)
  std::string api_url;  // the API's base URL, "" for the provider's own
  std::string postmark_message_stream = "outbound";  // postmark only
  std::string mailgun_domain;                        // mailgun only: the sending domain
};

// What one email provider's HTTP sending API is, for ProviderTransport: everything a provider
// transport does that differs from one provider to the next. Defined once per provider, in its
// .cc file (kPostmarkApi, ...), as a constant of plain function pointers.
struct ProviderApi {
  const char* name;         // the transport's Name(): "postmark"
  const char* default_url;  // the API's base URL when ProviderSettings::api_url is empty
  // The request that sends `email` under `config` (URL, credentials, body); Send sets the
  // timeouts.
  OutboundRequest (*request)(const OutgoingEmail& email, const TransportConfig& config);
  // What the answer's HTTP status and body mean: OK for an accepted email, or the failure.
  absl::Status (*response_status)(long http_status, const std::string& body);
  // The cheapest authenticated read that proves `config`'s credentials (sender doctor).
  OutboundRequest (*check_request)(const TransportConfig& config);
  // Where an accepted email's id is: the JSON string member `id_key` of the answer's body, or
  // (`id_key` null) the answer's header `id_header` (lower case).
  const char* id_key;
  const char* id_header;
};

// What the HTTP sending APIs of email providers (postmark, sendgrid, mailgun, resend) share:
// one email per request, built by the provider's ProviderApi from the rendered parts
// (OutgoingEmail::content), sent over `connections` kept-alive HTTP connections whose transfers
// run on one event-loop thread (CurlMultiLoop), each bounded by the transport's timeouts (and
// the email's own, OutgoingEmail::timeout). The ProviderApi says what the provider's answer
// means; what every one of them shares:
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
  // `api` must outlive the transport (the providers' are constants).
  ProviderTransport(const TransportConfig& config, const ProviderApi& api);

  absl::StatusOr<SendResult> Send(const OutgoingEmail& email) final;
  int Concurrency() const final { return handles_.size(); }
  std::string Name() const final { return api_.name; }

  // The email's tags and ("mailroom_group", `group`): what every provider's metadata carries.
  static std::vector<std::pair<std::string, std::string>> Metadata(const OutgoingEmail& email,
                                                                   absl::string_view group);
  // `configured` without trailing slashes, or `default_url` when it is empty.
  static std::string BaseUrl(const std::string& configured, absl::string_view default_url);
  // The display name of a "Name <addr>" mailbox (quotes removed), "" for a bare address.
  static std::string DisplayName(absl::string_view mailbox);
  // The string member `key` of the JSON object `body`, or "" (not JSON, absent, not a string).
  static std::string JsonString(absl::string_view body, const char* key);
  // A request for `path` under the provider's base URL (`config`'s ProviderSettings::api_url, or
  // `default_url`) with `headers`: a POST, or a GET when `post` is false.
  static OutboundRequest ApiRequest(const TransportConfig& config, absl::string_view default_url,
                                    absl::string_view path, std::vector<std::string> headers,
                                    bool post = true);
  // "Authorization: Bearer <config's ProviderSettings::api_key>".
  static std::string BearerHeader(const TransportConfig& config);

 private:
  const TransportConfig config_;
  const ProviderApi& api_;
  CurlHandlePool handles_;  // one per kept-alive HTTP connection
  CurlMultiLoop loop_;      // destroyed first: no transfer outlives its handle
};

// The transport of the provider whose API is `kApi`, with that API's answer map and credential
// check as static members (PostmarkTransport::ResponseStatus, ::CheckRequest). Each provider's
// class derives from it and adds what only it has (its request body).
template <const ProviderApi& kApi>
class ProviderTransportOf : public ProviderTransport {
 public:
  explicit ProviderTransportOf(const TransportConfig& config) : ProviderTransport(config, kApi) {}

  // What the provider's answer (HTTP status and body) means; see the provider's class.
  static absl::Status ResponseStatus(long http_status, const std::string& body) {
    return kApi.response_status(http_status, body);
  }
  // The provider's cheapest authenticated read (sender doctor); see the provider's class.
  static OutboundRequest CheckRequest(const TransportConfig& config) {
    return kApi.check_request(config);
  }
};

}  // namespace mailroom
