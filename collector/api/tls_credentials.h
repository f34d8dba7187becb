#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"

namespace mailroom {

// The PEM files the collector's TLS is configured with (MAILROOM_TLS_CERT, MAILROOM_TLS_KEY,
// MAILROOM_TLS_CLIENT_CA). All empty: plaintext. `client_ca_file` set: mutual TLS, clients must
// present a certificate signed by it.
struct TlsFiles {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
};

// Reads the files and builds the server credentials (insecure when `files.cert_file` is
// empty). FailedPrecondition naming the variable whose file cannot be read or is empty (ReadPem,
// common/pem.h); the message never contains the files' contents (the key is a secret).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> LoadServerCredentials(
    const TlsFiles& files);

}  // namespace mailroom
