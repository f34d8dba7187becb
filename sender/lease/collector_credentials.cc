#include "sender/lease/collector_credentials.h"

#include "common/pem.h"
#include "grpcpp/grpcpp.h"

namespace mailroom {

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> CollectorCredentials(
    const CollectorTls& tls) {
  if (!tls.enabled) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  if (!tls.ca_file.empty()) {
    auto ca = ReadPem("MAILROOM_COLLECTOR_CA", tls.ca_file);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
  }
  if (!tls.client_cert_file.empty()) {
    auto cert = ReadPem("MAILROOM_COLLECTOR_CLIENT_CERT", tls.client_cert_file);
    if (!cert.ok()) return cert.status();
    auto key = ReadPem("MAILROOM_COLLECTOR_CLIENT_KEY", tls.client_key_file);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace mailroom
