#include "sender/render/message.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace mailroom {
namespace {

bool IsAtext(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         std::string_view("!#$%&'*+-/=?^_`{|}~").find(c) != std::string_view::npos;
}

// Text that a mail client would decode as RFC 2047 encoded words ("=?UTF-8?B?...?=") must not
// stand raw in a header: it could decode to anything, "Bcc: evil@x.example" included.
bool LooksEncoded(absl::string_view s) { return absl::StrContains(s, "=?"); }

// Plain printable ASCII that may stand in a header as is.
bool PlainHeaderText(absl::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return !LooksEncoded(s);
}

// A display name that needs neither quoting nor encoding.
bool PlainPhrase(absl::string_view s) {
  for (char c : s) {
    if (!IsAtext(c) && c != ' ') return false;
  }
  return !s.empty() && !LooksEncoded(s);
}

// RFC 2047 UTF-8 base64 encoded words of at most 45 input bytes each (60 base64 characters + 12
// = 72 <= 75), never splitting a UTF-8 sequence, folded with CRLF SP.
std::string EncodeWords(absl::string_view text) {
  std::vector<std::string> words;
  size_t i = 0;
  while (i < text.size()) {
    size_t end = std::min(text.size(), i + 45);
    while (end < text.size() && end > i + 1 &&
           (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
      --end;
    }
    words.push_back(absl::StrCat("=?UTF-8?B?", absl::Base64Escape(text.substr(i, end - i)), "?="));
    i = end;
  }
  return absl::StrJoin(words, "\r\n ");
}

std::string Base64Lines(absl::string_view data) {
  std::string b64 = absl::Base64Escape(data);
  std::string out;
  for (size_t i = 0; i < b64.size(); i += 76) absl::StrAppend(&out, b64.substr(i, 76), "\r\n");
  return out;
}

}  // namespace

absl::Status ValidateAddress(absl::string_view a) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("invalid email address: ", why));
  };
  if (a.empty()) return bad("empty");
  if (a.size() > 254) return bad("longer than 254 characters");
  for (unsigned char c : a) {
    if (c >= 0x80) return bad("non-ASCII characters (SMTPUTF8 is not supported)");
    if (c <= 0x20 || c == 0x7f) return bad("spaces or control characters");
  }
  size_t at = a.find('@');
  if (at == absl::string_view::npos || a.rfind('@') != at) return bad("needs exactly one '@'");
  absl::string_view local = a.substr(0, at), domain = a.substr(at + 1);
  if (local.empty() || local.size() > 64) return bad("local part must be 1 to 64 characters");
  if (local.front() == '.' || local.back() == '.' || local.find("..") != absl::string_view::npos) {
    return bad("misplaced '.' in the local part");
  }
  for (char c : local) {
    if (c != '.' && !IsAtext(c))
      return bad(absl::StrCat("'", std::string(1, c), "' in the local part"));
  }
  std::vector<absl::string_view> labels = absl::StrSplit(domain, '.');
  if (labels.size() < 2) return bad("domain needs at least two labels");
  for (absl::string_view l : labels) {
    if (l.empty() || l.size() > 63) return bad("domain labels must be 1 to 63 characters");
    if (l.front() == '-' || l.back() == '-') return bad("domain label starts or ends with '-'");
    for (char c : l) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-') {
        return bad(absl::StrCat("'", std::string(1, c), "' in the domain"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<std::string, std::string>> ParseMailbox(absl::string_view mailbox) {
  mailbox = absl::StripAsciiWhitespace(mailbox);
  size_t lt = mailbox.rfind('<');
  std::string name, addr;
  if (lt == absl::string_view::npos) {
    addr = std::string(mailbox);
  } else {
    if (mailbox.back() != '>') return absl::InvalidArgumentError("mailbox must end with '>'");
    addr = std::string(mailbox.substr(lt + 1, mailbox.size() - lt - 2));
    name = std::string(absl::StripAsciiWhitespace(mailbox.substr(0, lt)));
    if (name.size() >= 2 && name.front() == '"' && name.back() == '"') {
      name = name.substr(1, name.size() - 2);
    }
  }
  absl::Status st = ValidateAddress(addr);
  if (!st.ok()) return st;
  return std::make_pair(name, addr);
}

std::string EncodeHeaderText(absl::string_view text) {
  std::string clean(text);
  for (char& c : clean) {
    if (c == '\r' || c == '\n') c = ' ';
  }
  if (PlainHeaderText(clean)) return clean;
  return EncodeWords(clean);
}

namespace {

std::string Mailbox(const std::string& name, const std::string& addr) {
  if (name.empty()) return absl::StrCat("<", addr, ">");
  std::string clean = name;
  for (char& c : clean) {
    if (c == '\r' || c == '\n') c = ' ';
  }
  if (PlainPhrase(clean)) return absl::StrCat(clean, " <", addr, ">");
  // Anything else (commas, quotes, '<>', '@', non-ASCII) goes in encoded words, never raw.
  return absl::StrCat(EncodeWords(clean), " <", addr, ">");
}

}  // namespace

absl::StatusOr<std::string> BuildMime(const Message& m) {
  auto from = ParseMailbox(m.from);
  if (!from.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("sender address: ", from.status().message()));
  }
  absl::Status st = ValidateAddress(m.to_address);
  if (!st.ok()) return st;
  for (char c : m.message_id) {
    if (c <= 0x20 || c >= 0x7f || c == '<' || c == '>') {
      return absl::InvalidArgumentError("message id has invalid characters");
    }
  }
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(m.message_id.data()), m.message_id.size(), digest);
  const std::string boundary = absl::StrCat(
      "=_mailroom_",
      absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(digest), 12)));
  std::string out;
  absl::StrAppend(&out, "From: ", Mailbox(from->first, from->second), "\r\n");
  absl::StrAppend(&out, "To: ", Mailbox(m.to_name, m.to_address), "\r\n");
  absl::StrAppend(&out, "Subject: ", EncodeHeaderText(m.subject), "\r\n");
  absl::StrAppend(&out, "Date: ",
                  absl::FormatTime("%a, %d %b %Y %H:%M:%S +0000", m.date, absl::UTCTimeZone()),
                  "\r\n");
  absl::StrAppend(&out, "Message-ID: <", m.message_id, ">\r\n");
  absl::StrAppend(&out, "MIME-Version: 1.0\r\n");
  absl::StrAppend(&out, "Content-Type: multipart/alternative;\r\n boundary=\"", boundary, "\"\r\n");
  absl::StrAppend(&out, "\r\n");
  absl::StrAppend(&out, "--", boundary, "\r\n", "Content-Type: text/plain; charset=UTF-8\r\n",
                  "Content-Transfer-Encoding: base64\r\n\r\n", Base64Lines(m.text));
  absl::StrAppend(&out, "--", boundary, "\r\n", "Content-Type: text/html; charset=UTF-8\r\n",
                  "Content-Transfer-Encoding: base64\r\n\r\n", Base64Lines(m.html));
  absl::StrAppend(&out, "--", boundary, "--\r\n");
  return out;
}

std::string NewMessageId(absl::string_view domain) {
  unsigned char b[16];
  RAND_bytes(b, sizeof b);
  return absl::StrCat(absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(b), 16)),
                      "@", domain);
}

std::string DerivedMessageId(absl::string_view secret, absl::string_view identity,
                             absl::string_view domain) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(identity.data()), identity.size(), digest, &size);
  return absl::StrCat(
      absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(digest), 16)), "@", domain);
}

}  // namespace mailroom
