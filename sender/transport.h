#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mailroom {

// A rendered message ready to go: envelope plus the full RFC 5322 bytes (CRLF line endings).
struct OutgoingEmail {
  std::string from_address;  // envelope sender (bare address)
  std::string to_address;    // envelope recipient (bare address, validated)
  std::string mime;          // the message
  std::string message_id;    // without angle brackets
};

// What a transport reports for a delivered message.
struct SendResult {
  std::string provider_id;  // SES MessageId, SMTP reply text, or the written file's path
};

// One way of delivering messages. Send is thread-safe and may run concurrently from up to
// Concurrency() threads. Errors: kUnavailable when a retry may succeed (SMTP 4xx, connection
// problems, timeouts, SES throttling and 5xx); kInvalidArgument, kPermissionDenied or
// kFailedPrecondition when no retry will (SMTP 5xx, SES rejections, TLS required but not
// offered). Messages carry the server's reply, never credentials.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual absl::StatusOr<SendResult> Send(const OutgoingEmail& email) = 0;
  virtual int Concurrency() const = 0;
  virtual std::string Name() const = 0;
};

// Configuration of every transport; `kind` picks one.
struct TransportConfig {
  std::string kind = "file";  // file | smtp | ses
  int connections = 4;        // parallel sends (and SMTP connections / HTTP handles)
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration timeout = absl::Seconds(30);

  // file
  std::string file_dir = "./outbox";

  // smtp
  std::string smtp_url;            // smtp://host:port (STARTTLS) or smtps://host:port
  std::string smtp_username;
  std::string smtp_password;       // secret
  bool smtp_require_tls = true;    // smtp://: refuse to send without STARTTLS
  std::string smtp_ca_file;        // extra trust anchor (self-signed test servers)
  bool smtp_insecure_skip_verify = false;

  // ses
  std::string ses_region = "us-east-1";
  std::string ses_endpoint;        // default https://email.<region>.amazonaws.com
  std::string aws_access_key_id;
  std::string aws_secret_access_key;  // secret
  std::string aws_session_token;      // secret
  std::string ses_configuration_set;
};

// Builds the configured transport (file directories are created; nothing connects yet).
absl::StatusOr<std::unique_ptr<Transport>> MakeTransport(const TransportConfig& config);

}  // namespace mailroom
