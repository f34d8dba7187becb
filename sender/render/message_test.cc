#include "sender/render/message.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kDate = absl::FromUnixSeconds(1790000000);

Message Sample() {
  return Message{"Example <no-reply@example.test>",
                 "alice@example.test",
                 "alice",
                 "Activate your account",
                 "Hello alice\n",
                 "<p>Hello alice</p>\n",
                 "0123456789abcdef@example.test",
                 kDate};
}

std::string Headers(const std::string& mime) { return mime.substr(0, mime.find("\r\n\r\n")); }

TEST(AddressTest, AcceptsOrdinaryAndMaximalAddresses) {
  EXPECT_TRUE(ValidateAddress("alice@example.test").ok());
  EXPECT_TRUE(ValidateAddress("a.b+tag_x-y@sub.example-domain.test").ok());
  std::string max = std::string(64, 'a') + "@" + std::string(63, 'b') + "." + std::string(63, 'c') +
                    "." + std::string(56, 'd') + ".test";
  ASSERT_EQ(max.size(), 254u);
  EXPECT_TRUE(ValidateAddress(max).ok());
  EXPECT_FALSE(ValidateAddress(max + "x").ok());
}

TEST(AddressTest, RejectsWhatCouldInjectOrBounce) {
  for (const char* bad :
       {"", "plain", "a@b", "two@@example.test", "a@b@example.test", "a b@example.test",
        "a\r\nBcc: x@example.test", "\"q\"@example.test", "a,b@example.test", "<a@example.test>",
        ".a@example.test", "a..b@example.test", "a@-example.test", "a@example..test",
        "j\xc3\xbcrgen@example.test", "a@exa_mple.test"}) {
    EXPECT_FALSE(ValidateAddress(bad).ok()) << bad;
  }
  EXPECT_THAT(std::string(ValidateAddress("j\xc3\xbcrgen@example.test").message()),
              HasSubstr("SMTPUTF8"));
}

TEST(MimeTest, GoldenActivationMessage) {
  auto mime = BuildMime(Sample());
  ASSERT_TRUE(mime.ok()) << mime.status();
  const std::string boundary = "=_mailroom_";
  std::string expected = "From: Example <no-reply@example.test>\r\n"
                         "To: alice <alice@example.test>\r\n"
                         "Subject: Activate your account\r\n"
                         "Date: Mon, 21 Sep 2026 14:13:20 +0000\r\n"
                         "Message-ID: <0123456789abcdef@example.test>\r\n"
                         "MIME-Version: 1.0\r\n";
  EXPECT_EQ(mime->substr(0, expected.size()), expected);
  EXPECT_THAT(*mime, HasSubstr("Content-Type: multipart/alternative;\r\n boundary=\"=_mailroom_"));
  EXPECT_THAT(*mime, HasSubstr("Content-Type: text/plain; charset=UTF-8\r\n"
                               "Content-Transfer-Encoding: base64\r\n\r\n" +
                               absl::Base64Escape("Hello alice\n") + "\r\n"));
  EXPECT_THAT(*mime, HasSubstr(absl::Base64Escape("<p>Hello alice</p>\n")));
  // Deterministic: the same input gives the same bytes.
  EXPECT_EQ(*mime, *BuildMime(Sample()));
  // Every line ends in CRLF and is at most 78 characters.
  for (absl::string_view line : absl::StrSplit(*mime, "\r\n")) {
    EXPECT_LE(line.size(), 78u) << line;
    EXPECT_EQ(line.find('\n'), absl::string_view::npos);
  }
}

TEST(MimeTest, HostileDisplayNamesAndSubjectsAreEncodedNeverRaw) {
  for (const std::string& login :
       {std::string("evil\r\nBcc: victim@evil.test"), std::string("Mallory, \"x\" <y@evil.test>"),
        std::string("J\xc3\xbcrgen \xe5\xb1\xb1\xe7\x94\xb0"),
        std::string(300, 'x') + "\xc3\xbc"}) {
    Message m = Sample();
    m.to_name = login;
    m.subject = "Hi " + login;
    auto mime = BuildMime(m);
    ASSERT_TRUE(mime.ok());
    std::string headers = Headers(*mime);
    for (absl::string_view line : absl::StrSplit(headers, "\r\n")) {
      // The hostile text may stand inside the Subject's value, never as a header of its own,
      // and the To header carries only the encoded name and the real address.
      EXPECT_FALSE(absl::StartsWith(line, "Bcc:")) << line;
      if (absl::StartsWith(line, "To:")) {
        EXPECT_THAT(std::string(line), Not(HasSubstr("y@evil")));
      }
      EXPECT_TRUE(line[0] == ' ' || line.find(": ") != absl::string_view::npos) << line;
      EXPECT_LE(line.size(), 998u);
    }
  }
}

// What a mail client shows for a header value: every "=?UTF-8?B?...?=" word decoded, the
// whitespace between adjacent words dropped (RFC 2047 section 6.2), folding removed.
std::string DecodeHeaderValue(absl::string_view value) {
  std::string unfolded = absl::StrReplaceAll(value, {{"\r\n ", " "}});
  std::string out;
  size_t i = 0;
  bool after_word = false;
  while (i < unfolded.size()) {
    size_t start = unfolded.find("=?UTF-8?B?", i);
    if (start == std::string::npos) {
      out += unfolded.substr(i);
      break;
    }
    std::string between = unfolded.substr(i, start - i);
    if (!(after_word && absl::StripAsciiWhitespace(between).empty())) out += between;
    size_t end = unfolded.find("?=", start + 10);
    std::string part;
    absl::Base64Unescape(unfolded.substr(start + 10, end - start - 10), &part);
    out += part;
    i = end + 2;
    after_word = true;
  }
  return out;
}

TEST(MimeTest, EncodedWordLookalikesInLoginsAreEncodedSoClientsShowThemVerbatim) {
  // Raw, this login decodes to "Bcc: evil@x.example" in the display name and the subject.
  const std::string login = "=?UTF-8?B?QmNjOiBldmlsQHguZXhhbXBsZQ==?=";
  for (const std::string& hostile : {login, "Hi " + login + " there", std::string("a=?b")}) {
    Message m = Sample();
    m.to_name = hostile;
    m.subject = "Welcome " + hostile;
    auto mime = BuildMime(m);
    ASSERT_TRUE(mime.ok());
    std::string headers = Headers(*mime);
    EXPECT_THAT(headers, Not(HasSubstr(hostile))) << headers;
    const std::string value_to = headers.substr(headers.find("To: ") + 4);
    const std::string to_header = value_to.substr(0, value_to.find("\r\nSubject:"));
    const std::string value_subject = headers.substr(headers.find("Subject: ") + 9);
    const std::string subject_header = value_subject.substr(0, value_subject.find("\r\nDate:"));
    // A client decodes them back to exactly the text we were given, not to a Bcc.
    EXPECT_EQ(DecodeHeaderValue(to_header), hostile + " <" + m.to_address + ">");
    EXPECT_EQ(DecodeHeaderValue(subject_header), "Welcome " + hostile);
    EXPECT_THAT(DecodeHeaderValue(to_header), Not(HasSubstr("Bcc: evil")));
  }
  EXPECT_NE(EncodeHeaderText("a =? b"), "a =? b");
}

TEST(MimeTest, EncodedWordsRoundTripAndNeverSplitUtf8) {
  std::string text = "Passwort zur\xc3\xbc"
                     "cksetzen f\xc3\xbcr \xe5\xb1\xb1\xe7\x94\xb0 " +
                     std::string(60, 'a') + "\xe2\x82\xac";
  std::string enc = EncodeHeaderText(text);
  std::string decoded;
  for (absl::string_view w : absl::StrSplit(enc, "\r\n ")) {
    ASSERT_TRUE(absl::StartsWith(w, "=?UTF-8?B?") && absl::EndsWith(w, "?=")) << w;
    EXPECT_LE(w.size(), 75u);
    std::string part;
    ASSERT_TRUE(absl::Base64Unescape(w.substr(10, w.size() - 12), &part));
    // Each word decodes to whole UTF-8 characters.
    EXPECT_NE(static_cast<unsigned char>(part[0]) & 0xC0, 0x80);
    decoded += part;
  }
  EXPECT_EQ(decoded, text);
  EXPECT_EQ(EncodeHeaderText("plain ascii"), "plain ascii");
}

TEST(MimeTest, InvalidRecipientIsRejected) {
  Message m = Sample();
  m.to_address = "bad\r\n@example.test";
  EXPECT_EQ(BuildMime(m).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mailroom
