#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sender/transport/curl_handle.h"
#include "sender/transport/curl_multi_loop.h"
#include "sender/transport/curl_status.h"
#include "sender/transport/oauth2_token.h"
#include "sender/transport/transport.h"

namespace mailroom {

// SMTP through libcurl: smtp:// with STARTTLS (required unless plain is explicitly allowed) or
// smtps://, optional AUTH, `connections` persistent connections (as many curl handles; each
// connection is reused across messages). Send blocks until a connection is free.
//
// AUTH is by password, or by XOAUTH2 when the configuration names a token source (a
// client-credentials endpoint or a token file): every connection authenticates with the
// current token of one shared OAuth2TokenCache. libcurl reuses a session only with the token
// it authenticated with, so a new token starts new sessions as the connections next send. A
// token refused at AUTH (530/534/535: revoked, or expired before it said) is replaced and the
// message tried once more on the spot; refused again, or no token to be had (the token
// endpoint down), the send fails with a provider error: the job is held, never failed.
//
// Each connection has an event-loop thread of its own (a CurlMultiLoop that keeps it), unlike
// the HTTP transports' one loop for all: libcurl (7.88 and later alike) waits for the reply to
// a message's end of data *inside* the transfer's last step (smtp_done blocks in poll() until
// "250" comes back), so a loop is stopped for one round trip at the end of each of its
// messages. Shared by 64 connections 50 ms from the server, one loop let one message out per
// 50 ms (20 emails/s) while the other 63 sessions waited; on its own loop a connection only
// waits for its own reply.
// What one SMTP session with the configured server showed, without sending mail: connect,
// TLS (smtps:// or STARTTLS) with certificate verification, EHLO, AUTH (password, or XOAUTH2
// with `bearer`), then NOOP. `code` is the transfer's CURLcode, `reply` the last reply code,
// `detail` curl's error text, `status` SmtpStatus's reading of them (OK when the server took
// the NOOP). No credential appears in any of them.
struct SmtpProbe {
  CURLcode code = CURLE_OK;
  long reply = 0;
  SmtpTrace trace;
  std::string detail;
  absl::Status status;
};

// Runs that session on the calling thread, bounded by `config`'s timeouts (for `sender doctor`).
SmtpProbe ProbeSmtp(const TransportConfig& config, const std::string& bearer);

class SmtpTransport : public Transport {
 public:
  explicit SmtpTransport(const TransportConfig& config);
  absl::StatusOr<SendResult> Send(const OutgoingEmail& email) override;
  int Concurrency() const override { return handles_.size(); }
  std::string Name() const override { return "smtp"; }

  // The XOAUTH2 token cache, or null when AUTH is by password or absent (for tests).
  OAuth2TokenCache* tokens() const { return tokens_.get(); }

 private:
  // One attempt at `email` on handle `c` (reset, its connection kept), with `bearer` as the
  // XOAUTH2 token unless empty. `auth_refused` tells whether the server refused the AUTH.
  absl::StatusOr<SendResult> Attempt(CURL* c, int index, const OutgoingEmail& email,
                                     const std::string& bearer, bool* auth_refused);

  const TransportConfig config_;
  std::unique_ptr<OAuth2TokenCache> tokens_;  // null without OAuth2
  CurlHandlePool handles_;                    // one per connection
  // loops_[i] runs the transfers of handles_' handle i and keeps its connection. Destroyed
  // first: no transfer outlives its handle.
  std::vector<std::unique_ptr<CurlMultiLoop>> loops_;
};

}  // namespace mailroom
