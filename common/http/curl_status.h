#pragma once

#include <curl/curl.h>

#include <string>

// The one exhaustive map from a CURLcode to what it says about the server and the request:
// every caller of libcurl decides from these kinds (the sender's delivery statuses, the
// collector's fetches), never from a list of codes of its own.
namespace mailroom {

// What a transfer that ended with a CURLcode (and no usable answer) says.
enum class CurlFailure {
  kNone,  // CURLE_OK: the transfer ended as it should
  // The server cannot be reached, or not safely (TLS, verification), or refuses us
  // (authentication); or our own configuration or build is wrong (a URL, an option, a protocol
  // not built in): every request to that server would fail the same way.
  kUnreachable,
  // The transfer was cut short (a kept-alive connection closed by the server, a reset, a body
  // that may not be sent again, a callback's abort): this request may succeed if made again.
  kCutShort,
  kTooLarge,  // the request is too large for the server (CURLE_FILESIZE_EXCEEDED)
  // A code of a protocol or option mailroom never uses (FTP, TFTP, LDAP, RTSP, SSH, ranges,
  // CURLOPT_FAILONERROR), a retired code or one newer than these headers: a bug if seen.
  kUnexpected,
};

// The kind of `code`; every CURLcode of libcurl 7.88 is listed (-Werror=switch).
CurlFailure ClassifyCurlCode(CURLcode code);

// The words of a failed transfer for a status message: `detail` (libcurl's error buffer, "" when
// it wrote none) or else libcurl's text for `code`, then " (curl N)". libcurl's error buffer
// names a host or a reason, never a URL's path, query or credentials.
std::string CurlErrorText(CURLcode code, const std::string& detail);

}  // namespace mailroom
