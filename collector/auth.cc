#include "collector/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace mailroom {
namespace {

std::string Sha256(absl::string_view s) {
  unsigned char out[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), out);
  return std::string(reinterpret_cast<char*>(out), sizeof out);
}

}  // namespace

Authenticator::Authenticator(const std::vector<std::string>& tokens, bool allow_anonymous)
    : allow_anonymous_(allow_anonymous) {
  for (const auto& t : tokens) digests_.push_back(Sha256(t));
}

grpc::Status Authenticator::Check(const grpc::ServerContextBase& context) const {
  if (digests_.empty()) {
    if (allow_anonymous_) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no subscriber credentials configured");
  }
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing \"authorization: Bearer <token>\" metadata");
  }
  absl::string_view value(it->second.data(), it->second.size());
  constexpr absl::string_view kPrefix = "Bearer ";
  if (!absl::StartsWithIgnoreCase(value, kPrefix)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "authorization metadata is not a Bearer token");
  }
  const std::string digest = Sha256(value.substr(kPrefix.size()));
  int matches = 0;
  for (const auto& d : digests_) {
    matches |= CRYPTO_memcmp(d.data(), digest.data(), d.size()) == 0;
  }
  if (matches == 0) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "invalid bearer token");
  }
  return grpc::Status::OK;
}

}  // namespace mailroom
