#pragma once

#include <string>

#include "sender/transport/provider_transport.h"
#include "sender/transport/transport_entry.h"

namespace mailroom {

// SendGrid's v3 Mail Send (base URL ProviderSettings::api_url, https://api.sendgrid.com
// when empty; https://api.eu.sendgrid.com for EU subusers): POST /v3/mail/send with
// "Authorization: Bearer <API key>".
extern const ProviderApi kSendgridApi;

// SendGrid's v3 Mail Send: one personalization to the recipient whose custom_args are the
// email's tags and group (they come back in the Event Webhook), from, subject, text/plain and
// text/html content, click and open tracking off. SendGrid answers 202 with no body for an
// accepted email; its X-Message-Id header is the provider id. Refusals carry {"errors":
// [{"message", "field"}]}.
// ResponseStatus: 2xx is OK; a 400 whose error names the recipient's field
// (personalizations.N.to...) is a permanent rejection of the address (RecipientRejected);
// otherwise HttpApiStatus (401/403: the key, its scope or the sender identity refused, 429 and
// 5xx: provider errors; other 4xx refuse this email). CheckRequest: GET /v3/scopes, the key's
// scopes, which must include mail.send.
class SendgridTransport : public ProviderTransportOf<kSendgridApi> {
 public:
  using ProviderTransportOf::ProviderTransportOf;
  // The JSON request body for `email` sent by `group`.
  static std::string Body(const OutgoingEmail& email, const std::string& group);
};

// The sendgrid transport's registry entry (MAILROOM_TRANSPORT=sendgrid; see ProviderEntry).
extern const TransportEntry kSendgridEntry;

}  // namespace mailroom
