#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mailroom {

// The command line of one of mailroom's tools. Flags are defined with ABSL_FLAG in the tool's
// main.cc (abseil's registry, types and value parsing) and read with absl::GetFlag.
struct CommandLine {
  std::vector<std::string> args;  // the words that are not flags, in order
  std::set<std::string> given;    // the names of the flags given (e.g. "token")
  bool help = false;              // --help or -h was given
};

// A flag's value that is a comma-separated list of integers ("100000,1000000"; "" is empty):
// ABSL_FLAG(mailroom::IntList, sizes, {{100000}}, "...").
struct IntList {
  std::vector<int> values;
};
bool AbslParseFlag(absl::string_view text, IntList* list, std::string* error);
std::string AbslUnparseFlag(const IntList& list);

// Parses argv[first..argc): --name=value, --name value (not for bools), --name and --noname
// (bools), -- ends the flags; a name's dashes are its underscores (--send-test is send_test). Sets
// each flag as it is read. Errors (kInvalidArgument) say which flag and what is wrong, never the
// value given (a flag may carry a token): an unknown flag, a missing value, a value the flag's type
// refuses. abseil's own ParseCommandLine is not used: it exits 1 on such errors, and the tools keep
// 1 for their own outcome (verify: invalid token) and 2 for bad usage.
absl::StatusOr<CommandLine> ParseFlags(int argc, char** argv, int first = 1);

// Prints "`program`: `why`" and `usage` to stderr; returns 2, the tools' code for bad usage.
int UsageError(absl::string_view program, absl::string_view why, absl::string_view usage);

// For a tool that takes flags and no other words (the benchmarks): parses argv. With --help it
// prints `usage` and FlagsHelp() to stdout and returns 0; on an error it prints the error, usage
// and flags to stderr and returns 2; otherwise it returns nullopt and the tool goes on.
std::optional<int> ParseToolFlags(absl::string_view program, absl::string_view usage, int argc,
                                  char** argv);

// One line per flag in abseil's registry, sorted: "  --name=DEFAULT  help". For --help.
std::string FlagsHelp();

}  // namespace mailroom
