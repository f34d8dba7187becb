#include "collector/feedback/webhook_signatures.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/hmac.h"

namespace mailroom {
namespace {

constexpr char kSecretPrefix[] = "whsec_";
// How far ahead of our clock a signed timestamp may be.
constexpr absl::Duration kFutureSkew = absl::Minutes(5);

absl::Status Refused(absl::string_view why) { return absl::PermissionDeniedError(why); }

// Equal, in time that depends on neither string's content.
bool SameBytes(absl::string_view a, absl::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};

}  // namespace

absl::Status CheckTime(absl::Time at, absl::Time now, absl::Duration max_age) {
  if (at < now - max_age) return Refused("timestamp too old");
  if (at > now + kFutureSkew) return Refused("timestamp in the future");
  return absl::OkStatus();
}

absl::Status CheckTimestamp(absl::string_view unix_seconds, absl::Time now,
                            absl::Duration max_age) {
  int64_t seconds = 0;
  if (unix_seconds.empty() || unix_seconds.size() > 12 ||
      unix_seconds.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(unix_seconds, &seconds)) {
    return Refused("missing or malformed timestamp");
  }
  return CheckTime(absl::FromUnixSeconds(seconds), now, max_age);
}

absl::StatusOr<std::vector<std::string>> ParseWebhookSecrets(absl::string_view secrets) {
  std::vector<std::string> keys;
  int n = 0;
  for (absl::string_view s : absl::StrSplit(secrets, ' ', absl::SkipWhitespace())) {
    ++n;
    std::string key;
    if (!absl::ConsumePrefix(&s, kSecretPrefix) || !absl::Base64Unescape(s, &key) ||
        key.size() < 24 || key.size() > 64) {
      return absl::InvalidArgumentError(
          absl::StrCat("secret ", n, " must be whsec_ and the base64 of 24 to 64 random bytes"));
    }
    keys.push_back(std::move(key));
  }
  if (keys.empty()) return absl::InvalidArgumentError("no secret (whsec_ and base64)");
  return keys;
}

absl::Status VerifyStandardWebhook(const std::vector<std::string>& keys, absl::string_view id,
                                   absl::string_view timestamp, absl::string_view signature,
                                   absl::string_view body, absl::Time now, absl::Duration max_age) {
  if (id.empty() || id.size() > 256) return Refused("missing or malformed message id");
  absl::Status fresh = CheckTimestamp(timestamp, now, max_age);
  if (!fresh.ok()) return fresh;
  const std::string content = absl::StrCat(id, ".", timestamp, ".", body);
  bool match = false;
  // Every key against every v1 entry, without stopping at a match: the time taken tells
  // nothing of which one matched.
  for (const std::string& key : keys) {
    const std::string expected = absl::Base64Escape(HmacSha256(key, content));
    for (absl::string_view entry : absl::StrSplit(signature, ' ', absl::SkipWhitespace())) {
      if (!absl::ConsumePrefix(&entry, "v1,")) continue;  // other schemes (v1a) are not ours
      match |= SameBytes(entry, expected);
    }
  }
  return match ? absl::OkStatus() : Refused("signature does not verify");
}

absl::StatusOr<EcKey> ParseSendgridKey(absl::string_view key) {
  std::string text(absl::StripAsciiWhitespace(key));
  std::unique_ptr<EVP_PKEY, PkeyFree> pkey;
  if (absl::StartsWith(text, "-----BEGIN PUBLIC KEY-----")) {
    std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
    pkey.reset(PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr));
  } else {
    std::string der;
    if (absl::Base64Unescape(text, &der)) {
      const unsigned char* p = reinterpret_cast<const unsigned char*>(der.data());
      pkey.reset(d2i_PUBKEY(nullptr, &p, static_cast<long>(der.size())));
    }
  }
  if (pkey == nullptr || EVP_PKEY_get_base_id(pkey.get()) != EVP_PKEY_EC ||
      EVP_PKEY_get_bits(pkey.get()) != 256) {
    return absl::InvalidArgumentError(
        "not a P-256 public key (the base64 DER key SendGrid shows, or PEM)");
  }
  return EcKey(pkey.release(), PkeyFree());
}

absl::Status VerifySendgrid(const EcKey& key, absl::string_view signature,
                            absl::string_view timestamp, absl::string_view body, absl::Time now,
                            absl::Duration max_age) {
  absl::Status fresh = CheckTimestamp(timestamp, now, max_age);
  if (!fresh.ok()) return fresh;
  std::string der;
  if (signature.empty() || signature.size() > 200 || !absl::Base64Unescape(signature, &der)) {
    return Refused("missing or malformed signature");
  }
  const std::string content = absl::StrCat(timestamp, body);
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  if (ctx == nullptr ||
      EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key.get()) != 1 ||
      EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(der.data()), der.size(),
                       reinterpret_cast<const unsigned char*>(content.data()),
                       content.size()) != 1) {
    return Refused("signature does not verify");
  }
  return absl::OkStatus();
}

absl::Status VerifyMailgun(absl::string_view signing_key, absl::string_view timestamp,
                           absl::string_view token, absl::string_view signature, absl::Time now,
                           absl::Duration max_age) {
  absl::Status fresh = CheckTimestamp(timestamp, now, max_age);
  if (!fresh.ok()) return fresh;
  if (token.empty() || token.size() > 256) return Refused("missing or malformed token");
  const std::string expected = absl::BytesToHexString(
      HmacSha256(signing_key, absl::StrCat(timestamp, token)));
  if (!SameBytes(absl::AsciiStrToLower(signature), expected)) {
    return Refused("signature does not verify");
  }
  return absl::OkStatus();
}

absl::Status VerifyBasicAuth(absl::string_view expected, absl::string_view authorization) {
  // Digests of the same length: the comparison's time says nothing of either's length or text.
  const std::string want = Sha256(absl::StrCat("Basic ", absl::Base64Escape(expected)));
  const std::string got = Sha256(absl::StripAsciiWhitespace(authorization));
  if (authorization.empty()) return absl::UnauthenticatedError("credentials required");
  if (!SameBytes(want, got)) return absl::UnauthenticatedError("wrong credentials");
  return absl::OkStatus();
}

}  // namespace mailroom
