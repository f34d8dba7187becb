#pragma once

#include <curl/curl.h>

#include <string>

#include "absl/status/status.h"

// What a libcurl transfer's outcome means for a delivery: the map from a CURLcode's kind
// (ClassifyCurlCode, common/http/curl_status.h) and from SMTP reply codes to Status, shared by
// the SMTP and HTTP transports.
namespace mailroom {

// What libcurl saw of one SMTP conversation: the verb of the last command sent ("EHLO",
// "STARTTLS", "AUTH", "MAIL", "RCPT", "DATA", "NOOP"; "" while only the greeting was read)
// and the server's last reply line ("550 5.1.1 <x>: user unknown", at most 300 bytes, controls
// replaced). Command arguments are never kept: AUTH lines carry credentials.
struct SmtpTrace {
  std::string command;
  std::string reply;
  bool quitting = false;       // QUIT sent: later lines ("221 Bye") are not the answer we want
  bool starttls = false;       // STARTTLS was sent (the session went on over TLS, if it went on)
  bool authenticated = false;  // a 235 reply: AUTH succeeded
  std::string auth_offered{};  // the mechanisms of the EHLO reply's AUTH line ("PLAIN LOGIN")
  // The extensions of the last EHLO reply (after STARTTLS, the one that counts), as keywords
  // of its lines: RFC 2920 PIPELINING, RFC 1870 SIZE, RFC 6152 8BITMIME, RFC 6531 SMTPUTF8.
  bool pipelining = false;
  bool size = false;
  bool eightbitmime = false;
  bool smtputf8 = false;
  // Set by the transport after the transfer: the whole message was handed to libcurl after
  // DATA (only the final reply can be missing).
  bool message_sent = false;
};

// Records the conversation of the next transfers on `c` into `trace` (CURLOPT_VERBOSE with a
// CURLOPT_DEBUGFUNCTION that only looks at protocol lines). `trace` must outlive them.
void TraceSmtp(CURL* c, SmtpTrace* trace);

// The map from an SMTP transfer's outcome to a Status (see Transport for the kinds of
// failure). A server reply of 4xx/5xx decides by code and by the command it answered; without
// one the CURLcode decides (CurlStatus), marked MaybeSent when the message had been sent in
// full after DATA (the server may have queued it). `reply_code` is CURLINFO_RESPONSE_CODE,
// `detail` curl's error buffer.
absl::Status SmtpStatus(CURLcode code, long reply_code, const SmtpTrace& trace,
                        const std::string& detail);

// A CURLcode (no usable server reply) as a Status, by its kind (ClassifyCurlCode): reachability,
// TLS, authentication and our own configuration are provider errors (ProviderError); a
// transfer cut short is kUnavailable for this message only; a message too large is
// kInvalidArgument; codes of protocols we never use are kInternal. The message is
// CurlErrorText's.
absl::Status CurlStatus(CURLcode code, const std::string& detail);

// An HTTP transfer that failed with `code` (CurlStatus), marked MaybeSent when the request
// had left (`request_sent`: CURLINFO_REQUEST_SIZE or CURLINFO_SIZE_UPLOAD_T > 0) and no answer
// refused it (`http_status` 0, or 2xx with the body cut short): a timeout (28), an empty reply
// (52), a receive error (56), a send error part-way (55), a cut or undecodable answer (18, 61),
// an HTTP/2 stream error (16, 92), a callback's abort (23, 42) all may follow the provider's
// acceptance. A refused rewind (65: libcurl wanted to send the body again after a kept-alive
// connection closed with no answer, and CurlBody refuses a body it has read) always counts as
// a request that left.
absl::Status HttpTransferStatus(CURLcode code, const std::string& detail, bool request_sent,
                                long http_status);

// HttpTransferStatus of the transfer that has just ended on `c` with `code`: whether the
// request had left and the HTTP status are read from the handle.
absl::Status HttpTransferStatus(CURL* c, CURLcode code, const std::string& detail);

}  // namespace mailroom
