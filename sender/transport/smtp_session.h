#pragma once

#include <curl/curl.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/http/curl_handle.h"
#include "sender/transport/curl_status.h"
#include "sender/transport/transport.h"

namespace mailroom {

// The smtp transport's own settings.
struct SmtpSettings {
  std::string url;  // smtp://host:port (STARTTLS) or smtps://host:port
  std::string username;
  std::string password;  // secret
  // XOAUTH2 instead of a password (username is the mailbox): tokens from a client-credentials
  // endpoint (oauth2_token_url) or from a file a sidecar refreshes (oauth2_token_file); at most
  // one of the two, and then no password.
  std::string oauth2_token_url;
  std::string oauth2_client_id;
  std::string oauth2_client_secret;  // secret
  std::string oauth2_scope;
  std::string oauth2_token_file;
  bool require_tls = true;  // smtp://: refuse to send without STARTTLS
  std::string ca_file;      // extra trust anchor (self-signed test servers)
  bool insecure_skip_verify = false;
};

// The options of a session with the configured server (URL, TLS, AUTH, timeouts): the same
// for a connection that sends mail and for a probe. `bearer`, when not empty, is the XOAUTH2
// token; the strings must outlive the transfer.
void SetSmtpSessionOptions(CURL* c, const TransportConfig& config, const std::string& bearer,
                           absl::Duration timeout);

// `mime` as the DATA of a message (RFC 5321 4.5.2): every line ended by CRLF (a bare LF or CR
// becomes CRLF, so that no line ending can mean something else to the server), a line that
// starts with '.' given one more, and the ending ".\r\n" appended.
std::string DotStuffed(absl::string_view mime);

// One SMTP connection to the configured server and the mail transactions on it.
//
// libcurl sets the session up: TCP, TLS (smtps://, or STARTTLS required unless plain is
// explicitly allowed) with certificate verification, EHLO, AUTH by password or XOAUTH2
// (CURLOPT_CONNECT_ONLY stops it there). The session then runs each message's transaction
// itself over that connection (curl_easy_send/curl_easy_recv, TLS still libcurl's), so that
// when the server offers PIPELINING (RFC 2920) MAIL FROM, RCPT TO and DATA leave in one write
// and a message costs two round trips (commands, then body) instead of four; without
// PIPELINING the commands go one at a time.
//
// Outcomes are SmtpStatus's, as libcurl's transfers gave them: a refused MAIL or RCPT (its
// DATA then refused too) is reported with the server's reply and the transaction reset (RSET)
// on the kept connection; a connection that drops or times out is closed (the next message
// opens a new one), MaybeSent when the whole message had left and its final reply was lost.
// A kept connection the server had closed meanwhile (EOF, or 421, before anything of the
// message was accepted) is replaced and the message tried once more on a fresh one, as
// libcurl's connection reuse did. The connection is kept between messages while its
// authentication (the XOAUTH2 token) stays the same, and ended with QUIT at destruction.
//
// Not thread-safe: one sending thread at a time (SmtpTransport lends it out).
class SmtpSession {
 public:
  explicit SmtpSession(const TransportConfig& config);
  SmtpSession(const SmtpSession&) = delete;
  SmtpSession& operator=(const SmtpSession&) = delete;
  ~SmtpSession();  // Quit, awaiting the reply for a second at most

  // Delivers `email` over the connection (opened first when there is none, or when it was
  // authenticated with another `bearer`), bounded by AttemptTimeout(email, config timeout).
  // `bearer` is the XOAUTH2 token ("" for password AUTH or none). `auth_refused` tells
  // whether the server refused the AUTH (530/534/535): a fresh token may do.
  absl::StatusOr<SendResult> Send(const OutgoingEmail& email, const std::string& bearer,
                                  bool* auth_refused);

  // Sends QUIT on an open connection without awaiting the reply: lets a transport say goodbye
  // on all of its connections at once before it awaits their replies (Quit).
  void SendQuit();
  // Ends the connection, if one is open: QUIT (unless SendQuit sent it), its reply awaited
  // until `deadline` at most, then closed.
  void Quit(absl::Time deadline);

  // True while a connection is open (for tests).
  bool connected() const { return curl_ != nullptr; }

 private:
  // A read or write that failed: the CURLcode libcurl's own transfer would have ended with
  // (CURLE_OPERATION_TIMEDOUT, CURLE_RECV_ERROR for an EOF or a reset, CURLE_SEND_ERROR).
  struct IoError {
    CURLcode code = CURLE_OK;
    std::string detail;
  };
  // One reply: its code and last line, or the failure that left it unread.
  struct Reply {
    int code = 0;
    std::string line;
    IoError error;
  };
  // What one transaction gave: its result, and whether the connection failed before anything
  // of the message was accepted (a kept connection the server had closed: try a fresh one).
  struct Outcome {
    absl::StatusOr<SendResult> result;
    bool untouched = false;
  };

  // Opens the connection with `bearer`; the refusal as SmtpStatus when it fails.
  absl::Status Open(const std::string& bearer, absl::Time deadline, bool* auth_refused);
  // Closes the connection at once (after a failure, nothing more is said).
  void Close();
  // Closes a kept connection the server has ended or spoken on since the last message.
  void DropIfClosedByServer();
  // The transaction of `email` on the open connection.
  Outcome Transaction(const OutgoingEmail& email, absl::Time deadline);
  // The reply to the end of `data`: the message's outcome.
  Outcome Deliver(const std::string& data, absl::Time deadline, SmtpTrace* trace);
  // The refusal `reply_code` recorded in `trace`, after the transaction was reset (RSET) or
  // the connection closed (421, or a reply no SMTP server gives).
  Outcome Refused(int reply_code, const SmtpTrace& trace, bool untouched, absl::Time deadline);
  // The connection lost during the transaction (closed here).
  Outcome Lost(const IoError& error, const SmtpTrace& trace, bool accepted);
  // Ends the transaction with RSET; closes the connection when that fails.
  void Reset(absl::Time deadline);

  IoError Write(absl::string_view data, absl::Time deadline);
  Reply ReadReply(absl::Time deadline);
  // A reply left unread by `error`.
  static Reply Unread(IoError error);
  // Waits until the socket is ready for `events` (POLLIN/POLLOUT); false at the deadline.
  bool Wait(short events, absl::Time deadline) const;

  const TransportConfig config_;
  CurlHandle curl_;  // null while no connection is open
  curl_socket_t socket_ = CURL_SOCKET_BAD;
  std::string bearer_;      // the token the connection authenticated with
  SmtpTrace capabilities_;  // the connect phase's trace: the last EHLO reply's extensions
  std::string in_;          // received and not yet read as replies
  bool quit_sent_ = false;
};

}  // namespace mailroom
