// verify: checks a mailroom token of any action (and the code it signs) against the signing
// keys, as a front end would. Keys: MAILROOM_SECRET_KEY (the current one) and optionally
// MAILROOM_VERIFY_KEYS (older keys, comma-separated), so tokens signed before a key rotation
// still verify.
//
//   verify --action=NAME --token=TOKEN|- [--code=DIGITS]
//   verify --well-formed --action=NAME --token=TOKEN|-
//
// Prints "valid" and exits 0, or "invalid: <reason>" on stderr and exits 1 (an empty or
// malformed token included); usage or configuration errors exit 2. The token is never printed.
// Only the signer's canonical spelling of a token verifies (see VerifyToken). With
// --well-formed it checks the token's spelling only (no key, no code, no signature: what a
// front end checks on a recovery link's GET) and prints "well-formed" (exit 0) or
// "malformed: <reason>" on stderr (exit 1). Every flag takes --flag=value or --flag value.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "collector/dispatch/signing.h"
#include "common/flags.h"

ABSL_FLAG(std::string, action, "",
          "the action's name: activation, password_recovery, login_code, ... or one of the "
          "application's own");
ABSL_FLAG(std::string, token, "", "the token, or - to read one line from stdin");
ABSL_FLAG(std::string, code, "",
          "the code, for actions that carry one (password_recovery, login_code, ...)");
ABSL_FLAG(bool, well_formed, false,
          "(spelt --well-formed) check only the token's spelling: no key, no code, no signature");

namespace {

constexpr char kUsage[] = "usage: verify --action=NAME --token=TOKEN|- [--code=DIGITS]\n"
                          "       verify --well-formed --action=NAME --token=TOKEN|-\n";

int Usage(const std::string& why) { return mailroom::UsageError("verify", why, kUsage); }

}  // namespace

int main(int argc, char** argv) {
  // The flag is spelt --well-formed on every verifier's command line; abseil names it
  // well_formed. Only the flag's own word is respelt (before a "--", never a value).
  std::vector<std::string> words(argv, argv + argc);
  for (size_t i = 1; i < words.size() && words[i] != "--"; ++i) {
    for (const auto& [dashed, abseil] :
         {std::pair<std::string, std::string>{"--well-formed", "--well_formed"},
          {"--nowell-formed", "--nowell_formed"}}) {
      if (words[i] == dashed || words[i].rfind(dashed + "=", 0) == 0) {
        words[i] = abseil + words[i].substr(dashed.size());
      }
    }
  }
  std::vector<char*> args;
  args.reserve(words.size());
  for (std::string& w : words) args.push_back(w.data());
  // Errors name a flag, never its value: a mistyped --token=... must not print the token.
  auto cl = mailroom::ParseFlags(static_cast<int>(args.size()), args.data());
  if (!cl.ok()) return Usage(std::string(cl.status().message()));
  if (cl->help) {
    std::printf("%s%s", kUsage, mailroom::FlagsHelp().c_str());
    return 0;
  }
  if (!cl->args.empty()) return Usage(absl::StrCat("unexpected argument ", cl->args[0]));
  const std::string action = absl::GetFlag(FLAGS_action);
  std::string token = absl::GetFlag(FLAGS_token);
  const std::string code = absl::GetFlag(FLAGS_code);
  const bool have_action = cl->given.count("action") > 0;
  const bool have_token = cl->given.count("token") > 0;
  auto act = mailroom::ParseTokenAction(action);
  if (!have_action || !act.ok()) {
    return Usage("--action must be an action's name: [a-z][a-z0-9_]{0,62}");
  }
  if (!have_token) return Usage("--token is required");
  // The token is checked exactly as given: surrounding spaces are part of it (and refused).
  // From stdin only the line's end goes, so `echo TOKEN | verify --token=-` works.
  if (token == "-") {
    std::getline(std::cin, token);
    if (!token.empty() && token.back() == '\r') token.pop_back();
  }
  if (absl::GetFlag(FLAGS_well_formed)) {
    absl::Status st = mailroom::WellFormed(token);
    if (!st.ok()) {
      std::fprintf(stderr, "malformed: %s\n", std::string(st.message()).c_str());
      return 1;
    }
    std::printf("well-formed\n");
    return 0;
  }

  const char* current = std::getenv("MAILROOM_SECRET_KEY");
  if (current == nullptr || *current == '\0') {
    std::fprintf(stderr, "verify: MAILROOM_SECRET_KEY: required but not set\n");
    return 2;
  }
  std::string all = current;
  const char* older = std::getenv("MAILROOM_VERIFY_KEYS");
  if (older != nullptr && *older != '\0') absl::StrAppend(&all, ",", older);
  auto keys = mailroom::ParseSigningKeys(all);
  if (!keys.ok()) {
    std::fprintf(stderr, "verify: MAILROOM_SECRET_KEY/MAILROOM_VERIFY_KEYS: %s\n",
                 std::string(keys.status().message()).c_str());
    return 2;
  }
  absl::Status st = mailroom::VerifyToken(*keys, *act, token, code);
  if (!st.ok()) {
    std::fprintf(stderr, "invalid: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  std::printf("valid\n");
  return 0;
}
