#pragma once

// Files for tests: a fresh directory under the test's TEST_TMPDIR (/tmp outside Bazel) and a
// file written in one call.

#include <string>

namespace mailroom::testing {

// TEST_TMPDIR/name, emptied and created anew.
std::string FreshDir(const std::string& name);

// Writes `content` to `path`, replacing what was there.
void WriteFile(const std::string& path, const std::string& content);

}  // namespace mailroom::testing
