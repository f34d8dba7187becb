#include "sender/transport/curl_status.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "sender/transport/transport.h"

namespace mailroom {
namespace {

// Strips CR/LF and replaces other controls, so a reply can stand in a log line or a reason.
std::string OneLine(absl::string_view s, size_t max) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.remove_suffix(1);
  std::string out(s.substr(0, max));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return out;
}

// Reads one line of an EHLO reply ("250-PIPELINING", "250 SIZE 10240000") into `trace`.
void ReadEhloLine(absl::string_view line, SmtpTrace* trace) {
  if (!absl::ConsumePrefix(&line, "250") || line.empty() || (line[0] != '-' && line[0] != ' ')) {
    return;
  }
  line.remove_prefix(1);
  const absl::string_view keyword = line.substr(0, line.find_first_of(" \r\n"));
  if (absl::EqualsIgnoreCase(keyword, "AUTH") && line.size() > 5) {
    trace->auth_offered = OneLine(line.substr(5), 200);
  }
  if (absl::EqualsIgnoreCase(keyword, "PIPELINING")) trace->pipelining = true;
  if (absl::EqualsIgnoreCase(keyword, "SIZE")) trace->size = true;
  if (absl::EqualsIgnoreCase(keyword, "8BITMIME")) trace->eightbitmime = true;
  if (absl::EqualsIgnoreCase(keyword, "SMTPUTF8")) trace->smtputf8 = true;
}

int Trace(CURL*, curl_infotype type, char* data, size_t size, void* userptr) {
  // Called for every protocol line and every block of the body: return at once for the body.
  auto* trace = static_cast<SmtpTrace*>(userptr);
  absl::string_view line(data, size);
  if (trace->quitting) return 0;
  if (type == CURLINFO_HEADER_IN) {
    trace->reply = OneLine(line, 300);
    if (absl::StartsWith(line, "235")) trace->authenticated = true;
    if (trace->command == "EHLO") ReadEhloLine(line, trace);
  } else if (type == CURLINFO_HEADER_OUT) {
    // Only the verbs we know; anything else (AUTH LOGIN continuations) may be a credential.
    absl::string_view verb = line.substr(0, line.find_first_of(" :\r\n"));
    if (absl::EqualsIgnoreCase(verb, "QUIT")) {
      trace->quitting = true;
      return 0;
    }
    for (const char* known : {"EHLO", "HELO", "STARTTLS", "AUTH", "MAIL", "RCPT", "DATA", "NOOP"}) {
      if (absl::EqualsIgnoreCase(verb, known)) {
        trace->command = known;
        if (trace->command == "STARTTLS") trace->starttls = true;
        if (trace->command == "EHLO" || trace->command == "HELO") {
          // A new greeting: only the extensions of its reply count (RFC 3207 4.2).
          trace->pipelining = trace->size = trace->eightbitmime = trace->smtputf8 = false;
        }
        break;
      }
    }
  }
  return 0;
}

}  // namespace

void TraceSmtp(CURL* c, SmtpTrace* trace) {
  curl_easy_setopt(c, CURLOPT_DEBUGFUNCTION, Trace);
  curl_easy_setopt(c, CURLOPT_DEBUGDATA, trace);
  curl_easy_setopt(c, CURLOPT_VERBOSE, 1L);
}

namespace {

// True when `rest` (a reply line after its 3-digit code) starts with an enhanced status code
// of the address class, 5.1.x: "[ -]5.1.<1-3 digits>" followed by a space or the end.
bool AddressStatus(absl::string_view rest) {
  if (rest.empty() || (rest[0] != ' ' && rest[0] != '-')) return false;
  rest.remove_prefix(1);
  if (!absl::ConsumePrefix(&rest, "5.1.")) return false;
  size_t digits = 0;
  while (digits < rest.size() && absl::ascii_isdigit(rest[digits])) ++digits;
  return digits >= 1 && digits <= 3 && (digits == rest.size() || rest[digits] == ' ');
}

}  // namespace

absl::Status SmtpStatus(CURLcode code, long reply_code, const SmtpTrace& trace,
                        const std::string& detail) {
  if (code == CURLE_OK) return absl::OkStatus();
  if (reply_code < 400 || reply_code >= 600) {
    // No refusal: after the whole message went out, the server may have accepted it and the
    // final reply was lost (a timeout, a reset).
    const bool maybe_sent = trace.command == "DATA" && trace.message_sent;
    return maybe_sent ? MaybeSent(CurlStatus(code, detail)) : CurlStatus(code, detail);
  }
  // The server's own words when its last line is the reply that failed us.
  const std::string text = absl::StartsWith(trace.reply, absl::StrCat(reply_code))
                               ? trace.reply
                               : absl::StrCat(reply_code, " ", detail);
  const std::string& cmd = trace.command;
  const std::string what = absl::StrCat("smtp ", cmd.empty() ? "greeting" : cmd, ": ", text);
  // Service closing (421), TLS or authentication refused: nothing can go out to anyone.
  if (reply_code == 421 || reply_code == 454 || reply_code == 530 || reply_code == 534 ||
      reply_code == 535 || reply_code == 538) {
    return ProviderError(what);
  }
  // Refused before any message was discussed: greeting, EHLO, STARTTLS, AUTH.
  if (cmd.empty() || cmd == "EHLO" || cmd == "HELO" || cmd == "STARTTLS" || cmd == "AUTH") {
    return ProviderError(what);
  }
  if (cmd == "MAIL") {
    // Our sender address refused applies to every message; 552 (too large) is this one's.
    if (reply_code >= 500 && reply_code != 552) return ProviderError(what);
    return reply_code < 500 ? absl::UnavailableError(what) : absl::InvalidArgumentError(what);
  }
  // RCPT, DATA and the end of the message: about this recipient or this message. A 5xx on
  // RCPT whose enhanced status (RFC 3463) is 5.1.x says the address itself is bad.
  if (reply_code >= 500 && cmd == "RCPT" && text == trace.reply &&
      AddressStatus(absl::string_view(text).substr(3))) {
    return RecipientRejected(what);
  }
  return reply_code < 500 ? absl::UnavailableError(what) : absl::InvalidArgumentError(what);
}

// A table of libcurl's codes, one case each (curl_status_test checks every code is listed).
// NOLINTNEXTLINE(readability-function-size)
absl::Status CurlStatus(CURLcode code, const std::string& detail) {
  const std::string what = absl::StrCat(detail.empty() ? curl_easy_strerror(code) : detail,
                                        " (curl ", static_cast<int>(code), ")");
  switch (code) {
    case CURLE_OK: return absl::OkStatus();

    // The provider cannot be reached, or not safely, or refuses us: nothing can be sent.
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_GOT_NOTHING:
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_NO_CONNECTION_AVAILABLE:
    case CURLE_PROXY:
    case CURLE_QUIC_CONNECT_ERROR:
    case CURLE_HTTP3:
    case CURLE_TOO_MANY_REDIRECTS:
    case CURLE_REMOTE_ACCESS_DENIED:
    case CURLE_LOGIN_DENIED:
    case CURLE_AUTH_ERROR:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_USE_SSL_FAILED:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CLIENTCERT:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_SHUTDOWN_FAILED:
    // Our configuration or build: every message would fail the same way.
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_FAILED_INIT:
    case CURLE_URL_MALFORMAT:
    case CURLE_NOT_BUILT_IN:
    case CURLE_INTERFACE_FAILED:
    case CURLE_UNKNOWN_OPTION:
    case CURLE_SETOPT_OPTION_SYNTAX:
    case CURLE_BAD_FUNCTION_ARGUMENT:
    case CURLE_FUNCTION_NOT_FOUND:
    case CURLE_RECURSIVE_API_CALL:
    case CURLE_UNRECOVERABLE_POLL: return ProviderError(what);

    // A transfer cut short (a kept-alive connection closed by the server, a reset): this
    // message is retried; the next one opens a fresh connection.
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_AGAIN:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_READ_ERROR:
    case CURLE_WRITE_ERROR:
    case CURLE_UPLOAD_FAILED:
    case CURLE_SEND_FAIL_REWIND:
    case CURLE_CHUNK_FAILED:
    case CURLE_BAD_CONTENT_ENCODING:
    case CURLE_HTTP_POST_ERROR:
    case CURLE_OUT_OF_MEMORY:
    case CURLE_ABORTED_BY_CALLBACK:
    case CURLE_REMOTE_DISK_FULL: return absl::UnavailableError(what);

    // This message is too large for the server.
    case CURLE_FILESIZE_EXCEEDED: return absl::InvalidArgumentError(what);

    // Codes of protocols and options we never use (FTP, TFTP, LDAP, RTSP, SSH, ranges,
    // CURLOPT_FAILONERROR) and retired codes: a bug if seen.
    case CURLE_FTP_ACCEPT_FAILED:
    case CURLE_FTP_WEIRD_PASS_REPLY:
    case CURLE_FTP_ACCEPT_TIMEOUT:
    case CURLE_FTP_WEIRD_PASV_REPLY:
    case CURLE_FTP_WEIRD_227_FORMAT:
    case CURLE_FTP_CANT_GET_HOST:
    case CURLE_FTP_COULDNT_SET_TYPE:
    case CURLE_FTP_COULDNT_RETR_FILE:
    case CURLE_FTP_PORT_FAILED:
    case CURLE_FTP_COULDNT_USE_REST:
    case CURLE_FTP_PRET_FAILED:
    case CURLE_FTP_BAD_FILE_LIST:
    case CURLE_QUOTE_ERROR:
    case CURLE_HTTP_RETURNED_ERROR:
    case CURLE_RANGE_ERROR:
    case CURLE_BAD_DOWNLOAD_RESUME:
    case CURLE_FILE_COULDNT_READ_FILE:
    case CURLE_LDAP_CANNOT_BIND:
    case CURLE_LDAP_SEARCH_FAILED:
    case CURLE_TFTP_NOTFOUND:
    case CURLE_TFTP_PERM:
    case CURLE_TFTP_ILLEGAL:
    case CURLE_TFTP_UNKNOWNID:
    case CURLE_TFTP_NOSUCHUSER:
    case CURLE_REMOTE_FILE_EXISTS:
    case CURLE_REMOTE_FILE_NOT_FOUND:
    case CURLE_SSH:
    case CURLE_RTSP_CSEQ_ERROR:
    case CURLE_RTSP_SESSION_ERROR:
    case CURLE_OBSOLETE20:
    case CURLE_OBSOLETE24:
    case CURLE_OBSOLETE29:
    case CURLE_OBSOLETE32:
    case CURLE_OBSOLETE40:
    case CURLE_OBSOLETE44:
    case CURLE_OBSOLETE46:
    case CURLE_OBSOLETE50:
    case CURLE_OBSOLETE51:
    case CURLE_OBSOLETE57:
    case CURLE_OBSOLETE62:
    case CURLE_OBSOLETE75:
    case CURLE_OBSOLETE76:
    case CURL_LAST: return absl::InternalError(what);
  }
  // A code newer than these headers.
  return absl::InternalError(what);
}

absl::Status HttpTransferStatus(CURLcode code, const std::string& detail, bool request_sent,
                                long http_status) {
  absl::Status st = CurlStatus(code, detail);
  // Our request bodies (CurlBody) refuse a rewind only once libcurl has read them: the request
  // left, and libcurl wanted to send it again (a kept-alive connection closed with no answer).
  if (code == CURLE_SEND_FAIL_REWIND) request_sent = true;
  const bool refused = http_status != 0 && (http_status < 200 || http_status >= 300);
  return request_sent && !refused ? MaybeSent(std::move(st)) : st;
}

absl::Status HttpTransferStatus(CURL* c, CURLcode code, const std::string& detail) {
  long http = 0, request_bytes = 0;
  curl_off_t body_bytes = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http);
  curl_easy_getinfo(c, CURLINFO_REQUEST_SIZE, &request_bytes);
  curl_easy_getinfo(c, CURLINFO_SIZE_UPLOAD_T, &body_bytes);
  return HttpTransferStatus(code, detail, request_bytes > 0 || body_bytes > 0, http);
}

}  // namespace mailroom
