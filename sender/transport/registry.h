#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/env.h"
#include "sender/transport/transport.h"
#include "sender/transport/transport_entry.h"

namespace mailroom {

// Every transport the sender can use, one entry each (TransportEntry), in the order
// MAILROOM_TRANSPORT's help and errors list them. A new transport is one line in registry.cc.
const std::vector<const TransportEntry*>& TransportEntries();

// The entry whose kind is `kind`, or null.
const TransportEntry* FindTransportEntry(absl::string_view kind);

// The kinds as a sentence: "file, smtp, ses, ..., resend or sandbox".
std::string TransportKinds();

// The transport settings' rows under `vars`' names: MAILROOM_TRANSPORT's (the primary's only:
// MAILROOM_FAILOVER_TRANSPORT is the sender's own row) and every entry's.
SettingsTable TransportSettingsRows(const TransportVars& vars);

// Reads and checks one transport's settings, named by `vars`, into `config`'s kind (`kind`,
// as MAILROOM_TRANSPORT or MAILROOM_FAILOVER_TRANSPORT said, lower case) and settings: every
// entry's variables are read (a malformed value of any of them is an error), then the chosen
// entry checks its own. The shared fields (connections, timeouts, group) are left as they are.
// InvalidArgument naming the variable for an unknown kind or a bad setting; never a secret.
absl::Status LoadTransportConfig(const Env& env, const TransportVars& vars, const std::string& kind,
                                 TransportConfig* config);

}  // namespace mailroom
