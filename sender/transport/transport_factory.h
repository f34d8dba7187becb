#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "sender/transport/transport.h"

namespace mailroom {

// Builds the transport `config.kind` names: "file", "smtp", "ses" or "http" (file directories
// are created; nothing connects yet). FailedPrecondition when the file directory cannot be
// made, InvalidArgument for an unknown kind or an http secret that does not parse; each names
// the variable.
absl::StatusOr<std::unique_ptr<Transport>> MakeTransport(const TransportConfig& config);

}  // namespace mailroom
