// The C++ signer's side of the shared known-answer cases: VerifyToken and the `verify` tool
// agree with every case of testdata/vectors.json (valid with its secret, or refused as malformed
// or mismatch), and the tool never prints the token.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "collector/dispatch/signing.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

extern char** environ;

namespace mailroom {
namespace {

struct Case {
  std::string name, action, token;
  std::vector<std::string> keys;  // hex
  std::optional<std::string> code;
  bool valid = false;
  bool well_formed = false;  // the token's spelling alone (no key, no code)
  std::string secret, refusal;
};

nlohmann::json LoadDoc() {
  std::ifstream in("clients/testdata/vectors.json");
  EXPECT_TRUE(in.good()) << "clients/testdata/vectors.json not in the runfiles";
  return nlohmann::json::parse(in);
}

// Whether the signer takes every action name, not only activation and password_recovery. Until
// it does, the cases of other actions are checked by the verifiers of clients/ only (and from
// then on here as well, every one of them: nothing is skipped once the signer knows names).
bool SignerTakesEveryName() { return ParseTokenAction("login_code").ok(); }

bool Checkable(const Case& c) {
  return SignerTakesEveryName() || c.action == "activation" || c.action == "password_recovery";
}

std::vector<Case> LoadCases() {
  nlohmann::json doc = LoadDoc();
  std::vector<Case> cases;
  for (const auto& c : doc.at("cases")) {
    Case k;
    k.name = c.at("name");
    k.action = c.at("action");
    k.token = c.at("token");
    k.keys = c.at("keys").get<std::vector<std::string>>();
    if (!c.at("code").is_null()) k.code = c.at("code").get<std::string>();
    k.valid = c.at("valid");
    k.well_formed = c.at("well_formed");
    if (k.valid) k.secret = c.at("secret");
    else k.refusal = c.at("refusal");
    cases.push_back(std::move(k));
  }
  return cases;
}

TEST(VectorsTest, HasTheCasesEveryVerifierMustPass) {
  std::vector<Case> cases = LoadCases();
  EXPECT_GE(cases.size(), 50u);
  int valid = 0, malformed = 0, mismatch = 0;
  for (const Case& c : cases) {
    valid += c.valid;
    malformed += c.refusal == "malformed";
    mismatch += c.refusal == "mismatch";
  }
  EXPECT_GT(valid, 0);
  EXPECT_GT(malformed, 0);
  EXPECT_GT(mismatch, 0);
  // Every action by its name, including two of the application's own.
  std::set<std::string> actions;
  for (const Case& c : cases) actions.insert(c.action);
  for (const char* a : {"activation", "password_recovery", "login_code", "email_change",
                        "invitation", "welcome_gift", "team_invite"}) {
    EXPECT_EQ(actions.count(a), 1u) << a;
  }
  EXPECT_GE(LoadDoc().at("invalid_action_names").size(), 10u);
}

TEST(VectorsTest, NamesThatAreNotActionNamesAreRefused) {
  const nlohmann::json doc = LoadDoc();  // kept alive: the loop reads into it
  for (const auto& name : doc.at("invalid_action_names")) {
    EXPECT_FALSE(ParseTokenAction(name.get<std::string>()).ok()) << name;
  }
}

TEST(VectorsTest, VerifyTokenAgreesWithEveryCase) {
  for (const Case& c : LoadCases()) {
    if (!Checkable(c)) continue;
    SCOPED_TRACE(c.name);
    auto action = ParseTokenAction(c.action);
    ASSERT_TRUE(action.ok());
    auto keys = ParseSigningKeys(absl::StrJoin(c.keys, ","));
    ASSERT_TRUE(keys.ok());
    absl::Status st = VerifyToken(*keys, *action, c.token, c.code.value_or(""));
    if (c.valid) {
      EXPECT_TRUE(st.ok()) << st;
      // VerifyToken returns no secret: the token's first 32 bytes are it.
      std::string raw;
      ASSERT_TRUE(absl::WebSafeBase64Unescape(c.token, &raw));
      EXPECT_EQ(absl::BytesToHexString(raw.substr(0, 32)), c.secret);
    } else {
      EXPECT_EQ(st.code(), c.refusal == "malformed" ? absl::StatusCode::kInvalidArgument
                                                    : absl::StatusCode::kPermissionDenied)
          << st;
    }
  }
}

// How `verify` is asked: the full check or --well-formed; each flag as --flag=value or as
// --flag value.
struct Form {
  bool well_formed = false;
  bool separate = false;
};

// Runs `verify` as a front end's script would, keys in the environment; returns its exit
// status and everything it printed.
int RunVerify(const Case& c, std::string* output, Form form = {}) {
  std::vector<std::string> args = {"collector/verify"};
  if (form.well_formed) args.push_back("--well-formed");
  auto flag = [&](const std::string& name, const std::string& value) {
    if (form.separate) {
      args.push_back("--" + name);
      args.push_back(value);
    } else {
      args.push_back("--" + name + "=" + value);
    }
  };
  flag("action", c.action);
  flag("token", c.token);
  if (c.code) flag("code", *c.code);
  std::vector<std::string> env = {
      "MAILROOM_SECRET_KEY=" + c.keys[0],
      "MAILROOM_VERIFY_KEYS=" +
          absl::StrJoin(std::vector<std::string>(c.keys.begin() + 1, c.keys.end()), ",")};
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  const std::string out_path = std::string(getenv("TEST_TMPDIR")) + "/verify.out";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream in(out_path);
  output->assign(std::istreambuf_iterator<char>(in), {});
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(VectorsTest, VerifyToolAgreesWithEveryCase) {
  for (const Case& c : LoadCases()) {
    if (!Checkable(c)) continue;
    SCOPED_TRACE(c.name);
    std::string output;
    int rc = RunVerify(c, &output);
    if (c.valid) {
      EXPECT_EQ(rc, 0) << output;
      EXPECT_EQ(output, "valid\n");
    } else {
      EXPECT_EQ(rc, 1) << output;
      EXPECT_EQ(output.rfind("invalid: ", 0), 0u) << output;
    }
    if (c.token.size() >= 8) {
      EXPECT_EQ(output.find(c.token), std::string::npos) << "token printed";
    }
  }
  // A name that is not an action's is a usage error (exit 2), not a refusal of the token.
  Case bad = LoadCases().front();
  const nlohmann::json doc = LoadDoc();  // kept alive: the loop reads into it
  for (const auto& name : doc.at("invalid_action_names")) {
    bad.action = name.get<std::string>();
    std::string output;
    EXPECT_EQ(RunVerify(bad, &output), 2) << bad.action << ": " << output;
  }
}

// The spelling check: true exactly for the cases whose token is well formed (a recovery token
// without its code included), whatever the key, code or signature.
TEST(VectorsTest, WellFormedAgreesWithEveryCase) {
  int well_formed = 0, malformed = 0;
  for (const Case& c : LoadCases()) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(WellFormed(c.token).ok(), c.well_formed);
    (c.well_formed ? well_formed : malformed)++;
    if (!c.valid) {
      EXPECT_TRUE(c.well_formed || c.refusal == "malformed");
    }
  }
  EXPECT_GT(well_formed, 0);
  EXPECT_GT(malformed, 0);
}

TEST(VectorsTest, VerifyToolWellFormedAgreesWithEveryCase) {
  for (const Case& c : LoadCases()) {
    for (bool separate : {false, true}) {
      SCOPED_TRACE(c.name + (separate ? " (--flag value)" : " (--flag=value)"));
      Case no_key = c;  // the spelling check needs no key
      no_key.keys = {""};
      std::string output;
      int rc = RunVerify(no_key, &output, Form{true, separate});
      if (c.well_formed) {
        EXPECT_EQ(rc, 0) << output;
        EXPECT_EQ(output, "well-formed\n");
      } else {
        EXPECT_EQ(rc, 1) << output;
        EXPECT_EQ(output.rfind("malformed: ", 0), 0u) << output;
      }
      if (c.token.size() >= 8) {
        EXPECT_EQ(output.find(c.token), std::string::npos) << "token printed";
      }
    }
  }
  Case bad = LoadCases().front();
  const nlohmann::json doc = LoadDoc();  // kept alive: the loop reads into it
  for (const auto& name : doc.at("invalid_action_names")) {
    bad.action = name.get<std::string>();
    std::string output;
    EXPECT_EQ(RunVerify(bad, &output, Form{true, false}), 2) << bad.action << ": " << output;
  }
}

TEST(VectorsTest, VerifyToolTakesEveryFlagAsTheNextWord) {
  for (const Case& c : LoadCases()) {
    if (!Checkable(c)) continue;
    SCOPED_TRACE(c.name);
    std::string output;
    EXPECT_EQ(RunVerify(c, &output, Form{false, true}), c.valid ? 0 : 1) << output;
  }
}

}  // namespace
}  // namespace mailroom
