#include "sender/transport/transport_factory.h"

#include "absl/strings/str_cat.h"
#include "sender/transport/registry.h"

namespace mailroom {

absl::StatusOr<std::unique_ptr<Transport>> MakeTransport(const TransportConfig& config) {
  const TransportEntry* entry = FindTransportEntry(config.kind);
  if (entry == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("MAILROOM_TRANSPORT: unknown \"", config.kind, "\""));
  }
  return entry->make(config);
}

}  // namespace mailroom
