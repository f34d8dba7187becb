#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "sender/transport/transport.h"

namespace mailroom {

// Builds the transport `config.kind` names, as its registry entry says (registry.h: "file",
// "smtp", "ses", "http", "postmark", "sendgrid", "mailgun", "resend" or "sandbox"; file
// directories are created; nothing connects yet). FailedPrecondition when the file (or sandbox)
// directory cannot be made, InvalidArgument for an unknown kind or an http (or sandbox feedback)
// secret that does not parse; each names the variable.
absl::StatusOr<std::unique_ptr<Transport>> MakeTransport(const TransportConfig& config);

}  // namespace mailroom
