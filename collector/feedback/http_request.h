#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace mailroom {

// One HTTP request the endpoint received whole: its path (without the query), its header
// lines as sent, its body, its method and its query (the request target after `?`, as sent).
struct HttpRequest {
  std::string path;
  std::vector<std::pair<std::string, std::string>> headers;  // name as sent, value trimmed
  std::string body;
  std::string method = "POST";  // POST, or GET where the server allows it
  std::string query{};

  // The value of the one header named `name` (any case); nullptr when there is none, or more
  // than one: a signature or credential given twice is not read at all (a proxy in front may
  // have passed on the other one).
  const std::string* Header(absl::string_view name) const {
    const std::string* found = nullptr;
    for (const auto& [n, v] : headers) {
      if (!absl::EqualsIgnoreCase(n, name)) continue;
      if (found != nullptr) return nullptr;
      found = &v;
    }
    return found;
  }
};

// An HTTP answer: status and a short body, plain text unless `content_type` says otherwise,
// and `headers`: further header lines, each ended by CRLF (Set-Cookie, Location, ...).
struct HttpReply {
  int status = 200;
  std::string body;
  std::string content_type = "text/plain; charset=utf-8";
  std::string headers{};
};

// What answers a request of the feedback endpoint. Implementations are thread-safe: the
// endpoint's workers call Handle at once.
class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  virtual HttpReply Handle(const HttpRequest& request) = 0;
};

}  // namespace mailroom
