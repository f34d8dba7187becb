#include "collector/feedback/webhook_signatures.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

// The Standard Webhooks specification's example (also Svix's libraries' test vector).
constexpr char kSwSecret[] = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
constexpr char kSwId[] = "msg_p5jXN8AQM9LWM0D4loKWxJek";
constexpr char kSwTimestamp[] = "1614265330";
constexpr char kSwBody[] = "{\"test\": 2432232314}";
constexpr char kSwSignature[] = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

// SendGrid's published test vector (its Node.js library's eventwebhook tests).
constexpr char kSgKey[] =
    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEDr2LjtURuePQzplybdC+u4CwrqDqBaWjcMMsTbhdbcwHBcepxo7yAQGh"
    "HPTnlvFYPAZFceEu/1FwCM/QmGUhA==";
constexpr char kSgSignature[] = "MEUCIQCtIHJeH93Y+qpYeWrySphQgpNGNr/"
                                "U+UyUlBkU6n7RAwIgJTz2C+8a8xonZGi6BpSzoQsbVRamr2nlxFDWYNH2j/0=";
constexpr char kSgTimestamp[] = "1588788367";
constexpr char kSgBody[] =
    "{\"category\":\"example_payload\",\"event\":\"test_event\",\"message_id\":\"message_id\"}";

// Mailgun's documented signature object, signed with a made-up key (Mailgun publishes none);
// the expected hex was computed apart, with Python's hmac module.
constexpr char kMgKey[] = "key-3ax6xnjp29jd6fds4gc373sgvjxteol0";
constexpr char kMgTimestamp[] = "1529006854";
constexpr char kMgToken[] = "a8ce0edb2dd8301dee6c2405235584e45aa91d1e9f979f3de0";
constexpr char kMgSignature[] = "b63c0701c4f4b614f272106a1b367c5c3369bcdca664ae73ebd52787e45eef07";

const absl::Duration kHour = absl::Hours(1);

absl::Time At(const char* unix_seconds, absl::Duration after = absl::Seconds(10)) {
  int64_t s = 0;
  EXPECT_TRUE(absl::SimpleAtoi(unix_seconds, &s));
  return absl::FromUnixSeconds(s) + after;
}

std::vector<std::string> SwKeys() {
  auto keys = ParseWebhookSecrets(kSwSecret);
  EXPECT_TRUE(keys.ok()) << keys.status();
  return *keys;
}

TEST(StandardWebhook, ThePublishedExampleVerifies) {
  EXPECT_TRUE(VerifyStandardWebhook(SwKeys(), kSwId, kSwTimestamp, kSwSignature, kSwBody,
                                    At(kSwTimestamp), kHour)
                  .ok());
  // Among several entries (a rotation), and beside a scheme that is not ours.
  EXPECT_TRUE(VerifyStandardWebhook(SwKeys(), kSwId, kSwTimestamp,
                                    absl::StrCat("v1a,AAAA v1,Zm9v ", kSwSignature), kSwBody,
                                    At(kSwTimestamp), kHour)
                  .ok());
  // With the right key second of two.
  auto two = ParseWebhookSecrets(
      absl::StrCat("whsec_", absl::Base64Escape(std::string(32, 'x')), " ", kSwSecret));
  ASSERT_TRUE(two.ok());
  EXPECT_TRUE(VerifyStandardWebhook(*two, kSwId, kSwTimestamp, kSwSignature, kSwBody,
                                    At(kSwTimestamp), kHour)
                  .ok());
}

TEST(StandardWebhook, ForgeriesAreRefused) {
  const absl::Time now = At(kSwTimestamp);
  auto refused = [&](absl::string_view id, absl::string_view ts, absl::string_view sig,
                     absl::string_view body, absl::Time at) {
    return absl::IsPermissionDenied(VerifyStandardWebhook(SwKeys(), id, ts, sig, body, at, kHour));
  };
  EXPECT_TRUE(refused(kSwId, kSwTimestamp, kSwSignature, "{\"test\": 2432232315}", now));  // body
  EXPECT_TRUE(refused("msg_other", kSwTimestamp, kSwSignature, kSwBody, now));             // id
  EXPECT_TRUE(refused(kSwId, "1614265331", kSwSignature, kSwBody, now));                   // time
  EXPECT_TRUE(refused(kSwId, kSwTimestamp,
                      "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OF=", kSwBody, now));  // sig
  EXPECT_TRUE(refused(kSwId, kSwTimestamp, "", kSwBody, now));                            // none
  EXPECT_TRUE(refused(kSwId, kSwTimestamp, "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", kSwBody,
                      now));  // without its scheme
  EXPECT_TRUE(refused("", kSwTimestamp, kSwSignature, kSwBody, now));
  // Replayed later than the window, or dated ahead of it.
  EXPECT_TRUE(refused(kSwId, kSwTimestamp, kSwSignature, kSwBody, At(kSwTimestamp, kHour * 2)));
  EXPECT_TRUE(
      refused(kSwId, kSwTimestamp, kSwSignature, kSwBody, At(kSwTimestamp, -absl::Minutes(6))));
  EXPECT_TRUE(refused(kSwId, "1614265330.5", kSwSignature, kSwBody, now));
  // Another secret.
  auto other = ParseWebhookSecrets(
      absl::StrCat("whsec_", absl::Base64Escape(std::string(32, 'k'))));
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(
      VerifyStandardWebhook(*other, kSwId, kSwTimestamp, kSwSignature, kSwBody, now, kHour)));
}

TEST(StandardWebhook, SecretsMustBeWhsecAndBase64OfEnoughBytes) {
  EXPECT_FALSE(ParseWebhookSecrets("").ok());
  EXPECT_FALSE(ParseWebhookSecrets("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").ok());
  EXPECT_FALSE(ParseWebhookSecrets("whsec_c2hvcnQ=").ok());  // 5 bytes
  auto bad = ParseWebhookSecrets(absl::StrCat(kSwSecret, " whsec_!!"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "secret 2 must be whsec_ and the base64 of 24 to 64 random bytes");
}

TEST(Sendgrid, ThePublishedVectorVerifies) {
  auto key = ParseSendgridKey(kSgKey);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_TRUE(
      VerifySendgrid(*key, kSgSignature, kSgTimestamp, kSgBody, At(kSgTimestamp), kHour).ok());
  // The same key in PEM.
  auto pem = ParseSendgridKey(absl::StrCat("-----BEGIN PUBLIC KEY-----\n", std::string(kSgKey, 64),
                                           "\n", std::string(kSgKey + 64),
                                           "\n-----END PUBLIC KEY-----\n"));
  ASSERT_TRUE(pem.ok()) << pem.status();
  EXPECT_TRUE(
      VerifySendgrid(*pem, kSgSignature, kSgTimestamp, kSgBody, At(kSgTimestamp), kHour).ok());
}

TEST(Sendgrid, ForgeriesAreRefused) {
  auto key = ParseSendgridKey(kSgKey);
  ASSERT_TRUE(key.ok());
  const absl::Time now = At(kSgTimestamp);
  auto refused = [&](const EcKey& k, absl::string_view sig, absl::string_view ts,
                     absl::string_view body, absl::Time at) {
    return absl::IsPermissionDenied(VerifySendgrid(k, sig, ts, body, at, kHour));
  };
  EXPECT_TRUE(refused(*key, kSgSignature, kSgTimestamp, "payload", now));
  EXPECT_TRUE(refused(*key,
                      "MEUCIQCtIHJeH93Y+qpYeWrySphQgpNGNr/U+UyUlBkU6n7RAwIgJTz2C+8a8xonZGi6BpSzoQsb"
                      "VRamr2nlxFDWYNH3j/0=",
                      kSgTimestamp, kSgBody, now));
  EXPECT_TRUE(refused(*key, kSgSignature, "1588788368", kSgBody, now));
  EXPECT_TRUE(refused(*key, kSgSignature, "timestamp", kSgBody, now));
  EXPECT_TRUE(refused(*key, "", kSgTimestamp, kSgBody, now));
  EXPECT_TRUE(refused(*key, kSgSignature, kSgTimestamp, kSgBody, At(kSgTimestamp, kHour * 2)));
  // SendGrid's test of an invalid key: another P-256 key.
  auto other = ParseSendgridKey(
      "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEqTxd43gyp8IOEto2LdIfjRQrIbsd4SXZkLW6jDutdhXSJCWHw8REntlo"
      "7aNDthvj+y7GjUuFDb/R1NGe1OPzpA==");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE(refused(*other, kSgSignature, kSgTimestamp, kSgBody, now));
}

TEST(Sendgrid, KeysThatAreNotP256AreRefusedAtStart) {
  EXPECT_TRUE(absl::IsInvalidArgument(ParseSendgridKey("not a key").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseSendgridKey("").status()));
  // An RSA key in PEM (SNS's kind of key) is no SendGrid key.
  EXPECT_TRUE(absl::IsInvalidArgument(
      ParseSendgridKey("-----BEGIN PUBLIC KEY-----\n"
                       "MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQC9kVk+FJvRVNfobrzyvv3gUPrr\n"
                       "SDCJkhcG2pt57qqLMvV/rKsfacUOtqsCZpozCHH2SuSa9peZv7B4QvSlmefBj46b\n"
                       "ZzPCX+qDoEXRZsjhbte7Wjxgwawt1UCvgQo+JwG1nKbYGjGpTMCdGYkxm2oGun1j\n"
                       "USZdQ3ZPQMSkqYgwYwIDAQAB\n-----END PUBLIC KEY-----\n")
          .status()));
}

TEST(Mailgun, TheDocumentedSignatureObjectVerifies) {
  EXPECT_TRUE(
      VerifyMailgun(kMgKey, kMgTimestamp, kMgToken, kMgSignature, At(kMgTimestamp), kHour).ok());
  // Hex in capitals is the same signature.
  EXPECT_TRUE(VerifyMailgun(kMgKey, kMgTimestamp, kMgToken, absl::AsciiStrToUpper(kMgSignature),
                            At(kMgTimestamp), kHour)
                  .ok());
}

TEST(Mailgun, ForgeriesAreRefused) {
  const absl::Time now = At(kMgTimestamp);
  auto refused = [&](absl::string_view key, absl::string_view ts, absl::string_view token,
                     absl::string_view sig, absl::Time at) {
    return absl::IsPermissionDenied(VerifyMailgun(key, ts, token, sig, at, kHour));
  };
  EXPECT_TRUE(refused("key-other", kMgTimestamp, kMgToken, kMgSignature, now));
  EXPECT_TRUE(refused(kMgKey, "1529006855", kMgToken, kMgSignature, now));
  EXPECT_TRUE(refused(kMgKey, kMgTimestamp, "b8ce0edb2dd8301dee6c2405235584e45aa91d1e9f979f3de0",
                      kMgSignature, now));
  EXPECT_TRUE(refused(kMgKey, kMgTimestamp, kMgToken, "", now));
  EXPECT_TRUE(refused(kMgKey, kMgTimestamp, "", kMgSignature, now));
  EXPECT_TRUE(refused(kMgKey, kMgTimestamp, kMgToken, kMgSignature, At(kMgTimestamp, kHour * 2)));
}

TEST(BasicAuth, OnlyTheConfiguredCredentialsPass) {
  // base64("mailroom:correct-horse-battery"), computed apart.
  const char kRight[] = "Basic bWFpbHJvb206Y29ycmVjdC1ob3JzZS1iYXR0ZXJ5";
  EXPECT_TRUE(VerifyBasicAuth("mailroom:correct-horse-battery", kRight).ok());
  for (const char* wrong :
       {"", "Basic", "Basic bWFpbHJvb206Y29ycmVjdC1ob3JzZS1iYXR0ZXJ6",
        "Bearer bWFpbHJvb206Y29ycmVjdC1ob3JzZS1iYXR0ZXJ5", "Basic bWFpbHJvb206"}) {
    absl::Status st = VerifyBasicAuth("mailroom:correct-horse-battery", wrong);
    EXPECT_TRUE(absl::IsUnauthenticated(st)) << wrong;
    EXPECT_EQ(st.message().find("correct-horse"), absl::string_view::npos);
  }
}

}  // namespace
}  // namespace mailroom
