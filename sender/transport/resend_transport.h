#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "sender/transport/provider_transport.h"
#include "sender/transport/transport_entry.h"

namespace mailroom {

// Resend's API (base URL ProviderSettings::api_url, https://api.resend.com when
// empty): POST /emails with "Authorization: Bearer <API key>".
extern const ProviderApi kResendApi;

// Resend's API: one JSON email (from, to, subject, text, html, tags = the email's tags and
// group, which come back in its webhooks) and an Idempotency-Key naming the job
// (IdempotencyKey): Resend sends an email once per key within 24 hours and answers a repeated
// request with the first one's answer, so a retry after an answer we lost does not deliver
// twice (the body must be the same: it is built from the job alone). Resend answers 200 {"id"}
// (the provider id); refusals carry {"statusCode", "name", "message"}. Click and open tracking
// are settings of the domain at Resend (they must be off: see docs/operations.md).
// ResponseStatus: 2xx is OK; invalid_idempotent_request (this job's key was used by an earlier
// request whose email was sent, with another body) is MaybeSent; a validation_error about the
// `to` field is a permanent rejection of the address (RecipientRejected); otherwise
// HttpApiStatus (401/403: the key or the sending domain refused, 409 concurrent request:
// retried, 429 rate or daily quota and 5xx: provider errors; other 4xx refuse this email).
// CheckRequest: GET /domains, which answers a sending-only key with 401 restricted_api_key,
// which still proves the key.
class ResendTransport : public ProviderTransportOf<kResendApi> {
 public:
  using ProviderTransportOf::ProviderTransportOf;
  // The JSON request body for `email` sent by `group`.
  static std::string Body(const OutgoingEmail& email, const std::string& group);
  // "mailroom/<group>/<job id>": the same on every try of one email, unique per email.
  static std::string IdempotencyKey(absl::string_view group, uint64_t job_id);
};

// The resend transport's registry entry (MAILROOM_TRANSPORT=resend; see ProviderEntry).
extern const TransportEntry kResendEntry;

}  // namespace mailroom
