#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace mailroom {

// A URL the sender hands to libcurl (a transport's server, a provider's API, a token endpoint),
// as libcurl itself reads it. The configuration decides from these parts, not from a parse of
// its own, so "this host is a loopback address" is about the host libcurl connects to.
struct OutboundUrl {
  std::string scheme;  // lower case: "https", "http", "smtp", ...
  // The host libcurl connects to, as its URL API returns it: a numeric IPv4 address in
  // dotted-decimal form whatever form it was written in, an IPv6 address in brackets.
  std::string host;
  std::string port;       // the URL's, else the scheme's default; "" when neither is known
  bool userinfo = false;  // a user name, a password or login options before the host
  bool loopback = false;  // `host` is a loopback address (IsLoopbackAddress)
};

// Parses `url` with libcurl's URL API (curl_url_set with CURLUPART_URL), the parser libcurl
// runs on the value of CURLOPT_URL. The URL must name its scheme: none is guessed. A scheme
// libcurl does not support is returned as it is, for the caller to refuse by name.
// InvalidArgument when libcurl cannot parse the URL; the message is libcurl's reason and never
// holds the URL or a part of it. Thread-safe.
absl::StatusOr<OutboundUrl> ParseOutboundUrl(const std::string& url);

}  // namespace mailroom
