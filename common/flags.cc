#include "common/flags.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace mailroom {
namespace {

absl::Status Bad(absl::string_view name, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", what));
}

}  // namespace

absl::StatusOr<CommandLine> ParseFlags(int argc, char** argv, int first) {
  CommandLine out;
  for (int i = first; i < argc; ++i) {
    absl::string_view word = argv[i];
    if (word == "--") {
      for (++i; i < argc; ++i) out.args.emplace_back(argv[i]);
      break;
    }
    if (word.size() < 2 || word[0] != '-') {
      out.args.emplace_back(word);
      continue;
    }
    if (word == "--help" || word == "-h") {
      out.help = true;
      continue;
    }
    word.remove_prefix(absl::StartsWith(word, "--") ? 2 : 1);
    const size_t eq = word.find('=');
    // A flag's name is written with dashes or underscores (--code-length, --code_length).
    std::string spelled(word.substr(0, eq));
    std::replace(spelled.begin(), spelled.end(), '-', '_');
    absl::string_view name = spelled;
    const bool has_value = eq != absl::string_view::npos;
    std::string value = has_value ? std::string(word.substr(eq + 1)) : "";
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    // --noNAME for a bool flag NAME.
    if (flag == nullptr && !has_value && absl::ConsumePrefix(&name, "no")) {
      flag = absl::FindCommandLineFlag(name);
      if (flag != nullptr && flag->IsOfType<bool>()) {
        value = "false";
      } else {
        flag = nullptr;
        name = spelled;
      }
    } else if (flag != nullptr && !has_value) {
      if (flag->IsOfType<bool>()) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return Bad(name, "needs a value");
      }
    }
    if (flag == nullptr || flag->IsRetired()) return Bad(name, "unknown flag");
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      // abseil's message quotes the value: only the flag's name and type go out.
      return Bad(name, absl::StrCat("not a valid ", flag->IsOfType<bool>() ? "boolean" : "value",
                                    " (default ", flag->DefaultValue(), ")"));
    }
    out.given.emplace(flag->Name());
  }
  return out;
}

bool AbslParseFlag(absl::string_view text, IntList* list, std::string* error) {
  list->values.clear();
  if (text.empty()) return true;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    int n;
    if (!absl::SimpleAtoi(item, &n)) {
      *error = "not a comma-separated list of integers";
      return false;
    }
    list->values.push_back(n);
  }
  return true;
}

std::string AbslUnparseFlag(const IntList& list) { return absl::StrJoin(list.values, ","); }

int UsageError(absl::string_view program, absl::string_view why, absl::string_view usage) {
  std::fprintf(stderr, "%s: %s\n%s", std::string(program).c_str(), std::string(why).c_str(),
               std::string(usage).c_str());
  return 2;
}

std::optional<int> ParseToolFlags(absl::string_view program, absl::string_view usage, int argc,
                                  char** argv) {
  auto cl = ParseFlags(argc, argv);
  const std::string all = absl::StrCat(usage, FlagsHelp());
  if (!cl.ok()) return UsageError(program, cl.status().message(), all);
  if (!cl->args.empty()) {
    return UsageError(program, absl::StrCat("unexpected argument ", cl->args[0]), all);
  }
  if (cl->help) {
    std::printf("%s", all.c_str());
    return 0;
  }
  return std::nullopt;
}

std::string FlagsHelp() {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) flags.push_back(flag);
  std::sort(flags.begin(), flags.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  std::string out;
  for (const absl::CommandLineFlag* f : flags) {
    absl::StrAppend(&out, "  --", f->Name(), "=", f->DefaultValue(), "  ", f->Help(), "\n");
  }
  return out;
}

}  // namespace mailroom
