#include "sender/transport/smtp_session.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace mailroom {
namespace {

// A reply that has not ended within this many bytes is not SMTP.
constexpr size_t kMaxReplyBytes = 64 * 1024;
// The longest the server's "221" to QUIT is awaited: saying goodbye changes nothing.
constexpr absl::Duration kQuitWait = absl::Seconds(1);

// A reply line as SmtpTrace keeps it: no line ending, controls replaced, at most 300 bytes.
std::string ReplyLine(absl::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  std::string out(line.substr(0, 300));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return out;
}

bool Ascii(absl::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isascii(c); });
}

// The MAIL FROM command of `email` with the parameters the server's extensions call for: the
// size (RFC 1870), SMTPUTF8 for a non-ASCII address (RFC 6531) and BODY=8BITMIME for 8-bit
// content (RFC 6152), as libcurl declared them.
std::string MailFrom(const OutgoingEmail& email, const SmtpTrace& ehlo) {
  std::string mail = absl::StrCat("MAIL FROM:<", email.from_address, ">");
  if (ehlo.size) absl::StrAppend(&mail, " SIZE=", email.mime.size());
  if (ehlo.eightbitmime && !Ascii(email.mime)) absl::StrAppend(&mail, " BODY=8BITMIME");
  if (ehlo.smtputf8 && !(Ascii(email.from_address) && Ascii(email.to_address))) {
    absl::StrAppend(&mail, " SMTPUTF8");
  }
  return absl::StrCat(mail, "\r\n");
}

}  // namespace

void SetSmtpSessionOptions(CURL* c, const TransportConfig& config, const std::string& bearer,
                           absl::Duration timeout) {
  const SmtpSettings& smtp = config.Get<SmtpSettings>();
  curl_easy_setopt(c, CURLOPT_URL, smtp.url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_USE_SSL, smtp.require_tls ? CURLUSESSL_ALL : CURLUSESSL_TRY);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(config.connect_timeout)));
  // At least 1 ms: libcurl reads 0 as no timeout.
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout))));
  if (!bearer.empty()) {
    // Microsoft 365 offers XOAUTH2 only; Google offers OAUTHBEARER too: one mechanism for both.
    curl_easy_setopt(c, CURLOPT_USERNAME, smtp.username.c_str());
    curl_easy_setopt(c, CURLOPT_XOAUTH2_BEARER, bearer.c_str());
    curl_easy_setopt(c, CURLOPT_LOGIN_OPTIONS, "AUTH=XOAUTH2");
  } else if (!smtp.username.empty()) {
    curl_easy_setopt(c, CURLOPT_USERNAME, smtp.username.c_str());
    curl_easy_setopt(c, CURLOPT_PASSWORD, smtp.password.c_str());
  }
  if (!smtp.ca_file.empty()) {
    curl_easy_setopt(c, CURLOPT_CAINFO, smtp.ca_file.c_str());
  }
  if (smtp.insecure_skip_verify) {
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
  }
}

std::string DotStuffed(absl::string_view mime) {
  std::string out;
  out.reserve(mime.size() + mime.size() / 32 + 8);
  bool line_start = true;
  for (size_t i = 0; i < mime.size(); ++i) {
    const char c = mime[i];
    if (c == '\r' || c == '\n') {
      out += "\r\n";
      if (c == '\r' && i + 1 < mime.size() && mime[i + 1] == '\n') ++i;
      line_start = true;
      continue;
    }
    if (line_start && c == '.') out += '.';
    out += c;
    line_start = false;
  }
  if (!line_start) out += "\r\n";
  out += ".\r\n";
  return out;
}

SmtpSession::SmtpSession(const TransportConfig& config) : config_(config) { CurlGlobalInit(); }

SmtpSession::~SmtpSession() { Quit(absl::Now() + std::min(kQuitWait, config_.timeout)); }

absl::StatusOr<SendResult> SmtpSession::Send(const OutgoingEmail& email, const std::string& bearer,
                                             bool* auth_refused) {
  *auth_refused = false;
  // The addresses go into command lines: one that could end a line or the path is refused
  // here, whatever the callers checked before (a line end would smuggle a command in).
  for (const std::string* address : {&email.from_address, &email.to_address}) {
    if (address->find_first_of("\r\n<>", 0, 4) != std::string::npos) {
      return absl::InvalidArgumentError("smtp: an address holds a line end or an angle bracket");
    }
  }
  const absl::Time deadline = absl::Now() + AttemptTimeout(email, config_.timeout);
  // A new token starts a new session: the server ties a session to the token it took.
  if (connected() && bearer != bearer_) Quit(std::min(deadline, absl::Now() + kQuitWait));
  DropIfClosedByServer();
  for (int attempt = 1;; ++attempt) {
    const bool kept = connected();
    if (!kept) {
      absl::Status opened = Open(bearer, deadline, auth_refused);
      if (!opened.ok()) return opened;
    }
    Outcome o = Transaction(email, deadline);
    // The server had ended the kept connection before taking anything: not this message's
    // failure (libcurl's reuse reconnected the same way).
    if (!(kept && o.untouched && attempt == 1)) return std::move(o.result);
  }
}

void SmtpSession::SendQuit() {
  if (!connected() || quit_sent_) return;
  size_t sent = 0;
  quit_sent_ = curl_easy_send(curl_.get(), "QUIT\r\n", 6, &sent) == CURLE_OK && sent == 6;
}

absl::Status SmtpSession::Open(const std::string& bearer, absl::Time deadline, bool* auth_refused) {
  CurlHandle c(curl_easy_init());
  if (c == nullptr) return CurlStatus(CURLE_FAILED_INIT, "curl_easy_init failed");
  char errbuf[CURL_ERROR_SIZE] = {0};
  SmtpTrace trace;
  TraceSmtp(c.get(), &trace);
  SetSmtpSessionOptions(c.get(), config_, bearer, deadline - absl::Now());
  curl_easy_setopt(c.get(), CURLOPT_ERRORBUFFER, errbuf);
  // libcurl runs the protocol's connect phase (greeting, EHLO, STARTTLS, EHLO, AUTH) and
  // hands the connection over.
  curl_easy_setopt(c.get(), CURLOPT_CONNECT_ONLY, 1L);
  const CURLcode rc = curl_easy_perform(c.get());
  long reply = 0;
  curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &reply);
  curl_socket_t sock = CURL_SOCKET_BAD;
  if (rc == CURLE_OK) curl_easy_getinfo(c.get(), CURLINFO_ACTIVESOCKET, &sock);
  // The trace and the error buffer live in this frame: libcurl must not write to them later.
  curl_easy_setopt(c.get(), CURLOPT_VERBOSE, 0L);
  curl_easy_setopt(c.get(), CURLOPT_ERRORBUFFER, nullptr);
  if (rc != CURLE_OK || sock == CURL_SOCKET_BAD) {
    *auth_refused = rc != CURLE_OK && trace.command == "AUTH" &&
                    (reply == 530 || reply == 534 || reply == 535);
    return SmtpStatus(rc == CURLE_OK ? CURLE_COULDNT_CONNECT : rc, reply, trace, errbuf);
  }
  curl_ = std::move(c);
  socket_ = sock;
  bearer_ = bearer;
  capabilities_ = trace;
  quit_sent_ = false;
  in_.clear();
  return absl::OkStatus();
}

void SmtpSession::Quit(absl::Time deadline) {
  if (!connected()) return;
  SendQuit();
  if (quit_sent_) ReadReply(deadline);
  Close();
}

void SmtpSession::Close() {
  curl_.reset();
  socket_ = CURL_SOCKET_BAD;
  bearer_.clear();
  in_.clear();
  quit_sent_ = false;
}

void SmtpSession::DropIfClosedByServer() {
  if (!connected()) return;
  // Nothing is due between messages: whatever the connection has to say (an EOF, a reset,
  // "421 4.4.2 idle timeout") is its end.
  if (!in_.empty()) {
    Close();
    return;
  }
  pollfd p{socket_, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0) return;
  char buf[512];
  size_t n = 0;
  // CURLE_AGAIN: TLS records with no data for us (a session ticket).
  if (curl_easy_recv(curl_.get(), buf, sizeof buf, &n) != CURLE_AGAIN) Close();
}

SmtpSession::Outcome SmtpSession::Transaction(const OutgoingEmail& email, absl::Time deadline) {
  const std::string commands[] = {MailFrom(email, capabilities_),
                                  absl::StrCat("RCPT TO:<", email.to_address, ">\r\n"), "DATA\r\n"};
  const char* const verbs[] = {"MAIL", "RCPT", "DATA"};
  const bool pipelining = capabilities_.pipelining;
  SmtpTrace trace;
  if (pipelining) {
    // RFC 2920: the three commands in one write, their replies read in order.
    IoError e = Write(absl::StrCat(commands[0], commands[1], commands[2]), deadline);
    if (e.code != CURLE_OK) return Lost(e, trace, /*accepted=*/false);
  }
  SmtpTrace refusal;  // the first command refused: the failure reported
  int refused = 0;
  bool accepted = false, data_open = false;
  for (int i = 0; i < 3 && (pipelining || refused == 0); ++i) {
    if (!pipelining) {
      IoError e = Write(commands[i], deadline);
      if (e.code != CURLE_OK) return Lost(e, trace, accepted);
    }
    trace.command = verbs[i];
    Reply r = ReadReply(deadline);
    if (r.error.code != CURLE_OK) {
      if (refused == 0) return Lost(r.error, trace, accepted);
      // Hung up after a refusal it had sent: that refusal is the answer (and says whether it
      // was about this message or the server, 421), not the read that failed after it.
      Close();
      break;
    }
    trace.reply = r.line;
    const bool ok = i == 2 ? r.code == 354 : r.code / 100 == 2;
    if (ok) accepted = true;
    if (ok && i == 2) data_open = true;
    if (!ok && refused == 0) {
      refused = r.code;
      refusal = trace;
    }
    // 421: the server is closing the connection; no reply to the other commands will come.
    if (r.code == 421) break;
  }
  if (refused == 0) return Deliver(DotStuffed(email.mime), deadline, &trace);
  // RFC 2920 3.1: DATA taken after a refusal (no recipient left) still needs its end.
  if (data_open) {
    IoError e = Write(".\r\n", deadline);
    Reply r = e.code == CURLE_OK ? ReadReply(deadline) : Unread(e);
    if (r.error.code != CURLE_OK) Close();
  }
  return Refused(refused, refusal, /*untouched=*/!accepted && refused == 421, deadline);
}

SmtpSession::Outcome SmtpSession::Deliver(const std::string& data, absl::Time deadline,
                                          SmtpTrace* trace) {
  IoError e = Write(data, deadline);
  if (e.code != CURLE_OK) return Lost(e, *trace, /*accepted=*/true);
  trace->message_sent = true;
  Reply r = ReadReply(deadline);
  if (r.error.code != CURLE_OK) return Lost(r.error, *trace, /*accepted=*/true);
  trace->reply = r.line;
  if (r.code / 100 == 2) return {SendResult{r.line}};
  // Refused at its end, the transaction is over: no RSET.
  if (r.code == 421 || r.code < 400 || r.code >= 600) Close();
  return {SmtpStatus(CURLE_WEIRD_SERVER_REPLY, r.code, *trace, "unexpected reply")};
}

SmtpSession::Outcome SmtpSession::Refused(int reply_code, const SmtpTrace& trace, bool untouched,
                                          absl::Time deadline) {
  if (reply_code == 421 || reply_code < 400 || reply_code >= 600) {
    // The server is closing the connection (421), or says what no SMTP server should.
    Close();
  } else {
    Reset(deadline);
  }
  const CURLcode curl_code = reply_code < 400 || reply_code >= 600 ? CURLE_WEIRD_SERVER_REPLY
                                                                   : CURLE_SEND_ERROR;
  return {SmtpStatus(curl_code, reply_code, trace, absl::StrCat("unexpected reply: ", trace.reply)),
          untouched};
}

SmtpSession::Outcome SmtpSession::Lost(const IoError& error, const SmtpTrace& trace,
                                       bool accepted) {
  Close();
  // An EOF or a reset before anything was accepted says the server had ended the connection;
  // a timeout says nothing of the kind.
  const bool untouched = !accepted && error.code != CURLE_OPERATION_TIMEDOUT;
  return {SmtpStatus(error.code, 0, trace, error.detail), untouched};
}

void SmtpSession::Reset(absl::Time deadline) {
  if (!connected()) return;
  IoError e = Write("RSET\r\n", deadline);
  Reply r = e.code == CURLE_OK ? ReadReply(deadline) : Unread(e);
  if (r.error.code != CURLE_OK || r.code / 100 != 2) Close();
}

SmtpSession::IoError SmtpSession::Write(absl::string_view data, absl::Time deadline) {
  while (!data.empty()) {
    size_t sent = 0;
    const CURLcode rc = curl_easy_send(curl_.get(), data.data(), data.size(), &sent);
    if (rc == CURLE_OK) {
      data.remove_prefix(sent);
    } else if (rc != CURLE_AGAIN) {
      return {CURLE_SEND_ERROR, absl::StrCat("smtp send failed: ", curl_easy_strerror(rc))};
    } else if (!Wait(POLLOUT, deadline)) {
      return {CURLE_OPERATION_TIMEDOUT, "smtp send timed out"};
    }
  }
  return {};
}

SmtpSession::Reply SmtpSession::Unread(IoError error) { return {0, "", std::move(error)}; }

SmtpSession::Reply SmtpSession::ReadReply(absl::Time deadline) {
  size_t start = 0;  // the first line of the reply not read yet
  for (;;) {
    const size_t eol = in_.find('\n', start);
    if (eol != std::string::npos) {
      const absl::string_view line(in_.data() + start, eol - start);
      if (line.size() < 3 || !absl::ascii_isdigit(line[0]) || !absl::ascii_isdigit(line[1]) ||
          !absl::ascii_isdigit(line[2])) {
        return Unread(
            {CURLE_WEIRD_SERVER_REPLY, absl::StrCat("not an SMTP reply: ", ReplyLine(line))});
      }
      start = eol + 1;
      if (line.size() > 3 && line[3] == '-') continue;  // more lines follow (RFC 5321 4.2.1)
      Reply r{(line[0] - '0') * 100 + (line[1] - '0') * 10 + (line[2] - '0'), ReplyLine(line), {}};
      in_.erase(0, start);
      return r;
    }
    if (in_.size() > kMaxReplyBytes) return Unread({CURLE_WEIRD_SERVER_REPLY, "reply too long"});
    char buf[16384];
    size_t n = 0;
    const CURLcode rc = curl_easy_recv(curl_.get(), buf, sizeof buf, &n);
    if (rc == CURLE_AGAIN) {
      if (!Wait(POLLIN, deadline))
        return Unread({CURLE_OPERATION_TIMEDOUT, "smtp reply timed out"});
    } else if (rc != CURLE_OK || n == 0) {
      return Unread({CURLE_RECV_ERROR,
                     rc == CURLE_OK ? "connection closed by the server" : curl_easy_strerror(rc)});
    } else {
      in_.append(buf, n);
    }
  }
}

bool SmtpSession::Wait(short events, absl::Time deadline) const {
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd p{socket_, events, 0};
    const int64_t ms = std::min<int64_t>(INT_MAX, absl::ToInt64Milliseconds(left) + 1);
    const int n = poll(&p, 1, static_cast<int>(ms));
    // Ready, or an error or hangup that the next send or receive reports.
    if (n > 0 || (n < 0 && errno != EINTR)) return true;
  }
}

}  // namespace mailroom
