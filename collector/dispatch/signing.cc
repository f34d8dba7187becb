#include "collector/dispatch/signing.h"

#include <openssl/crypto.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace mailroom {
namespace {

constexpr size_t kSecretSize = 32;
constexpr size_t kTokenChars = 86;  // base64url of 64 bytes, unpadded

// The value of a base64url character, or -1 for any other byte ('+', '/', '=', whitespace…).
int Base64UrlValue(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}

// True when `token` is the one spelling the signer produces for some 64 bytes: 86 base64url
// characters whose last one carries 2 data bits and 4 zero bits. A decoder that ignores those 4
// bits would take 16 strings for each token.
bool IsCanonicalToken(absl::string_view token) {
  if (token.size() != kTokenChars) return false;
  for (char c : token) {
    if (Base64UrlValue(c) < 0) return false;
  }
  return (Base64UrlValue(token.back()) & 0x0f) == 0;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool AllDigits(absl::string_view code) {
  for (char c : code) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// The code this action signs, or an error: password recovery's is exactly 5 digits,
// activation's is never signed, another action's is signed when given (5 to 12 digits).
absl::StatusOr<absl::string_view> SignedCode(const TokenAction& action, absl::string_view code) {
  if (action.RequiresCode()) {
    if (code.size() != 5 || !AllDigits(code)) {
      return absl::InvalidArgumentError("recovery code must be exactly 5 ASCII digits");
    }
    return code;
  }
  if (action == TokenAction::kActivation || code.empty()) return absl::string_view();
  if (code.size() < 5 || code.size() > 12 || !AllDigits(code)) {
    return absl::InvalidArgumentError("code must be 5 to 12 ASCII digits");
  }
  return code;
}

}  // namespace

const TokenAction TokenAction::kActivation("activation");
const TokenAction TokenAction::kPasswordRecovery("password_recovery");

std::string TokenAction::Domain() const {
  if (*this == kActivation) return "/activate";
  if (*this == kPasswordRecovery) return "/recover";
  return absl::StrCat("/action/", name_, "/");
}

absl::StatusOr<TokenAction> ParseTokenAction(absl::string_view name) {
  bool ok = !name.empty() && name.size() <= 63 && name[0] >= 'a' && name[0] <= 'z';
  for (char c : name) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  }
  if (!ok) return absl::InvalidArgumentError("action name must match [a-z][a-z0-9_]{0,62}");
  return TokenAction(std::string(name));
}

absl::StatusOr<SigningKey> ParseSigningKey(absl::string_view hex) {
  if (hex.size() != 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("must be 64 hex characters (32 bytes), got ", hex.size(), " characters"));
  }
  SigningKey key;
  for (size_t i = 0; i < 32; ++i) {
    int hi = HexValue(hex[2 * i]), lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError(absl::StrCat("must be 64 hex characters; character ",
                                                     2 * i + (hi < 0 ? 1 : 2), " is not hex"));
    }
    key.bytes[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return key;
}

absl::StatusOr<std::vector<SigningKey>> ParseSigningKeys(absl::string_view comma_separated) {
  std::vector<SigningKey> keys;
  int n = 0;
  for (absl::string_view part : absl::StrSplit(comma_separated, ',')) {
    ++n;
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;
    auto key = ParseSigningKey(part);
    if (!key.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("key ", n, ": ", key.status().message()));
    }
    keys.push_back(*key);
  }
  if (keys.empty()) return absl::InvalidArgumentError("no key given");
  return keys;
}

absl::StatusOr<std::string> SignToken(const SigningKey& key, const TokenAction& action,
                                      absl::string_view secret, absl::string_view code) {
  if (secret.size() != kSecretSize) {
    return absl::InvalidArgumentError(absl::StrCat("secret must be 32 bytes, got ", secret.size()));
  }
  auto signed_code = SignedCode(action, code);
  if (!signed_code.ok()) return signed_code.status();
  absl::string_view k(reinterpret_cast<const char*>(key.bytes.data()), key.bytes.size());
  std::string raw = absl::StrCat(secret, HmacSha256(k, absl::StrCat(action.Domain(), secret,
                                                                    *signed_code)));
  std::string token;
  absl::WebSafeBase64Escape(raw, &token);  // unpadded
  return token;
}

absl::Status WellFormed(absl::string_view token) {
  if (token.size() != kTokenChars) {
    return absl::InvalidArgumentError(
        absl::StrCat("token must be ", kTokenChars, " characters, got ", token.size()));
  }
  if (!IsCanonicalToken(token)) {
    return absl::InvalidArgumentError("token is not the unpadded base64url of 64 bytes");
  }
  return absl::OkStatus();
}

absl::Status VerifyToken(absl::Span<const SigningKey> keys, const TokenAction& action,
                         absl::string_view token, absl::string_view code) {
  absl::Status spelling = WellFormed(token);
  if (!spelling.ok()) return spelling;
  std::string raw;
  if (!absl::WebSafeBase64Unescape(token, &raw) || raw.size() != 2 * kSecretSize) {
    return absl::InvalidArgumentError("token is not the unpadded base64url of 64 bytes");
  }
  auto signed_code = SignedCode(action, code);
  if (!signed_code.ok()) return signed_code.status();
  if (keys.empty()) return absl::FailedPreconditionError("no verification key configured");
  absl::string_view secret(raw.data(), kSecretSize);
  absl::string_view mac(raw.data() + kSecretSize, kSecretSize);
  const std::string msg = absl::StrCat(action.Domain(), secret, *signed_code);
  int match = 0;
  for (const SigningKey& key : keys) {
    absl::string_view k(reinterpret_cast<const char*>(key.bytes.data()), key.bytes.size());
    const std::string expected = HmacSha256(k, msg);
    match |= CRYPTO_memcmp(expected.data(), mac.data(), kSecretSize) == 0;
  }
  if (match == 0) return absl::PermissionDeniedError("signature does not match any key");
  return absl::OkStatus();
}

}  // namespace mailroom
