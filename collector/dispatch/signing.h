#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/hmac.h"  // HmacSha256, which the signer and its callers use

namespace mailroom {

// What a token authorizes: an action's name (a row of mailroom.actions), which selects the
// signed message's domain string D(action):
//   D(activation) = "/activate", D(password_recovery) = "/recover",
//   D(any other name) = "/action/" || name || "/".
// Names match [a-z][a-z0-9_]{0,62}, so no domain is a prefix of another (docs/design.md,
// "Signing every action"). Copyable value; thread-compatible.
class TokenAction {
 public:
  static const TokenAction kActivation;
  static const TokenAction kPasswordRecovery;

  const std::string& name() const { return name_; }
  // The domain string D(action) the signed message starts with.
  std::string Domain() const;
  // Whether the action's code is always signed (password recovery: exactly 5 digits). Any
  // other action but activation signs the code it is given, when it is given one.
  bool RequiresCode() const { return name_ == "password_recovery"; }
  bool operator==(const TokenAction& o) const { return name_ == o.name_; }
  bool operator!=(const TokenAction& o) const { return name_ != o.name_; }

 private:
  explicit TokenAction(std::string name) : name_(std::move(name)) {}
  friend absl::StatusOr<TokenAction> ParseTokenAction(absl::string_view name);
  std::string name_;
};

// The action of that name, as on the wire (Job.action_name) and in `verify --action=`: any
// name matching [a-z][a-z0-9_]{0,62}. InvalidArgument for any other (the message does not
// echo it).
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
// D(action) || secret || code, the code appended only when the action carries one: always for
// password recovery (5 ASCII digits), never for activation (its code is not signed), for any
// other action when `code` is not empty (5 to 12 ASCII digits). Always 86 characters.
// InvalidArgument for a secret that is not 32 bytes or a code that does not fit.
absl::StatusOr<std::string> SignToken(const SigningKey& key, const TokenAction& action,
                                      absl::string_view secret, absl::string_view code);

// Whether `token` has the signer's one spelling of 64 bytes: exactly 86 characters of the
// base64url alphabet, no padding or whitespace, the last character's 4 unused low bits zero.
// Checks no signature and needs no key: a front end checks a link's token with it before the
// user has typed the link's code (a password recovery link's GET). OK, or InvalidArgument saying
// what is wrong (never the token). The action's name is checked by ParseTokenAction.
absl::Status WellFormed(absl::string_view token);

// Checks a token (and the code its action signs) against every key in constant time: all keys
// are tried, comparisons use CRYPTO_memcmp, so timing reveals neither the match nor its
// position. Only the signer's own encoding is accepted: exactly 86 characters of the base64url
// alphabet, no padding or whitespace, and the last character's 4 unused low bits zero (so one
// token has exactly one accepted spelling). OK when one key matches; InvalidArgument for a
// malformed token or code; PermissionDenied for a wrong signature. Messages never
// contain the token.
absl::Status VerifyToken(absl::Span<const SigningKey> keys, const TokenAction& action,
                         absl::string_view token, absl::string_view code);

}  // namespace mailroom
