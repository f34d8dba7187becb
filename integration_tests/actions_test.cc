// Every built-in action, and one of the application's own, end to end: PostgreSQL -> collector
// -> sender -> SMTP peer / SES emulator, real processes over loopback. Each action's email
// reaches its recipient (an address change's confirmation the new address, its notice the old
// one), and every link verifies for its own action (with its code where it carries one).
// The sender renders each action from its templates (the built-in set, and the custom action's
// files in MAILROOM_TEMPLATE_DIR beside copies of the built-in ones).
#include <filesystem>
#include <fstream>
#include <map>
#include <pqxx/pqxx>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collector/dispatch/signing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/process.h"
#include "testing/stack.h"

namespace mailroom {
namespace {

namespace fs = std::filesystem;
using testing::Files;
using ::testing::HasSubstr;
using testing::Slurp;
using testing::TextPart;
using testing::TokenFromLink;

// The actions this test requests, each with the address its email goes to.
const std::map<std::string, std::string>& Expected() {
  static const auto* expected = new std::map<std::string, std::string>{
      {"login_code", "coder@example.test"},         {"email_change", "moved@example.test"},
      {"email_changed", "mover@example.test"},      {"invitation", "guest@example.test"},
      {"password_changed", "changer@example.test"}, {"account_suspended", "flip@example.test"},
      {"account_reactivated", "flip@example.test"}, {"document_signature", "signer@example.test"},
  };
  return *expected;
}

class ActionsTest : public testing::StackTest {
 protected:
  // A template directory: the built-in set, and the custom action's files.
  std::string TemplateDir() {
    const std::string dir = dir_ + "/templates";
    fs::create_directories(dir);
    std::ofstream(dir + "/document_signature.subject") << "Sign the document, {{login}}";
    std::ofstream(dir + "/document_signature.txt")
        << "Hello {{login}}, your code is {{code}}: {{link}}\n";
    std::ofstream(dir + "/document_signature.html")
        << "<p>Hello {{login}}, your code is {{code}}: <a href=\"{{link}}\">sign</a></p>\n";
    return dir;
  }

  // Requests one email of every action (and the custom one, added with one INSERT).
  void RequestEveryAction() {
    Exec("INSERT INTO accounts (email, login, status, activated_at) VALUES"
         " ('coder@example.test', 'coder', 'active', 1),"
         " ('mover@example.test', 'mover', 'active', 1),"
         " ('changer@example.test', 'changer', 'active', 1),"
         " ('flip@example.test', 'flip', 'active', 1),"
         " ('signer@example.test', 'signer', 'active', 1)");
    Exec("INSERT INTO accounts (email, login, status) VALUES"
         " ('guest@example.test', 'guest', 'invited')");
    Exec("INSERT INTO actions (name, carries_code, code_length, expiry_seconds, priority,"
         " account_status) VALUES ('document_signature', true, 8, 3600, 'normal', 'active')");
    for (const auto& [login, call] : std::vector<std::pair<std::string, std::string>>{
             {"coder", "'login_code'"},
             {"mover", "'email_change', 'moved@example.test'"},
             {"guest", "'invitation'"},
             {"changer", "'password_changed'"},
             {"signer", "'document_signature'"}}) {
      EXPECT_EQ(
          Scalar(absl::StrCat("SELECT count(*) FROM accounts a, LATERAL mailroom.request(a.id, ",
                              call, ") r WHERE a.login = '", login, "' AND r.decision = 'queued'")),
          1)
          << login;
    }
  }

  // After the confirmation's email went out: the address change confirmed (as consume does
  // it), and the status changed twice.
  void ConfirmAndChangeStatus(testing::Process& sender) {
    ASSERT_EQ(WaitFor("SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
                      " WHERE d.state = 'sent' AND t.action = 'email_change'",
                      1, absl::Seconds(60)),
              1)
        << sender.Log() << Rows();
    Exec("UPDATE tokens SET consumed_at = EXTRACT(EPOCH FROM now())::BIGINT"
         " WHERE action = 'email_change'");
    Exec("UPDATE accounts SET status = 'suspended' WHERE login = 'flip'");
    Exec("UPDATE accounts SET status = 'active' WHERE login = 'flip'");
  }

  // Waits until every action's email is sent, one each; false (with the log) if not.
  bool WaitForEveryAction(testing::Process& sender) {
    const int want = static_cast<int>(Expected().size());
    const int64_t sent = WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", want,
                                 absl::Seconds(60));
    EXPECT_EQ(sent, want) << sender.Log() << Rows();
    std::string all;
    for (const auto& [action, to] : Expected())
      absl::StrAppend(&all, all.empty() ? "" : ",", action);
    EXPECT_EQ(Text("SELECT string_agg(t.action, ',' ORDER BY t.action) FROM delivery_states d"
                   " JOIN tokens t ON t.id = d.token_id WHERE d.state = 'sent'"),
              all);
    return sent == want;
  }

  std::string Text(const std::string& sql) {
    pqxx::connection c(url_);
    pqxx::row r = pqxx::nontransaction(c).exec1(sql);
    return r[0].is_null() ? "NULL" : r[0].as<std::string>();
  }

  std::string Rows() {
    std::string out = "\n";
    pqxx::connection c(url_);
    for (const auto& r : pqxx::nontransaction(c).exec(
             "SELECT t.action, d.state, coalesce(d.reason, '') FROM tokens t"
             " LEFT JOIN delivery_states d ON d.token_id = t.id ORDER BY t.id")) {
      absl::StrAppend(&out, r[0].c_str(), " ", r[1].is_null() ? "-" : r[1].c_str(), " ",
                      r[2].c_str(), "\n");
    }
    return out;
  }

  // The code of the action's token, or "" when the action carries none.
  std::string CodeOf(const std::string& action) {
    pqxx::connection c(url_);
    pqxx::row r = pqxx::nontransaction(c).exec1(
        absl::StrCat("SELECT CASE WHEN k.carries_code THEN t.code ELSE '' END, k.carries_secret"
                     " FROM tokens t JOIN actions k ON k.name = t.action WHERE t.action = '",
                     action, "' ORDER BY t.id DESC LIMIT 1"));
    return r[0].as<std::string>();
  }
  bool CarriesSecret(const std::string& action) {
    return Scalar(absl::StrCat("SELECT carries_secret::INT FROM actions WHERE name = '", action,
                               "'")) == 1;
  }

  // Checks one email per action in `mimes` (keyed by recipient and action): its recipient and,
  // for an action with a secret, a link that verifies for that action only.
  void ExpectOneEmailPerAction(const std::vector<std::string>& mimes) {
    ASSERT_EQ(mimes.size(), Expected().size());
    std::vector<SigningKey> keys = {*ParseSigningKey(testing::kStackKey)};
    for (const auto& [action, to] : Expected()) {
      int found = 0;
      for (const std::string& mime : mimes) {
        if (mime.find("<" + to + ">") == std::string::npos) continue;
        const std::string token = TokenFromLink(TextPart(mime));
        if (!CarriesSecret(action)) {
          // The notices of one address (suspended, reactivated) are told apart by having no
          // link; each is one of the two emails to flip@.
          if (token.empty()) ++found;
          continue;
        }
        if (token.size() == 86 &&
            VerifyToken(keys, *ParseTokenAction(action), token, CodeOf(action)).ok()) {
          ++found;
          const std::string code = CodeOf(action);
          if (!code.empty()) {
            EXPECT_THAT(TextPart(mime), HasSubstr(code)) << action;
          }
        }
      }
      EXPECT_GE(found, 1) << action << " to " << to;
    }
  }
};

TEST_F(ActionsTest, EveryActionIsDeliveredThroughSmtpWithAVerifiableLink) {
  int smtp_port;
  auto smtp = StartSmtpPeer({}, &smtp_port);
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "smtp"},
                             {"MAILROOM_SMTP_URL", absl::StrCat("smtp://127.0.0.1:", smtp_port)},
                             {"MAILROOM_SMTP_ALLOW_PLAIN", "true"},
                             {"MAILROOM_TEMPLATE_DIR", TemplateDir()}});
  ASSERT_NE(sender, nullptr);
  RequestEveryAction();
  ConfirmAndChangeStatus(*sender);
  ASSERT_TRUE(WaitForEveryAction(*sender));
  std::vector<std::string> mimes;
  for (const auto& f : Files(dir_ + "/smtp", ".eml")) mimes.push_back(Slurp(f));
  ExpectOneEmailPerAction(mimes);
}

TEST_F(ActionsTest, EveryActionIsDeliveredThroughSesWithAVerifiableLink) {
  const std::string endpoint = StartSes(0);
  if (endpoint.empty()) GTEST_SKIP() << "MAILROOM_NODE_MODULES not set (run .ci/test)";
  auto env = SesEnv(endpoint);
  env["MAILROOM_TEMPLATE_DIR"] = TemplateDir();
  auto sender = StartSender(env);
  ASSERT_NE(sender, nullptr);
  RequestEveryAction();
  ConfirmAndChangeStatus(*sender);
  ASSERT_TRUE(WaitForEveryAction(*sender));
  EXPECT_EQ(ReceivedBySes().emails, static_cast<int64_t>(Expected().size())) << SesStore();
  const std::string store = SesStore();
  for (const auto& [action, to] : Expected()) EXPECT_THAT(store, HasSubstr(to)) << action;
  // Every link in the store verifies for one of the actions with a secret.
  std::vector<SigningKey> keys = {*ParseSigningKey(testing::kStackKey)};
  int verified = 0;
  const std::regex link("token=([A-Za-z0-9_-]{86})");
  std::set<std::string> tokens;
  for (auto it = std::sregex_iterator(store.begin(), store.end(), link);
       it != std::sregex_iterator(); ++it) {
    tokens.insert((*it)[1].str());
  }
  for (const std::string& token : tokens) {
    for (const auto& [action, to] : Expected()) {
      if (CarriesSecret(action) &&
          VerifyToken(keys, *ParseTokenAction(action), token, CodeOf(action)).ok()) {
        ++verified;
      }
    }
  }
  // login_code, email_change, invitation and document_signature.
  EXPECT_EQ(verified, 4);
}

}  // namespace
}  // namespace mailroom
