#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mailroom {

// The contents of the PEM file at `path` (a certificate, a key or a CA bundle), for the setting
// `variable` that named it (MAILROOM_TLS_CERT, ...). Errors are kFailedPrecondition (no retry
// fixes a configuration) and start with "VARIABLE: ": the file cannot be read, or it is empty.
// They name the path, never the contents (a key is a secret).
absl::StatusOr<std::string> ReadPem(absl::string_view variable, const std::string& path);

}  // namespace mailroom
