#pragma once

#include <string>

#include "absl/status/status.h"
#include "sender/transport/provider_transport.h"

namespace mailroom {

// Postmark's Email API: POST /email with the server token in X-Postmark-Server-Token, one
// JSON message (From, To, Subject, TextBody, HtmlBody, MessageStream, Tag = the action,
// Metadata = the email's tags and group, link and open tracking off). Postmark answers 200
// with {"MessageID", "ErrorCode": 0} for an accepted email (MessageID is the provider id), and
// 422 with {"ErrorCode", "Message"} when it refuses one (ResponseStatus). Base URL:
// TransportConfig::provider_api_url, https://api.postmarkapp.com when empty.
class PostmarkTransport : public ProviderTransport {
 public:
  static constexpr char kDefaultUrl[] = "https://api.postmarkapp.com";

  explicit PostmarkTransport(const TransportConfig& config) : ProviderTransport(config) {}
  std::string Name() const override { return "postmark"; }

  // The JSON request body for `email` (see the class comment).
  static std::string Body(const OutgoingEmail& email, const TransportConfig& config);
  // What Postmark's answer (HTTP status and body) means: OK for 200 with ErrorCode 0; ErrorCode
  // 406 (inactive recipient: it bounced hard, complained or unsubscribed) is a permanent
  // rejection of the address (RecipientRejected: the collector suppresses it); the codes that
  // say nothing can be sent (10 bad token, 100 maintenance, 400/401 sender signature missing
  // or unconfirmed, 405 not allowed to send, 412 account pending, 413 account may not send, a
  // message stream refused) are provider errors; other codes refuse this email
  // (kInvalidArgument); 401, 429 and 5xx as HttpApiStatus says.
  static absl::Status ResponseStatus(long http_status, const std::string& body);
  // GET /server with the server token (doctor): the cheapest read that proves the token.
  static HttpRequest CheckRequest(const TransportConfig& config);

 protected:
  HttpRequest Request(const OutgoingEmail& email) const override;
  absl::StatusOr<SendResult> Answer(const HttpAnswer& answer) const override;
};

}  // namespace mailroom
