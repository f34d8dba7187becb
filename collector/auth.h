#pragma once

#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"

namespace mailroom {

// Checks `authorization: Bearer <token>` metadata against the configured subscriber tokens.
// Only SHA-256 digests of the tokens are kept; a presented token is hashed and compared with
// every digest in constant time (CRYPTO_memcmp, no early exit), so timing reveals neither
// which token matched nor how much of one. Thread-safe after construction.
class Authenticator {
 public:
  // `tokens` empty and `allow_anonymous` false rejects everything; `allow_anonymous` is the
  // explicit development switch (or mutual TLS, which authenticates at the transport).
  Authenticator(const std::vector<std::string>& tokens, bool allow_anonymous);

  // OK, or UNAUTHENTICATED with a message that never contains the presented credential.
  grpc::Status Check(const grpc::ServerContextBase& context) const;

 private:
  std::vector<std::string> digests_;
  bool allow_anonymous_;
};

}  // namespace mailroom
