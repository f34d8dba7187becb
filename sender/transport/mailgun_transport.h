#pragma once

#include <string>

#include "sender/transport/provider_transport.h"
#include "sender/transport/transport_entry.h"

namespace mailroom {

// Mailgun's Messages API (base URL ProviderSettings::api_url, https://api.mailgun.net
// when empty; https://api.eu.mailgun.net for EU domains): POST /v3/<domain>/messages
// (ProviderSettings::mailgun_domain, the sending domain) with HTTP basic authentication
// "api:<API key>".
extern const ProviderApi kMailgunApi;

// Mailgun's Messages API: the message's parts as a form (from, to, subject, text, html, o:tag =
// the action, o:tracking-clicks/-opens = no, and one v:<name> user variable per tag and the
// group, which come back in Mailgun's webhooks as user-variables). Mailgun answers 200 {"id":
// "<...>", "message": "Queued. Thank you."}; the id without its angle brackets is the provider
// id (it is the message's Message-Id). Refusals carry {"message": ...}.
// ResponseStatus: 2xx is OK; a 400 saying the 'to' parameter is not a valid address is a
// permanent rejection of the address (RecipientRejected); otherwise HttpApiStatus (401/403: the
// key or the domain refused, 404: no such domain, 429 and 5xx: provider errors; other 4xx
// refuse this email). CheckRequest: GET /v4/domains/<domain>, the domain and its state; needs
// a key that can read.
class MailgunTransport : public ProviderTransportOf<kMailgunApi> {
 public:
  using ProviderTransportOf::ProviderTransportOf;
  // The form-encoded request body for `email` sent by `group`.
  static std::string Body(const OutgoingEmail& email, const std::string& group);
};

// The mailgun transport's registry entry (MAILROOM_TRANSPORT=mailgun; see ProviderEntry).
extern const TransportEntry kMailgunEntry;

}  // namespace mailroom
