#pragma once

#include "sender/transport/transport_entry.h"

namespace mailroom {

// The sandbox transport (MAILROOM_TRANSPORT=sandbox, a provider simulator): its
// MAILROOM_SANDBOX_* settings (SandboxSettings: the simulator's domain, where its events go),
// its construction and its doctor check: what it does instead of sending (a warning: nobody
// receives anything) and where its events go (the feedback URL's host, or none).
extern const TransportEntry kSandboxEntry;

}  // namespace mailroom
