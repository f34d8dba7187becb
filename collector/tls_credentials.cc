#include "collector/tls_credentials.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/server_credentials.h"

namespace mailroom {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* variable) {
  std::ifstream f(path);
  std::stringstream ss;
  if (f) ss << f.rdbuf();
  if (!f) {
    return absl::FailedPreconditionError(absl::StrCat(variable, ": cannot read ", path));
  }
  return ss.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> LoadServerCredentials(
    const TlsFiles& files) {
  if (files.cert_file.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(
      files.client_ca_file.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                   : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  auto cert = ReadPem(files.cert_file, "MAILROOM_TLS_CERT");
  if (!cert.ok()) return cert.status();
  auto key = ReadPem(files.key_file, "MAILROOM_TLS_KEY");
  if (!key.ok()) return key.status();
  ssl.pem_key_cert_pairs.push_back({*std::move(key), *std::move(cert)});
  if (!files.client_ca_file.empty()) {
    auto ca = ReadPem(files.client_ca_file, "MAILROOM_TLS_CLIENT_CA");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
  }
  return grpc::SslServerCredentials(ssl);
}

}  // namespace mailroom
