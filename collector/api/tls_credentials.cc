#include "collector/api/tls_credentials.h"

#include "common/pem.h"
#include "grpcpp/security/server_credentials.h"

namespace mailroom {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> LoadServerCredentials(
    const TlsFiles& files) {
  if (files.cert_file.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(
      files.client_ca_file.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                   : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  auto cert = ReadPem("MAILROOM_TLS_CERT", files.cert_file);
  if (!cert.ok()) return cert.status();
  auto key = ReadPem("MAILROOM_TLS_KEY", files.key_file);
  if (!key.ok()) return key.status();
  ssl.pem_key_cert_pairs.push_back({*std::move(key), *std::move(cert)});
  if (!files.client_ca_file.empty()) {
    auto ca = ReadPem("MAILROOM_TLS_CLIENT_CA", files.client_ca_file);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
  }
  return grpc::SslServerCredentials(ssl);
}

}  // namespace mailroom
