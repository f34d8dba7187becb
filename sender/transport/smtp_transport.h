#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sender/transport/curl_status.h"
#include "sender/transport/oauth2_token.h"
#include "sender/transport/smtp_session.h"
#include "sender/transport/transport.h"

namespace mailroom {

// SMTP: smtp:// with STARTTLS (required unless plain is explicitly allowed) or smtps://,
// optional AUTH, `connections` persistent connections, each an SmtpSession kept across
// messages. Send blocks until a connection is free and runs on the calling thread.
//
// libcurl sets each session up (TCP, TLS with certificate verification, EHLO, AUTH) and hands
// the connection over (CURLOPT_CONNECT_ONLY); the session runs the mail transactions itself,
// pipelined (RFC 2920) when the server offers PIPELINING: MAIL FROM, RCPT TO and DATA in one
// write, then the message, two round trips a message instead of libcurl's four. See
// SmtpSession for what each outcome means.
//
// AUTH is by password, or by XOAUTH2 when the configuration names a token source (a
// client-credentials endpoint or a token file): every connection authenticates with the
// current token of one shared OAuth2TokenCache. A session is kept only with the token it
// authenticated with, so a new token starts new sessions as the connections next send. A
// token refused at AUTH (530/534/535: revoked, or expired before it said) is replaced and the
// message tried once more on the spot; refused again, or no token to be had (the token
// endpoint down), the send fails with a provider error: the job is held, never failed.
//
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
  // QUIT on every open connection. No Send may be running.
  ~SmtpTransport() override;
  absl::StatusOr<SendResult> Send(const OutgoingEmail& email) override;
  int Concurrency() const override { return static_cast<int>(sessions_.size()); }
  std::string Name() const override { return "smtp"; }

  // The XOAUTH2 token cache, or null when AUTH is by password or absent (for tests).
  OAuth2TokenCache* tokens() const { return tokens_.get(); }

 private:
  // `email` on `session` (lent to this thread), with the current XOAUTH2 token if any.
  absl::StatusOr<SendResult> SendOn(SmtpSession* session, const OutgoingEmail& email);

  const TransportConfig config_;
  std::unique_ptr<OAuth2TokenCache> tokens_;            // null without OAuth2
  std::vector<std::unique_ptr<SmtpSession>> sessions_;  // one per connection, fixed
  absl::Mutex mu_;
  std::vector<int> free_ ABSL_GUARDED_BY(mu_);  // indexes of sessions not lent out
};

}  // namespace mailroom
