#pragma once

#include <string>

#include "sender/curl_handle.h"
#include "sender/curl_multi_loop.h"
#include "sender/transport.h"

namespace mailroom {

// SMTP through libcurl: smtp:// with STARTTLS (required unless plain is explicitly allowed) or
// smtps://, optional AUTH, `connections` persistent connections (as many curl handles; each
// connection is reused across messages). Send blocks until a connection is free. The transfers
// of all connections run on one event-loop thread (CurlMultiLoop), which keeps the connections.
class SmtpTransport : public Transport {
 public:
  explicit SmtpTransport(const TransportConfig& config);
  absl::StatusOr<SendResult> Send(const OutgoingEmail& email) override;
  int Concurrency() const override { return handles_.size(); }
  std::string Name() const override { return "smtp"; }

 private:
  const TransportConfig config_;
  CurlHandlePool handles_;  // one per connection
  CurlMultiLoop loop_;       // destroyed first: no transfer outlives its handle
};

}  // namespace mailroom
