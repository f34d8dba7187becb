#pragma once

#include "sender/transport/transport_entry.h"

namespace mailroom {

// The smtp transport (MAILROOM_TRANSPORT=smtp): its MAILROOM_SMTP_* settings (SmtpSettings:
// the URL and one way to authenticate, a password or XOAUTH2 tokens), its construction and its
// doctor check: one SMTP session as the transport opens them (TLS, certificate verification,
// AUTH by password or with an XOAUTH2 token fetched from the configured source), ending with
// NOOP: no mail.
extern const TransportEntry kSmtpEntry;

}  // namespace mailroom
