#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace mailroom {

// mailroom's version: the one place it is written. Between releases it is the next release's
// number with "-dev" (the top of docs/CHANGELOG.md's [Unreleased] becomes that release).
inline constexpr char kVersion[] = "0.5.0-dev";

// What `--version` prints for `program` (collector, sender): "collector 0.5.0-dev" and, on a
// second line, the build: the compiler and the versions of gRPC and Protobuf it was built with.
std::string VersionText(absl::string_view program);

}  // namespace mailroom
