#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sender/curl_handle.h"
#include "sender/curl_multi_loop.h"
#include "sender/transport.h"

namespace mailroom {

// SMTP through libcurl: smtp:// with STARTTLS (required unless plain is explicitly allowed) or
// smtps://, optional AUTH, `connections` persistent connections (as many curl handles; each
// connection is reused across messages). Send blocks until a connection is free.
//
// Each connection has an event-loop thread of its own (a CurlMultiLoop that keeps it), unlike
// the HTTP transports' one loop for all: libcurl (7.88 and later alike) waits for the reply to
// a message's end of data *inside* the transfer's last step (smtp_done blocks in poll() until
// "250" comes back), so a loop is stopped for one round trip at the end of each of its
// messages. Shared by 64 connections 50 ms from the server, one loop let one message out per
// 50 ms (20 emails/s) while the other 63 sessions waited; on its own loop a connection only
// waits for its own reply.
class SmtpTransport : public Transport {
 public:
  explicit SmtpTransport(const TransportConfig& config);
  absl::StatusOr<SendResult> Send(const OutgoingEmail& email) override;
  int Concurrency() const override { return handles_.size(); }
  std::string Name() const override { return "smtp"; }

 private:
  const TransportConfig config_;
  CurlHandlePool handles_;  // one per connection
  // loops_[i] runs the transfers of handles_' handle i and keeps its connection. Destroyed
  // first: no transfer outlives its handle.
  std::vector<std::unique_ptr<CurlMultiLoop>> loops_;
};

}  // namespace mailroom
