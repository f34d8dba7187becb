#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace mailroom {

// HMAC-SHA256(key, data), 32 raw bytes (OpenSSL). Used by the collector's token signer and
// the sender's webhook signatures. Thread-safe.
std::string HmacSha256(absl::string_view key, absl::string_view data);

// SHA-256(data), 32 raw bytes (OpenSSL). Thread-safe.
std::string Sha256(absl::string_view data);

}  // namespace mailroom
