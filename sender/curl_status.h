#pragma once

#include <curl/curl.h>

#include <string>

#include "absl/status/status.h"

// What a libcurl transfer's outcome means for a delivery: the one map from CURLcode (and SMTP
// reply codes) to Status, shared by the SMTP and SES transports.
namespace mailroom {

// What libcurl saw of one SMTP conversation: the verb of the last command sent ("EHLO",
// "STARTTLS", "AUTH", "MAIL", "RCPT", "DATA"; "" while only the greeting was read) and the
// server's last reply line ("550 5.1.1 <x>: user unknown", at most 300 bytes, controls
// replaced). Command arguments are never kept: AUTH lines carry credentials.
struct SmtpTrace {
  std::string command;
  std::string reply;
  bool quitting = false;  // QUIT sent: later lines ("221 Bye") are not the answer we want
};

// Records the conversation of the next transfers on `c` into `trace` (CURLOPT_VERBOSE with a
// CURLOPT_DEBUGFUNCTION that only looks at protocol lines). `trace` must outlive them.
void TraceSmtp(CURL* c, SmtpTrace* trace);

// The map from an SMTP transfer's outcome to a Status (see Transport for the two kinds of
// failure). A server reply of 4xx/5xx decides by code and by the command it answered; without
// one the CURLcode decides (CurlStatus). `reply_code` is CURLINFO_RESPONSE_CODE, `detail`
// curl's error buffer.
absl::Status SmtpStatus(CURLcode code, long reply_code, const SmtpTrace& trace,
                        const std::string& detail);

// The exhaustive map from a CURLcode (no usable server reply) to a Status: reachability, TLS,
// authentication and our own configuration are provider errors (ProviderError); a transfer cut
// short is kUnavailable for this message only; codes of protocols we never use are kInternal.
absl::Status CurlStatus(CURLcode code, const std::string& detail);

}  // namespace mailroom
