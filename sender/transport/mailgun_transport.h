#pragma once

#include <string>

#include "absl/status/status.h"
#include "sender/transport/provider_transport.h"

namespace mailroom {

// Mailgun's Messages API: POST /v3/<domain>/messages (TransportConfig::mailgun_domain, the
// sending domain) with HTTP basic authentication "api:<API key>", the message's parts as a
// form (from, to, subject, text, html, o:tag = the action, o:tracking-clicks/-opens = no, and
// one v:<name> user variable per tag and the group, which come back in Mailgun's webhooks as
// user-variables). Mailgun answers 200 {"id": "<...>", "message": "Queued. Thank you."}; the
// id without its angle brackets is the provider id (it is the message's Message-Id). Refusals
// carry {"message": ...} (ResponseStatus). Base URL: TransportConfig::provider_api_url,
// https://api.mailgun.net when empty (https://api.eu.mailgun.net for EU domains).
class MailgunTransport : public ProviderTransport {
 public:
  static constexpr char kDefaultUrl[] = "https://api.mailgun.net";

  explicit MailgunTransport(const TransportConfig& config) : ProviderTransport(config) {}
  std::string Name() const override { return "mailgun"; }

  // The form-encoded request body for `email` sent by `group`.
  static std::string Body(const OutgoingEmail& email, const std::string& group);
  // What Mailgun's answer means: 2xx is OK; a 400 saying the 'to' parameter is not a valid
  // address is a permanent rejection of the address (RecipientRejected); otherwise
  // HttpApiStatus (401/403: the key or the domain refused, 404: no such domain, 429 and 5xx:
  // provider errors; other 4xx refuse this email).
  static absl::Status ResponseStatus(long http_status, const std::string& body);
  // GET /v4/domains/<domain> (doctor): the domain and its state; needs a key that can read.
  static HttpRequest CheckRequest(const TransportConfig& config);

 protected:
  HttpRequest Request(const OutgoingEmail& email) const override;
  absl::StatusOr<SendResult> Answer(const HttpAnswer& answer) const override;
};

}  // namespace mailroom
