#include "common/pem.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mailroom {

absl::StatusOr<std::string> ReadPem(absl::string_view variable, const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  if (f) ss << f.rdbuf();
  if (!f || f.bad()) {
    return absl::FailedPreconditionError(absl::StrCat(variable, ": cannot read \"", path, "\""));
  }
  // An empty file would only fail later, inside gRPC's TLS handshake, with no name on it.
  if (ss.str().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(variable, ": \"", path, "\" is empty"));
  }
  return ss.str();
}

}  // namespace mailroom
