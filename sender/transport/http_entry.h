#pragma once

#include "sender/transport/transport_entry.h"

namespace mailroom {

// The http transport (MAILROOM_TRANSPORT=http, a signed webhook): its MAILROOM_HTTP_* settings
// (HttpSettings: the receiver's URL, the signing secret, the Authorization header) and its
// construction (the secrets are parsed). It has no doctor check.
extern const TransportEntry kHttpEntry;

}  // namespace mailroom
