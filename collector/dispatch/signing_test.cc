#include "collector/dispatch/signing.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kKeyHex[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

std::string Hex(absl::string_view h) { return absl::HexStringToBytes(h); }

// RFC 4231 HMAC-SHA256 test cases 1-4, 6 and 7 (5 is a truncated output).
TEST(HmacSha256Test, Rfc4231Vectors) {
  struct Case {
    std::string key, data, mac;
  } cases[] = {
      {std::string(20, '\x0b'), "Hi There",
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"Jefe", "what do ya want for nothing?",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {std::string(20, '\xaa'), std::string(50, '\xdd'),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {Hex("0102030405060708090a0b0c0d0e0f10111213141516171819"), std::string(50, '\xcd'),
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {std::string(131, '\xaa'),
       "This is a test using a larger than block-size key and a larger than block-size data. "
       "The key needs to be hashed before being used by the HMAC algorithm.",
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(absl::BytesToHexString(HmacSha256(c.key, c.data)), c.mac);
  }
}

// Every other action signs "/action/" || name || "/" || secret, then its code when it carries
// one: the HMAC of exactly that message, for a built-in (login_code, with its code; email_change
// without one) and for an action of the application's own.
TEST(SignTokenTest, OtherActionsSignTheirOwnDomain) {
  const SigningKey key = *ParseSigningKey(kKeyHex);
  const absl::string_view k(reinterpret_cast<const char*>(key.bytes.data()), key.bytes.size());
  const std::string secret(32, 'S');
  struct Case {
    std::string name, code, message;
  } cases[] = {
      {"login_code", "123456", "/action/login_code/" + secret + "123456"},
      {"email_change", "", "/action/email_change/" + secret},
      {"invitation", "", "/action/invitation/" + secret},
      {"document_signature", "12345678", "/action/document_signature/" + secret + "12345678"},
      {"x", "", "/action/x/" + secret},
  };
  for (const Case& c : cases) {
    auto action = ParseTokenAction(c.name);
    ASSERT_TRUE(action.ok()) << c.name;
    EXPECT_EQ(action->Domain(), "/action/" + c.name + "/");
    auto token = SignToken(key, *action, secret, c.code);
    ASSERT_TRUE(token.ok()) << c.name << ": " << token.status();
    std::string raw;
    ASSERT_TRUE(absl::WebSafeBase64Unescape(*token, &raw));
    EXPECT_EQ(raw, secret + HmacSha256(k, c.message)) << c.name;
    EXPECT_TRUE(VerifyToken({key}, *action, *token, c.code).ok()) << c.name;
  }
  EXPECT_EQ(TokenAction::kActivation.Domain(), "/activate");
  EXPECT_EQ(TokenAction::kPasswordRecovery.Domain(), "/recover");
  EXPECT_EQ(ParseTokenAction("activation")->Domain(), "/activate");
  EXPECT_EQ(ParseTokenAction("password_recovery")->Domain(), "/recover");
}

// A token of one action never verifies as another's, nor with a code moved into or out of the
// message: the domains are prefix-free.
TEST(SignTokenTest, ATokenVerifiesForItsOwnActionOnly) {
  const SigningKey key = *ParseSigningKey(kKeyHex);
  const std::string secret(32, 'T');
  const std::string token = *SignToken(key, *ParseTokenAction("login_code"), secret, "123456");
  for (const char* other : {"activation", "password_recovery", "login_cod", "login_code_",
                            "login_code1", "email_change"}) {
    EXPECT_FALSE(VerifyToken({key}, *ParseTokenAction(other), token, "123456").ok()) << other;
  }
  EXPECT_FALSE(VerifyToken({key}, *ParseTokenAction("login_code"), token, "").ok());
  EXPECT_FALSE(VerifyToken({key}, *ParseTokenAction("login_code"), token, "123457").ok());
  const std::string bare = *SignToken(key, *ParseTokenAction("login_code"), secret, "");
  EXPECT_NE(bare, token);
}

// Names outside [a-z][a-z0-9_]{0,62} are refused, so that no domain can contain a '/' (and
// end where another begins); codes of other actions are 5 to 12 digits.
TEST(SignTokenTest, RefusesNamesOutsideThePatternAndMalformedCodes) {
  const std::vector<std::string> names = {"",
                                          "Login",
                                          "1code",
                                          "_x",
                                          "a/b",
                                          "a-b",
                                          "a b",
                                          "tr\xc3\xa8s",
                                          "login_code/",
                                          std::string(64, 'a'),
                                          std::string("a\0b", 3)};
  for (const std::string& bad : names) {
    auto action = ParseTokenAction(bad);
    ASSERT_FALSE(action.ok()) << bad;
    EXPECT_EQ(action.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(action.status().message(), "action name must match [a-z][a-z0-9_]{0,62}");
  }
  EXPECT_TRUE(ParseTokenAction(std::string(63, 'a')).ok());
  EXPECT_TRUE(ParseTokenAction("a0_9").ok());
  const SigningKey key = *ParseSigningKey(kKeyHex);
  const std::string secret(32, 'U');
  const TokenAction login = *ParseTokenAction("login_code");
  for (const char* bad : {"1234", "1234567890123", "12345a", " 123456"}) {
    EXPECT_EQ(SignToken(key, login, secret, bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

// SPEC.md's vectors, produced by mailroom's own C collector.
TEST(SignTokenTest, ActivationVectorMatchesMailroom) {
  auto key = ParseSigningKey(kKeyHex);
  ASSERT_TRUE(key.ok());
  auto token = SignToken(*key, TokenAction::kActivation,
                         Hex("3ca243c69e1dc0d1f0311379120dcb80a277b64a1d3588cf15e9507a02e21ed4"),
                         "94896");
  ASSERT_TRUE(token.ok());
  EXPECT_EQ(
      *token,
      "PKJDxp4dwNHwMRN5Eg3LgKJ3tkodNYjPFelQegLiHtRvzbQpO1pD6At0uvhgfW5xFZxZqXWUac52g65ko1kY3Q");
  EXPECT_EQ(token->size(), 86u);
}

TEST(SignTokenTest, PasswordRecoveryVectorMatchesMailroom) {
  auto key = ParseSigningKey(kKeyHex);
  ASSERT_TRUE(key.ok());
  auto token = SignToken(*key, TokenAction::kPasswordRecovery,
                         Hex("2ea219cf963bc55678b15b247d93e59d5600c71a66126bd951bdd86ebf229e25"),
                         "42565");
  ASSERT_TRUE(token.ok());
  EXPECT_EQ(
      *token,
      "LqIZz5Y7xVZ4sVskfZPlnVYAxxpmEmvZUb3Ybr8iniULPg4NZs3Mbl9-42HCOCfjTMapULm8JSIYLhaVylgjAg");
}

TEST(SignTokenTest, RejectsMalformedInput) {
  auto key = *ParseSigningKey(kKeyHex);
  EXPECT_FALSE(SignToken(key, TokenAction::kActivation, "short", "12345").ok());
  std::string secret(32, 'x');
  EXPECT_FALSE(SignToken(key, TokenAction::kPasswordRecovery, secret, "1234").ok());
  EXPECT_FALSE(SignToken(key, TokenAction::kPasswordRecovery, secret, "12a45").ok());
  EXPECT_FALSE(SignToken(key, TokenAction::kPasswordRecovery, secret, "").ok());
  // Activation does not sign the code, so any code (even none) is fine.
  EXPECT_TRUE(SignToken(key, TokenAction::kActivation, secret, "").ok());
}

class VerifyTokenTest : public ::testing::Test {
 protected:
  SigningKey key_ = *ParseSigningKey(kKeyHex);
  SigningKey other_ = *ParseSigningKey(std::string(64, 'f'));
  std::string secret_ = Hex("2ea219cf963bc55678b15b247d93e59d5600c71a66126bd951bdd86ebf229e25");
  std::string token_ = *SignToken(key_, TokenAction::kPasswordRecovery, secret_, "42565");
};

TEST_F(VerifyTokenTest, AcceptsTheSigningKeyAloneOrAnywhereInARotation) {
  std::vector<SigningKey> one = {key_};
  std::vector<SigningKey> rotated = {other_, key_};
  EXPECT_TRUE(VerifyToken(one, TokenAction::kPasswordRecovery, token_, "42565").ok());
  EXPECT_TRUE(VerifyToken(rotated, TokenAction::kPasswordRecovery, token_, "42565").ok());
}

TEST_F(VerifyTokenTest, RejectsWrongKeyCodeActionAndTampering) {
  std::vector<SigningKey> keys = {key_};
  std::vector<SigningKey> wrong = {other_};
  EXPECT_EQ(VerifyToken(wrong, TokenAction::kPasswordRecovery, token_, "42565").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(VerifyToken(keys, TokenAction::kPasswordRecovery, token_, "42566").ok());
  EXPECT_FALSE(VerifyToken(keys, TokenAction::kActivation, token_, "42565").ok());
  for (size_t pos : {size_t{3}, size_t{50}, size_t{85}}) {  // secret part, signature part
    std::string tampered = token_;
    tampered[pos] = tampered[pos] == 'A' ? 'B' : 'A';
    EXPECT_FALSE(VerifyToken(keys, TokenAction::kPasswordRecovery, tampered, "42565").ok()) << pos;
  }
  EXPECT_EQ(VerifyToken(keys, TokenAction::kPasswordRecovery, token_.substr(1), "42565").code(),
            absl::StatusCode::kInvalidArgument);
  std::string bad_chars = token_;
  bad_chars[10] = '*';
  EXPECT_EQ(VerifyToken(keys, TokenAction::kPasswordRecovery, bad_chars, "42565").code(),
            absl::StatusCode::kInvalidArgument);
  auto st = VerifyToken(wrong, TokenAction::kPasswordRecovery, token_, "42565");
  EXPECT_THAT(std::string(st.message()), Not(HasSubstr(token_)));
}

// 86 characters carry 516 bits for 512: the last character's low 4 bits are always zero in
// the signer's output. A verifier that ignores them accepts 16 strings for one token; only the
// canonical one may pass, and nothing but the unpadded base64url alphabet.
TEST_F(VerifyTokenTest, AcceptsOnlyTheCanonicalEncoding) {
  std::vector<SigningKey> keys = {key_};
  ASSERT_TRUE(VerifyToken(keys, TokenAction::kPasswordRecovery, token_, "42565").ok());
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  const size_t last = alphabet.find(token_.back());
  ASSERT_EQ(last % 16, 0u);
  for (size_t low = 1; low < 16; ++low) {
    std::string other = token_;
    other.back() = alphabet[last + low];
    EXPECT_EQ(VerifyToken(keys, TokenAction::kPasswordRecovery, other, "42565").code(),
              absl::StatusCode::kInvalidArgument)
        << "low bits " << low;
  }
  std::string standard = token_;  // the standard alphabet's '+' and '/' for '-' and '_'
  for (char& c : standard) c = c == '-' ? '+' : c == '_' ? '/' : c;
  ASSERT_NE(standard, token_);
  std::string spaced = token_;
  spaced[40] = ' ';
  for (const std::string& bad :
       {standard, token_ + "==", token_.substr(0, 84) + "==", token_ + "\n", " " + token_, spaced,
        token_.substr(0, 40) + " " + token_.substr(40), token_.substr(0, 85), token_ + "A",
        std::string()}) {
    EXPECT_EQ(VerifyToken(keys, TokenAction::kPasswordRecovery, bad, "42565").code(),
              absl::StatusCode::kInvalidArgument)
        << bad.size();
    EXPECT_EQ(WellFormed(bad).code(), absl::StatusCode::kInvalidArgument) << bad.size();
    EXPECT_THAT(std::string(WellFormed(bad).message()), Not(HasSubstr(token_)));
  }
}

// A recovery link's token is checked for its spelling before the user has typed the code: the
// spelling alone, with no key and no code, while VerifyToken refuses the missing code.
TEST_F(VerifyTokenTest, WellFormedChecksTheSpellingOnly) {
  std::vector<SigningKey> keys = {key_};
  EXPECT_TRUE(WellFormed(token_).ok());
  EXPECT_EQ(VerifyToken(keys, TokenAction::kPasswordRecovery, token_, "").code(),
            absl::StatusCode::kInvalidArgument);
  std::string tampered = token_;  // another 64 bytes, still spelt canonically: no signature check
  tampered[3] = tampered[3] == 'A' ? 'B' : 'A';
  EXPECT_TRUE(WellFormed(tampered).ok());
  EXPECT_TRUE(WellFormed(std::string(86, 'A')).ok());
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string unused_bits = token_;
  unused_bits.back() = alphabet[alphabet.find(token_.back()) + 1];  // an unused bit set
  EXPECT_FALSE(WellFormed(unused_bits).ok());
}

TEST(ParseSigningKeyTest, ErrorsSayWhatIsWrongWithoutTheKey) {
  std::string short_key(63, 'a');
  auto r = ParseSigningKey(short_key);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("got 63"));
  EXPECT_THAT(std::string(r.status().message()), Not(HasSubstr(short_key)));
  std::string bad = std::string(10, 'a') + "g" + std::string(53, 'a');
  r = ParseSigningKey(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("character 11"));
  EXPECT_THAT(std::string(r.status().message()), Not(HasSubstr(bad)));
  EXPECT_FALSE(ParseSigningKey("").ok());
  EXPECT_TRUE(ParseSigningKey(std::string(64, 'A')).ok());
}

TEST(ParseSigningKeysTest, ParsesARotationList) {
  auto keys = ParseSigningKeys(std::string(kKeyHex) + ", " + std::string(64, 'f'));
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->size(), 2u);
  EXPECT_FALSE(ParseSigningKeys(std::string(kKeyHex) + ",xyz").ok());
  EXPECT_FALSE(ParseSigningKeys("").ok());
}

}  // namespace
}  // namespace mailroom
