// verify: checks a mailroom token of any action (and the code it signs) against the signing
// keys, as a front end would. Keys: MAILROOM_SECRET_KEY (the current one) and optionally
// MAILROOM_VERIFY_KEYS (older keys, comma-separated), so tokens signed before a key rotation
// still verify.
//
//   verify --action=NAME --token=TOKEN|- [--code=DIGITS]
//
// Prints "valid" and exits 0, or "invalid: <reason>" on stderr and exits 1 (an empty or
// malformed token included); usage or configuration errors exit 2. The token is never printed.
// Only the signer's canonical spelling of a token verifies (see VerifyToken).
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "collector/signing.h"

namespace {

int Usage(const char* why) {
  std::fprintf(stderr,
               "verify: %s\nusage: verify --action=NAME "
               "--token=TOKEN|- [--code=DIGITS]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string action, token, code;
  bool have_action = false, have_token = false;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (absl::ConsumePrefix(&a, "--action=")) {
      action = std::string(a);
      have_action = true;
    } else if (absl::ConsumePrefix(&a, "--token=")) {
      token = std::string(a);
      have_token = true;
    } else if (absl::ConsumePrefix(&a, "--code=")) {
      code = std::string(a);
    } else {
      // Only the name: a mistyped --token=… must not print the token.
      absl::string_view name = argv[i];
      name = name.substr(0, name.find('='));
      return Usage(absl::StrCat("unknown argument ", name).c_str());
    }
  }
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
