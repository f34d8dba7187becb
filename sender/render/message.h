#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

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

// The Message-ID of the email made from `identity` (what names the job uniquely) under
// `secret` (the job's own secret, which only its senders hold): the first 128 bits of
// HMAC-SHA256(secret, identity) in hex, "@" domain. The same job gives the same id, so every
// try of one job is the same message; without the secret nobody can tell a job's id in advance
// (and send a message under it first, for a mailbox that keeps one message per id to drop
// ours).
std::string DerivedMessageId(absl::string_view secret, absl::string_view identity,
                             absl::string_view domain);

}  // namespace mailroom
