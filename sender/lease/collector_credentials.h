#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"

namespace mailroom {

// How the sender connects to the collector: plaintext, or TLS with an optional CA and client
// certificate (mutual TLS), as MAILROOM_COLLECTOR_TLS/_CA/_CLIENT_CERT/_CLIENT_KEY say.
struct CollectorTls {
  bool enabled = false;
  std::string ca_file;           // "" = system roots
  std::string client_cert_file;  // with client_key_file, or neither
  std::string client_key_file;
};

// Reads the PEM files and builds the channel credentials. FailedPrecondition naming the
// variable and file when one cannot be read or is empty (the key's contents are never shown).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> CollectorCredentials(
    const CollectorTls& tls);

}  // namespace mailroom
