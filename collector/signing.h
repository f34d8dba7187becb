#pragma once

#include <array>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/hmac.h"  // HmacSha256, which the signer and its callers use

namespace mailroom {

// What a token authorizes; selects the signed message's prefix.
enum class TokenAction { kActivation, kPasswordRecovery };

// The action named as on the wire and in `verify --action=` ("activation",
// "password_recovery"). InvalidArgument for any other name.
absl::StatusOr<TokenAction> ParseTokenAction(absl::string_view name);

// A 32-byte HMAC-SHA256 key (MAILROOM_SECRET_KEY). Never log it.
struct SigningKey {
  std::array<unsigned char, 32> bytes{};
};

// Parses exactly 64 hex characters. The error says what is wrong (length, position of a bad
// character) and never echoes the key.
absl::StatusOr<SigningKey> ParseSigningKey(absl::string_view hex);

// Parses a comma-separated list of keys (for verification across key rotation: sign with the
// first, accept any).
absl::StatusOr<std::vector<SigningKey>> ParseSigningKeys(absl::string_view comma_separated);

// mailroom's token: base64url_without_padding(secret[32] || HMAC-SHA256(key, msg)), msg =
// "/activate" || secret, or "/recover" || secret || code (5 ASCII digits). Always 86
// characters. InvalidArgument for a secret that is not 32 bytes or, for recovery, a code that
// is not 5 ASCII digits.
absl::StatusOr<std::string> SignToken(const SigningKey& key, TokenAction action,
                                      absl::string_view secret, absl::string_view code);

// Checks a token (and, for recovery, its code) against every key in constant time: all keys
// are tried, comparisons use CRYPTO_memcmp, so timing reveals neither the match nor its
// position. Only the signer's own encoding is accepted: exactly 86 characters of the base64url
// alphabet, no padding or whitespace, and the last character's 4 unused low bits zero (so one
// token has exactly one accepted spelling). OK when one key matches; InvalidArgument for a
// malformed token or recovery code; PermissionDenied for a wrong signature. Messages never
// contain the token.
absl::Status VerifyToken(absl::Span<const SigningKey> keys, TokenAction action,
                         absl::string_view token, absl::string_view code);

}  // namespace mailroom
