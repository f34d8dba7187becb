#pragma once

#include <string>

#include "sender/transport/provider_transport.h"
#include "sender/transport/transport_entry.h"

namespace mailroom {

// Postmark's Email API (base URL ProviderSettings::api_url, https://api.postmarkapp.com
// when empty): POST /email with the server token in X-Postmark-Server-Token.
extern const ProviderApi kPostmarkApi;

// Postmark's Email API: one JSON message (From, To, Subject, TextBody, HtmlBody, MessageStream,
// Tag = the action, Metadata = the email's tags and group, link and open tracking off).
// Postmark answers 200 with {"MessageID", "ErrorCode": 0} for an accepted email (MessageID is
// the provider id), and 422 with {"ErrorCode", "Message"} when it refuses one.
// ResponseStatus: OK for 200 with ErrorCode 0; ErrorCode 406 (inactive recipient: it bounced
// hard, complained or unsubscribed) is a permanent rejection of the address
// (RecipientRejected: the collector suppresses it); the codes that say nothing can be sent (10
// bad token, 100 maintenance, 400/401 sender signature missing or unconfirmed, 405 not allowed
// to send, 412 account pending, 413 account may not send, a message stream refused) are
// provider errors; other codes refuse this email (kInvalidArgument); 401, 429 and 5xx as
// HttpApiStatus says. CheckRequest: GET /server with the server token, the cheapest read that
// proves the token.
class PostmarkTransport : public ProviderTransportOf<kPostmarkApi> {
 public:
  using ProviderTransportOf::ProviderTransportOf;
  // The JSON request body for `email` (see the class comment).
  static std::string Body(const OutgoingEmail& email, const TransportConfig& config);
};

// The postmark transport's registry entry (MAILROOM_TRANSPORT=postmark; see ProviderEntry).
extern const TransportEntry kPostmarkEntry;

}  // namespace mailroom
