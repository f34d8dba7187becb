#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace mailroom {

// One HTTP request the feedback endpoint received whole: its path (without the query), its
// header lines as sent and its body.
struct HttpRequest {
  std::string path;
  std::vector<std::pair<std::string, std::string>> headers;  // name as sent, value trimmed
  std::string body;

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

// An HTTP answer: status and a short plain-text body.
struct HttpReply {
  int status = 200;
  std::string body;
};

// What answers a request of the feedback endpoint. Implementations are thread-safe: the
// endpoint's workers call Handle at once.
class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  virtual HttpReply Handle(const HttpRequest& request) = 0;
};

}  // namespace mailroom
