#include "sender/transport/curl_status.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/http/curl_status.h"
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

absl::Status CurlStatus(CURLcode code, const std::string& detail) {
  const std::string what = CurlErrorText(code, detail);
  switch (ClassifyCurlCode(code)) {
    case CurlFailure::kNone: return absl::OkStatus();
    // The provider cannot be reached, or not safely, or refuses us, or our configuration is
    // wrong: nothing can be sent.
    case CurlFailure::kUnreachable: return ProviderError(what);
    // Cut short: this message is retried; the next one opens a fresh connection.
    case CurlFailure::kCutShort: return absl::UnavailableError(what);
    case CurlFailure::kTooLarge: return absl::InvalidArgumentError(what);
    case CurlFailure::kUnexpected: return absl::InternalError(what);
  }
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
