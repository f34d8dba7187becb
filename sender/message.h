#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/mailroom/v1/mailroom.pb.h"

namespace mailroom {

// Validates an envelope recipient: ASCII dot-atom local part (at most 64 characters), LDH
// domain labels (1-63 characters, not starting or ending with '-', at least two labels), at
// most 254 characters in all, no quoting, spaces, control characters or CR/LF. Non-ASCII
// addresses are refused: mailroom does not negotiate SMTPUTF8. InvalidArgument says why.
absl::Status ValidateAddress(absl::string_view address);

// Splits "Name <addr>" or "addr" and validates the address.
absl::StatusOr<std::pair<std::string, std::string>> ParseMailbox(absl::string_view mailbox);

// Encodes a header text as RFC 2047 UTF-8 base64 encoded-words (each at most 75 characters,
// folded with CRLF SP) when it is not plain printable ASCII, else returns it as is. CR and LF
// never survive into the output.
std::string EncodeHeaderText(absl::string_view text);

// A message to build.
struct Message {
  std::string from;        // "Name <addr>" or "addr" (validated)
  std::string to_address;  // validated
  std::string to_name;     // display name (any characters; encoded as needed)
  std::string subject;
  std::string text;
  std::string html;
  std::string message_id;  // without angle brackets
  absl::Time date;
};

// An RFC 5322 message: From, To, Subject (RFC 2047 when needed), Date, Message-ID,
// MIME-Version and a multipart/alternative body with text/plain and text/html parts, both UTF-8
// and base64 (76-character lines), CRLF line endings. The boundary derives from the message id,
// so the same input gives the same bytes. Built by hand because the file transport, SES Raw
// content and golden tests need the bytes, which libcurl's MIME API only streams to a server.
absl::StatusOr<std::string> BuildMime(const Message& message);

// A new Message-ID: 128 random bits (OpenSSL) in hex, "@" domain.
std::string NewMessageId(absl::string_view domain);

// Subject, text and HTML of one email.
struct RenderedEmail {
  std::string subject, text, html;
};

// What templates can use.
struct TemplateVars {
  std::string login, email, token, code, product_name, link_base_url;
  absl::Time expires_at;
};

// Per-action Mustache templates (kainjow::mustache): subject, text and HTML for activation and
// password recovery. Built-in defaults; a directory may override any of
// `<action>.subject`, `<action>.txt`, `<action>.html` (action is
// `activation` or `password_recovery`). Variables: login, email, link (base URL + /activate or
// /recover + ?token=...), token, code, expires_at (RFC 3339 UTC), expires_in_minutes,
// product_name. HTML escapes every variable; text and subject do not, and the subject loses
// CR/LF. Immutable after Load: thread-safe.
class Templates {
 public:
  // Loads the defaults, overridden from `dir` when non-empty. A template that does not parse
  // is an error naming its file, and so is a file with the old `.mustache` suffix.
  static absl::StatusOr<Templates> Load(const std::string& dir);
  absl::StatusOr<RenderedEmail> Render(v1::Action action, const TemplateVars& vars) const;

 private:
  std::string source_[2][3];  // [action][subject, text, html]
};

}  // namespace mailroom
