#pragma once

#include <string>

#include "absl/status/status.h"
#include "sender/transport/provider_transport.h"

namespace mailroom {

// SendGrid's v3 Mail Send: POST /v3/mail/send with "Authorization: Bearer <API key>", one
// personalization to the recipient whose custom_args are the email's tags and group (they
// come back in the Event Webhook), from, subject, text/plain and text/html content, click and
// open tracking off. SendGrid answers 202 with no body for an accepted email; its
// X-Message-Id header is the provider id. Refusals carry {"errors": [{"message", "field"}]}
// (ResponseStatus). Base URL: TransportConfig::provider_api_url, https://api.sendgrid.com when
// empty (https://api.eu.sendgrid.com for EU subusers).
class SendgridTransport : public ProviderTransport {
 public:
  static constexpr char kDefaultUrl[] = "https://api.sendgrid.com";

  explicit SendgridTransport(const TransportConfig& config) : ProviderTransport(config) {}
  std::string Name() const override { return "sendgrid"; }

  // The JSON request body for `email` sent by `group`.
  static std::string Body(const OutgoingEmail& email, const std::string& group);
  // What SendGrid's answer means: 2xx is OK; a 400 whose error names the recipient's field
  // (personalizations.N.to...) is a permanent rejection of the address (RecipientRejected);
  // otherwise HttpApiStatus (401/403: the key, its scope or the sender identity refused, 429
  // and 5xx: provider errors; other 4xx refuse this email).
  static absl::Status ResponseStatus(long http_status, const std::string& body);
  // GET /v3/scopes (doctor): the key's scopes, which must include mail.send.
  static HttpRequest CheckRequest(const TransportConfig& config);

 protected:
  HttpRequest Request(const OutgoingEmail& email) const override;
  absl::StatusOr<SendResult> Answer(const HttpAnswer& answer) const override;
};

}  // namespace mailroom
