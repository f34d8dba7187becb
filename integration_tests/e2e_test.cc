// End to end: PostgreSQL -> collector -> sender -> SMTP server / SES emulator / files, with
// real processes over loopback. Every email's link carries a token the verify logic accepts.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <pqxx/pqxx>
#include <regex>
#include <set>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collector/dispatch/signing.h"
#include "collector/schema/migrate.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "testing/process.h"
#include "testing/stack.h"

namespace mailroom {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::Process;

using testing::Files;
using testing::Slurp;
using testing::TextPart;
using testing::TokenFromLink;

class EndToEndTest : public testing::StackTest {};

TEST_F(EndToEndTest, AccountYieldsAnEmailInTheSmtpCaptureWithAVerifiableLink) {
  int smtp_port;
  auto smtp = StartSmtpPeer({}, &smtp_port);
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "smtp"},
                             {"MAILROOM_SMTP_URL", absl::StrCat("smtp://127.0.0.1:", smtp_port)},
                             {"MAILROOM_SMTP_ALLOW_PLAIN", "true"}});
  Exec("INSERT INTO accounts (email, login) VALUES ('alice@example.test', 'alice')");
  ASSERT_EQ(
      WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 1, absl::Seconds(30)), 1)
      << sender->Log();
  auto emls = Files(dir_ + "/smtp", ".eml");
  ASSERT_EQ(emls.size(), 1u);
  std::string mime = Slurp(emls[0]);
  EXPECT_THAT(mime, HasSubstr("To: alice <alice@example.test>"));
  EXPECT_THAT(mime, HasSubstr("Subject: Activate your mailroom account"));
  EXPECT_THAT(TextPart(mime), HasSubstr("https://app.example.test/activate?token="));
  ExpectVerifies(mime, TokenAction::kActivation, "");
  EXPECT_THAT(Slurp(emls[0].substr(0, emls[0].size() - 4) + ".json"),
              HasSubstr("\"to\": [\"alice@example.test\"]"));
  // No token in any log.
  std::string token = TokenFromLink(TextPart(mime));
  EXPECT_THAT(sender->Log(), Not(HasSubstr(token)));
  EXPECT_THAT(collector_->Log(), Not(HasSubstr(token)));
}

// accounts.locale reaches the sender through the job and picks the localised templates:
// de-AT falls back to the built-in German set; a language without templates gets the default.
TEST_F(EndToEndTest, AccountLocalePicksLocalisedTemplatesEndToEnd) {
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "file"}, {"MAILROOM_FILE_DIR", dir_ + "/out"}});
  Exec("INSERT INTO accounts (email, login, locale) VALUES "
       "('greta@example.test', 'greta', 'de-AT'), ('jean@example.test', 'jean', 'fr')");
  ASSERT_EQ(
      WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 2, absl::Seconds(30)), 2)
      << sender->Log();
  std::string greta, jean;
  for (const auto& f : Files(dir_ + "/out", ".eml")) {
    std::string mime = Slurp(f);
    (mime.find("To: greta") != std::string::npos ? greta : jean) = mime;
  }
  EXPECT_THAT(greta, HasSubstr("Subject: Aktivieren Sie Ihr mailroom-Konto"));
  EXPECT_THAT(jean, HasSubstr("Subject: Activate your mailroom account"));
  ExpectVerifies(greta, TokenAction::kActivation, "");
}

TEST_F(EndToEndTest, PasswordRecoveryEmailCarriesTheSignedCode) {
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "file"}, {"MAILROOM_FILE_DIR", dir_ + "/out"}});
  Exec("INSERT INTO accounts (email, login, status) VALUES ('bob@example.test', 'bob', 'active')");
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts");
  ASSERT_EQ(
      WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 1, absl::Seconds(30)), 1)
      << sender->Log();
  std::string code = pqxx::nontransaction(*std::make_unique<pqxx::connection>(url_))
                         .exec1("SELECT code FROM tokens")[0]
                         .as<std::string>();
  auto emls = Files(dir_ + "/out", ".eml");
  ASSERT_EQ(emls.size(), 1u);
  std::string mime = Slurp(emls[0]);
  EXPECT_THAT(TextPart(mime), HasSubstr("Your code is " + code));
  EXPECT_THAT(TextPart(mime), HasSubstr("https://app.example.test/recover?token="));
  ExpectVerifies(mime, TokenAction::kPasswordRecovery, code);
}

// A script requesting "forgot password" 200 times for one account within 10 s.
// At most the limit (5 a day) is sent and charged; every other request ends superseded or rate
// limited with a reason; another account's recovery in the middle of the flood goes out.
TEST_F(EndToEndTest, RecoveryFloodIsCappedWhileOtherAccountsAreServed) {
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "file"}, {"MAILROOM_FILE_DIR", dir_ + "/out"}});
  Exec("INSERT INTO accounts (email, login, status) VALUES"
       " ('victim@example.test', 'victim', 'active'), ('bystander@example.test', 'by', 'active')");
  pqxx::connection c(url_);
  const absl::Time start = absl::Now();
  for (int i = 0; i < 200; ++i) {
    // One request per transaction, as an application would make them.
    pqxx::work tx(c);
    tx.exec("INSERT INTO tokens (account, action)"
            " SELECT id, 'password_recovery' FROM accounts WHERE login = 'victim'");
    if (i == 100) {
      tx.exec("INSERT INTO tokens (account, action)"
              " SELECT id, 'password_recovery' FROM accounts WHERE login = 'by'");
    }
    tx.commit();
  }
  ASSERT_LT(absl::Now() - start, absl::Seconds(10));
  const std::string by_sent =
      "SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
      " JOIN accounts a ON a.id = t.account WHERE a.login = 'by' AND d.state = 'sent'";
  EXPECT_EQ(WaitFor(by_sent, 1, absl::Seconds(10)), 1) << sender->Log();
  const std::string victim_done =
      "SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
      " JOIN accounts a ON a.id = t.account WHERE a.login = 'victim'"
      " AND d.state IN ('sent', 'superseded', 'rate_limited')";
  ASSERT_EQ(WaitFor(victim_done, 200, absl::Seconds(30)), 200) << sender->Log();

  const std::string victim = " FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
                             " JOIN accounts a ON a.id = t.account WHERE a.login = 'victim'";
  const int64_t sent = Scalar("SELECT count(*)" + victim + " AND d.state = 'sent'");
  EXPECT_GE(sent, 1);
  EXPECT_LE(sent, 5);
  // Only the first five requests of the day were accepted; the newest of them is never lost.
  EXPECT_EQ(Scalar("SELECT count(*)" + victim +
                   " AND d.state = 'rate_limited'"
                   " AND d.reason LIKE 'rate limited: 5 password_recovery requests%'"),
            195);
  EXPECT_EQ(Scalar("SELECT count(*)" + victim +
                   " AND d.state = 'superseded'"
                   " AND d.reason LIKE 'superseded by a newer password recovery request%'"),
            5 - sent);
  EXPECT_EQ(Scalar("SELECT count(*)" + victim +
                   " AND d.state = 'sent' AND t.id = (SELECT max(id)"
                   " FROM tokens WHERE account = a.id AND NOT rate_limited)"),
            1);
  // Spend: only what was sent is charged, and only that reached the transport.
  EXPECT_EQ(Scalar("SELECT coalesce(sum(sent), 0) FROM group_usage"), sent + 1);
  // A SENT batch job keeps no per-job cost (group_usage holds the sum), so the charge is
  // checked against the price: the default MAILROOM_PRICE_PER_1000 of 0.10 is 100 micros an email.
  EXPECT_EQ(Scalar("SELECT coalesce(sum(cost_micros), 0) FROM group_usage"), (sent + 1) * 100);
  EXPECT_EQ(static_cast<int64_t>(Files(dir_ + "/out", ".eml").size()), sent + 1);
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'failed'"), 0);
  EXPECT_EQ(Scalar("SELECT superseded + rate_limited FROM mailroom_stats('mailroom')"), 200 - sent);
}

TEST_F(EndToEndTest, HostileLoginsAndAddressesNeitherInjectNorBlockOthers) {
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "file"}, {"MAILROOM_FILE_DIR", dir_ + "/out"}});
  // Addresses that are not mailboxes never become accounts (before_account_email_check); the
  // sender's own check (message_test) stands behind that for rows from before it.
  for (const char* address :
       {"E'bad\\r\\nBcc: victim@evil.test@example.test'", "'not-an-address'"}) {
    EXPECT_THROW(Exec(absl::StrCat("INSERT INTO accounts (email, login) VALUES (", address,
                                   ", 'bad')")),
                 std::exception)
        << address;
  }
  Exec("INSERT INTO accounts (email, login) VALUES "
       "('ok1@example.test', 'plain'),"
       "('quote@example.test', 'Mallory \"<script>alert(1)</script>\", x@evil.test'),"
       "('crlf@example.test', E'evil\\r\\nBcc: victim@evil.test'),"
       "('unicode@example.test', 'J\u00fcrgen \u5c71\u7530'),"
       "('" +
       std::string(64, 'a') + "@" + std::string(63, 'b') + "." + std::string(63, 'c') + "." +
       std::string(56, 'd') +
       ".test', 'long254'),"
       "('ok2@example.test', 'plain2')");
  ASSERT_EQ(WaitFor("SELECT count(*) FROM delivery_states WHERE state IN ('sent', 'failed')", 6,
                    absl::Seconds(30)),
            6)
      << sender->Log();
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'sent'"), 6);
  EXPECT_EQ(Scalar("SELECT count(*) FROM accounts WHERE login = 'bad'"), 0);
  for (const auto& path : Files(dir_ + "/out", ".eml")) {
    std::string mime = Slurp(path);
    std::string headers = mime.substr(0, mime.find("\r\n\r\n"));
    EXPECT_THAT(headers, Not(HasSubstr("Bcc:"))) << headers;
    EXPECT_THAT(headers, Not(HasSubstr("<script>")));
    // Every header line is a header or a folded continuation.
    for (absl::string_view line : absl::StrSplit(headers, "\r\n")) {
      EXPECT_TRUE(line.empty() || line[0] == ' ' || line.find(": ") != absl::string_view::npos)
          << line;
    }
    size_t html = mime.find("Content-Type: text/html");
    ASSERT_NE(html, std::string::npos);
  }
}

TEST_F(EndToEndTest, SmtpTemporaryFailureIsRetriedThenDelivered) {
  int smtp_port;
  auto smtp = StartSmtpPeer({"--fail-first", "2", "--fail-code", "451"}, &smtp_port);
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "smtp"},
                             {"MAILROOM_SMTP_URL", absl::StrCat("smtp://127.0.0.1:", smtp_port)},
                             {"MAILROOM_SMTP_ALLOW_PLAIN", "true"}});
  Exec("INSERT INTO accounts (email, login) VALUES ('retry@example.test', 'retry')");
  ASSERT_EQ(
      WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 1, absl::Seconds(30)), 1)
      << sender->Log();
  EXPECT_EQ(Scalar("SELECT failures FROM delivery_states"), 2);
  EXPECT_EQ(Files(dir_ + "/smtp", ".eml").size(), 1u);
}

TEST_F(EndToEndTest, PermanentRejectionFailsOneAddressOnly) {
  int smtp_port;
  auto smtp = StartSmtpPeer({"--reject-rcpt", "bounce"}, &smtp_port);
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "smtp"},
                             {"MAILROOM_SMTP_URL", absl::StrCat("smtp://127.0.0.1:", smtp_port)},
                             {"MAILROOM_SMTP_ALLOW_PLAIN", "true"},
                             {"MAILROOM_CONNECTIONS", "2"}});
  Exec("INSERT INTO accounts (email, login) SELECT 'u' || i || '@example.test', 'u' || i "
       "FROM generate_series(1, 20) i");
  Exec("INSERT INTO accounts (email, login) VALUES ('bounce@example.test', 'bounce')");
  ASSERT_EQ(WaitFor("SELECT count(*) FROM delivery_states WHERE state IN ('sent', 'failed')", 21,
                    absl::Seconds(30)),
            21)
      << sender->Log();
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'sent'"), 20);
  EXPECT_EQ(
      Scalar("SELECT count(*) FROM delivery_states WHERE state = 'failed' AND reason LIKE '%550%'"),
      1);
  // The 550 5.1.1 put the address on the suppression list (in the acknowledgement's
  // transaction)...
  EXPECT_EQ(Scalar("SELECT count(*) FROM suppressions WHERE address = 'bounce@example.test'"
                   " AND reason = 'smtp_rejected' AND source LIKE '%550 5.1.1%'"),
            1);
  // ...so a new token for it is never handed out: it ends suppressed, with no attempt, while a
  // token for another address behind it is delivered.
  const size_t before = Files(dir_ + "/smtp", ".eml").size();
  Exec("UPDATE accounts SET status = 'active' WHERE email IN ('bounce@example.test', "
       "'u1@example.test')");
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts"
       " WHERE email = 'bounce@example.test'");
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts"
       " WHERE email = 'u1@example.test'");
  ASSERT_EQ(WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 21,
                    absl::Seconds(30)),
            21)
      << sender->Log();
  EXPECT_EQ(Scalar(
                "SELECT count(*) FROM delivery_states WHERE state = 'suppressed' AND attempts = 0"
                " AND reason LIKE 'address suppressed: smtp_rejected (%550 5.1.1%'"),
            1);
  EXPECT_EQ(Files(dir_ + "/smtp", ".eml").size(), before + 1);
  EXPECT_EQ(Scalar("SELECT suppressed FROM mailroom_stats('mailroom')"), 1);
  // The sender tried the address once only: one RCPT rejection in its log.
  const std::string log = sender->Log();
  size_t rejections = 0;
  for (size_t at = log.find("send failed permanently"); at != std::string::npos;
       at = log.find("send failed permanently", at + 1)) {
    ++rejections;
  }
  EXPECT_EQ(rejections, 1u) << log;
}

TEST_F(EndToEndTest, AManualSuppressionStopsDeliveryAndRemovingItLetsNewTokensThrough) {
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "file"}, {"MAILROOM_FILE_DIR", dir_ + "/out"}});
  Exec("INSERT INTO suppressions (address, reason, source) VALUES ('quiet@example.test', 'manual', "
       "'operator')");
  Exec("INSERT INTO accounts (email, login) VALUES ('Quiet@Example.test', 'quiet'),"
       " ('loud@example.test', 'loud')");
  ASSERT_EQ(WaitFor("SELECT count(*) FROM delivery_states WHERE state IN ('sent', 'suppressed')", 2,
                    absl::Seconds(30)),
            2)
      << sender->Log();
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'suppressed'"
                   " AND reason = 'address suppressed: manual (operator)'"),
            1);
  EXPECT_EQ(Files(dir_ + "/out", ".eml").size(), 1u);
  // Removed: the next token for the address is delivered.
  Exec("DELETE FROM suppressions WHERE address = 'quiet@example.test'");
  Exec("UPDATE accounts SET status = 'active' WHERE login = 'quiet'");
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts"
       " WHERE login = 'quiet'");
  ASSERT_EQ(
      WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 2, absl::Seconds(30)), 2)
      << sender->Log();
  EXPECT_EQ(Files(dir_ + "/out", ".eml").size(), 2u);
}

TEST_F(EndToEndTest, BudgetPacesSendingAndKeepsTheRestQueued) {
  // The group's budget (kept by the collector): $0.001 a month at $0.10 per 1,000 emails, no
  // recovery reserve: 10 emails this month, and the spend is recorded.
  Exec("INSERT INTO group_budgets (group_id, monthly_budget_micros, recovery_reserve_percent, "
       "burst) SELECT id, 1000, 0, 10 FROM consumer_groups WHERE name = 'mailroom'");
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "file"}, {"MAILROOM_FILE_DIR", dir_ + "/out"}});
  Exec("INSERT INTO accounts (email, login) SELECT 'b' || i || '@example.test', 'b' || i "
       "FROM generate_series(1, 15) i");
  ASSERT_EQ(WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 10,
                    absl::Seconds(30)),
            10)
      << sender->Log();
  absl::SleepFor(absl::Seconds(2));
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'sent'"), 10);
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state IN ('failed', 'expired')"), 0);
  EXPECT_EQ(Scalar("SELECT coalesce(sum(cost_micros), 0) FROM group_usage"), 1000);
  // A restarted sender is refused by the collector and sends nothing more.
  sender->Signal(SIGTERM);
  ASSERT_TRUE(sender->Wait(absl::Seconds(20)).ok());
  // The 5 held-back jobs come due at once, so the new sender holds them and asks. A deferred
  // job is always a row of deliveries (a lease batch keeps only SENT outcomes), so the write
  // goes to the table, not to the delivery_states view.
  Exec("UPDATE deliveries SET due_at = now() WHERE state = 'retry'");
  auto again = StartSender({{"MAILROOM_TRANSPORT", "file"}, {"MAILROOM_FILE_DIR", dir_ + "/out"}},
                           "sender2");
  EXPECT_TRUE(again->WaitForLog("group budget spent for this month", absl::Seconds(20)))
      << again->Log();
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'sent'"), 10);
  EXPECT_THAT(again->Log(), HasSubstr("spent_micros=1000"));
  EXPECT_EQ(Files(dir_ + "/out", ".eml").size(), 10u);
}

TEST_F(EndToEndTest, MailroomBudgetCapsOneSenderOnTopOfTheGroupBudget) {
  // An unlimited group, a sender capped at $0.0005 (5 emails) by MAILROOM_BUDGET.
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "file"},
                             {"MAILROOM_FILE_DIR", dir_ + "/out"},
                             {"MAILROOM_BUDGET", "0.0005"},
                             {"MAILROOM_BURST", "10"}});
  Exec("INSERT INTO accounts (email, login) SELECT 'c' || i || '@example.test', 'c' || i "
       "FROM generate_series(1, 8) i");
  ASSERT_EQ(
      WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 5, absl::Seconds(30)), 5)
      << sender->Log();
  // Its jobs go back to PostgreSQL (DEFER), none is sent beyond the cap.
  EXPECT_GT(WaitFor("SELECT count(*) FROM delivery_states WHERE reason = "
                    "'sending budget exhausted for now'",
                    -1, absl::Seconds(5)),
            0);
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'sent'"), 5);
  EXPECT_EQ(Files(dir_ + "/out", ".eml").size(), 5u);
}

TEST_F(EndToEndTest, SigtermFinishesAndHandsBackWhatTheSenderHolds) {
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "file"}, {"MAILROOM_FILE_DIR", dir_ + "/out"}});
  Exec("INSERT INTO accounts (email, login) SELECT 's' || i || '@example.test', 's' || i "
       "FROM generate_series(1, 50) i");
  absl::SleepFor(absl::Milliseconds(200));
  sender->Signal(SIGTERM);
  auto code = sender->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0);
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'leased'"), 0)
      << sender->Log();
  auto next = StartSender({{"MAILROOM_TRANSPORT", "file"}, {"MAILROOM_FILE_DIR", dir_ + "/out"}},
                          "sender2");
  EXPECT_EQ(WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 50,
                    absl::Seconds(30)),
            50);
  EXPECT_EQ(Files(dir_ + "/out", ".eml").size(), 50u);
}

TEST_F(EndToEndTest, AccountYieldsAnEmailInTheSesEmulatorsStoreWithAVerifiableLink) {
  std::string endpoint = StartSes(0);
  if (endpoint.empty()) GTEST_SKIP() << "MAILROOM_NODE_MODULES not set (run .ci/test)";
  auto sender = StartSender(SesEnv(endpoint));
  Exec("INSERT INTO accounts (email, login) VALUES ('carol@example.test', 'carol')");
  ASSERT_EQ(
      WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 1, absl::Seconds(30)), 1)
      << sender->Log();
  std::string store = SesStore();
  EXPECT_THAT(store, HasSubstr("carol@example.test"));
  testing::Received got = ReceivedBySes();
  ASSERT_EQ(got.emails, 1) << store;
  std::string token;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(store, m, std::regex("token=([A-Za-z0-9_-]{86})")));
  std::vector<SigningKey> keys = {*ParseSigningKey(testing::kStackKey)};
  EXPECT_TRUE(VerifyToken(keys, TokenAction::kActivation, m[1].str(), "").ok());
}

// The http transport: a receiver that verifies the Standard Webhooks signature gets the email
// as JSON with a verifiable link; its message id is recorded, its rejection fails one address
// (and suppresses it when it says so), its outage holds the job until it answers again.
TEST_F(EndToEndTest, AccountYieldsASignedWebhookWithAVerifiableLink) {
  const char* secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
  const int port = testing::FreePort();
  auto receiver = Process::Spawn(
      {"/usr/bin/python3",
       testing::Runfile("mailroom/sender/transport/testing/webhook_receiver.py"), "serve", "--port",
       absl::StrCat(port), "--secret", secret},
      {}, dir_ + "/receiver.log");
  ASSERT_TRUE(receiver.ok());
  ASSERT_TRUE((*receiver)->WaitForLog("ready", absl::Seconds(20))) << (*receiver)->Log();
  const std::string control = absl::StrCat("http://127.0.0.1:", port, "/_control/");
  auto script = [&](const std::string& answers) {
    std::ofstream(dir_ + "/script.json") << "{\"answers\": " << answers << "}";
    ASSERT_EQ(std::system(absl::StrCat("curl -sf -o /dev/null --data-binary @", dir_,
                                       "/script.json ", control, "script")
                              .c_str()),
              0);
  };
  auto state = [&] {
    std::system(absl::StrCat("curl -s ", control, "state > ", dir_, "/state.json").c_str());
    return Slurp(dir_ + "/state.json");
  };
  auto sender = StartSender(
      {{"MAILROOM_TRANSPORT", "http"},
       {"MAILROOM_HTTP_URL", absl::StrCat("http://127.0.0.1:", port, "/mail")},
       {"MAILROOM_HTTP_SECRET", secret},
       {"MAILROOM_SEND_TIMEOUT_MS", "1000"}});
  Exec("INSERT INTO accounts (email, login) VALUES ('hook@example.test', 'hook')");
  ASSERT_EQ(
      WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 1, absl::Seconds(30)), 1)
      << sender->Log();
  EXPECT_EQ(Scalar("SELECT count(*) FROM deliveries WHERE provider_message_id = 'rcv-1'"), 1);
  std::string got = state();
  EXPECT_THAT(got, HasSubstr("\"refused\": 0"));
  EXPECT_THAT(got, HasSubstr("\"to\": \"hook@example.test\""));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(got, m, std::regex("token=([A-Za-z0-9_-]{86})"))) << got;
  std::vector<SigningKey> keys = {*ParseSigningKey(testing::kStackKey)};
  EXPECT_TRUE(VerifyToken(keys, TokenAction::kActivation, m[1].str(), "").ok());
  EXPECT_THAT(sender->Log(), Not(HasSubstr(m[1].str())));
  EXPECT_THAT(sender->Log(), Not(HasSubstr(std::string(secret).substr(6))));

  // A rejection that names the address as bad fails it and suppresses it.
  script(R"([{"status": 422, "body": {"reason": "no such mailbox", "suppress": true}}])");
  Exec("INSERT INTO accounts (email, login) VALUES ('gone@example.test', 'gone')");
  ASSERT_EQ(WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'failed'"
                    " AND reason LIKE '%http 422: no such mailbox%'",
                    1, absl::Seconds(30)),
            1)
      << sender->Log();
  EXPECT_EQ(Scalar("SELECT count(*) FROM suppressions WHERE address = 'gone@example.test'"), 1);

  // An outage holds the job, uncounted, until the receiver answers again.
  script(R"([{"status": 503}, {"status": 503}])");
  Exec("INSERT INTO accounts (email, login) VALUES ('later@example.test', 'later')");
  ASSERT_EQ(
      WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 2, absl::Seconds(30)), 2)
      << sender->Log();
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'failed'"), 1);
  EXPECT_EQ(Scalar("SELECT max(failures) FROM delivery_states WHERE state = 'sent'"), 0);
  EXPECT_THAT(sender->Log(), HasSubstr("provider unavailable"));

  // An answer lost after the receiver took the request: charged, retried once with the same
  // webhook-id, which the receiver recognises: one email, sent.
  // (A hang past the send timeout: a connection closed without an answer would be sent again
  // at once by libcurl itself when it was a kept-alive one, with the same webhook-id.)
  script(R"([{"hang_ms": 2500}])");
  Exec("INSERT INTO accounts (email, login) VALUES ('lost@example.test', 'lost')");
  ASSERT_EQ(
      WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 3, absl::Seconds(30)), 3)
      << sender->Log();
  EXPECT_EQ(Scalar("SELECT failures FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
                   " JOIN accounts a ON a.id = t.account WHERE a.email = 'lost@example.test'"),
            1);
  got = state();
  EXPECT_THAT(got, HasSubstr("\"duplicates\": 1"));
  size_t copies = 0;
  for (size_t at = got.find("\"to\": \"lost@example.test\""); at != std::string::npos;
       at = got.find("\"to\": \"lost@example.test\"", at + 1)) {
    ++copies;
  }
  EXPECT_EQ(copies, 1u) << got;
  EXPECT_THAT(sender->Log(), HasSubstr("charged, will retry once"));
}

TEST_F(EndToEndTest, SenderWithDefaultsServesHealthWhileSubscribed) {
  // Only what the demo sets: the default From, file transport, health and metrics on.
  int health_port = testing::FreePort();
  auto sender = StartSender(
      {{"MAILROOM_FROM", ""},
       {"MAILROOM_FILE_DIR", dir_ + "/out"},
       {"MAILROOM_HEALTH_ADDRESS", absl::StrCat("127.0.0.1:", health_port)},
       {"MAILROOM_METRICS_ADDRESS", absl::StrCat("127.0.0.1:", testing::FreePort())}});
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", health_port), grpc::InsecureChannelCredentials()));
  // Health follows the sender's state (watched every 100 ms): wait for SERVING.
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status st;
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::health::v1::HealthCheckRequest req;
    st = stub->Check(&ctx, req, &resp);
    if (st.ok() && resp.status() == grpc::health::v1::HealthCheckResponse::SERVING) break;
    absl::SleepFor(absl::Milliseconds(50));
  } while (absl::Now() < deadline);
  ASSERT_TRUE(st.ok()) << st.error_message() << sender->Log();
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  Exec("INSERT INTO accounts (email, login) VALUES ('dan@example.test', 'dan')");
  ASSERT_EQ(
      WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 1, absl::Seconds(30)), 1)
      << sender->Log();
  EXPECT_THAT(Slurp(Files(dir_ + "/out", ".eml").at(0)),
              HasSubstr("From: mailroom <no-reply@mailroom.localhost>"));
}

// A sender whose token the collector refuses says so and backs off (no busy loop), and a
// SIGTERM while it waits at start-up ends it at once and cleanly.
TEST_F(EndToEndTest, RefusedSenderBacksOffAndStopsCleanlyDuringStartUp) {
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "file"},
                             {"MAILROOM_FILE_DIR", dir_ + "/out"},
                             {"MAILROOM_COLLECTOR_TOKEN", "not-the-right-token-0123456789"}},
                            "refused", 0, /*wait=*/false);
  ASSERT_TRUE(sender->WaitForLog("the collector refuses this sender", absl::Seconds(20)))
      << sender->Log();
  absl::Time start = absl::Now();
  sender->Signal(SIGTERM);
  auto code = sender->Wait(absl::Seconds(10));
  ASSERT_TRUE(code.ok()) << sender->Log();
  EXPECT_EQ(*code, 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  const std::string log = sender->Log();
  size_t refusals = 0;
  for (size_t at = log.find("refuses this sender"); at != std::string::npos;
       at = log.find("refuses this sender", at + 1)) {
    ++refusals;
  }
  EXPECT_EQ(refusals, 1u) << log;  // the next try is 30 s away
  EXPECT_THAT(log, Not(HasSubstr("msg=subscribed")));
  EXPECT_THAT(log, Not(HasSubstr("not-the-right-token")));
}

TEST_F(EndToEndTest, ConfigErrorsNameTheVariable) {
  auto p = Process::Spawn({testing::Runfile("mailroom/sender/sender")},
                          {{"MAILROOM_TRANSPORT", "smtp"}, {"MAILROOM_SMTP_PASSWORD", "s3cret-pw"}},
                          dir_ + "/bad.log");
  ASSERT_TRUE(p.ok());
  auto code = (*p)->Wait(absl::Seconds(10));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 2);
  EXPECT_THAT((*p)->Log(), HasSubstr("MAILROOM_SMTP_URL"));
  EXPECT_THAT((*p)->Log(), Not(HasSubstr("s3cret-pw")));
}

// An action of the application's own goes live with its row and its template files, and no
// restart of anything: the sender fails its first job (no templates yet, with the reason), reads
// the directory again when the files appear, and SIGHUP picks up a template edited in place.
// Needs the database's actions table (mailroom.actions).
TEST_F(EndToEndTest, ACustomActionAddedWithSqlAndTemplateFilesReachesTheSmtpPeerWithoutARestart) {
  if (Scalar("SELECT count(*) FROM pg_class WHERE oid = to_regclass('mailroom.actions')") == 0) {
    GTEST_SKIP() << "the database has no mailroom.actions";
  }
  const std::string templates = dir_ + "/templates";
  fs::create_directories(templates);
  int smtp_port;
  auto smtp = StartSmtpPeer({}, &smtp_port);
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "smtp"},
                             {"MAILROOM_SMTP_URL", absl::StrCat("smtp://127.0.0.1:", smtp_port)},
                             {"MAILROOM_SMTP_ALLOW_PLAIN", "true"},
                             {"MAILROOM_TEMPLATE_DIR", templates}});
  Exec(
      "INSERT INTO accounts (email, login, status) VALUES ('gift@example.test', 'gift', 'active')");
  Exec("INSERT INTO actions (name, carries_secret, carries_code, code_length) "
       "VALUES ('welcome_gift', true, true, 8)");
  auto request = [&] {
    Exec("SELECT mailroom.request(id, 'welcome_gift') FROM accounts WHERE login = 'gift'");
  };
  request();  // before its templates exist: fails at once, with the files to add
  ASSERT_EQ(WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'failed' AND reason "
                    "LIKE 'no templates for action \"welcome_gift\"%welcome_gift.html%'",
                    1, absl::Seconds(30)),
            1)
      << sender->Log();
  auto write = [&](const std::string& subject) {
    std::ofstream(templates + "/welcome_gift.subject") << subject;
    std::ofstream(templates + "/welcome_gift.txt") << "Redeem {{code}} at {{link}}";
    std::ofstream(templates + "/welcome_gift.html") << "<p>Redeem <b>{{code}}</b></p>";
  };
  write("A gift from {{product_name}}");
  request();
  ASSERT_EQ(
      WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 1, absl::Seconds(30)), 1)
      << sender->Log();
  auto emls = Files(dir_ + "/smtp", ".eml");
  ASSERT_EQ(emls.size(), 1u);
  std::string mime = Slurp(emls[0]);
  std::string code = pqxx::nontransaction(*std::make_unique<pqxx::connection>(url_))
                         .exec1(
                             "SELECT code FROM tokens WHERE id = (SELECT max(id) FROM tokens)")[0]
                         .as<std::string>();
  ASSERT_EQ(code.size(), 8u);
  EXPECT_THAT(mime, HasSubstr("Subject: A gift from mailroom"));
  EXPECT_THAT(TextPart(mime), HasSubstr("Redeem " + code +
                                        " at https://app.example.test/action/welcome_gift?token="));
  auto action = ParseTokenAction("welcome_gift");
  ASSERT_TRUE(action.ok());
  ExpectVerifies(mime, *action, code);

  // Edited in place (the directory does not change): SIGHUP reads it.
  write("A second gift from {{product_name}}");
  sender->Signal(SIGHUP);
  ASSERT_TRUE(sender->WaitForLog("msg=\"templates reloaded\"", absl::Seconds(10))) << sender->Log();
  request();
  ASSERT_EQ(
      WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 2, absl::Seconds(30)), 2)
      << sender->Log();
  emls = Files(dir_ + "/smtp", ".eml");
  ASSERT_EQ(emls.size(), 2u);
  EXPECT_THAT(Slurp(emls[0]) + Slurp(emls[1]), HasSubstr("Subject: A second gift from mailroom"));

  // A subject that uses the code is refused on SIGHUP too: the templates in use stay.
  write("A third gift from {{product_name}}: {{ code }}");
  sender->Signal(SIGHUP);
  ASSERT_TRUE(sender->WaitForLog("templates not reloaded", absl::Seconds(10))) << sender->Log();
  EXPECT_THAT(sender->Log(), HasSubstr(templates + "/welcome_gift.subject: a subject may not use "
                                                   "the code"));
  request();
  ASSERT_EQ(
      WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 3, absl::Seconds(30)), 3)
      << sender->Log();
  emls = Files(dir_ + "/smtp", ".eml");
  ASSERT_EQ(emls.size(), 3u);
  int second = 0;
  for (const std::string& eml : emls) {
    const std::string m = Slurp(eml);
    EXPECT_THAT(m, Not(HasSubstr("A third gift")));
    second += absl::StrContains(m, "Subject: A second gift from mailroom") ? 1 : 0;
  }
  EXPECT_EQ(second, 2);
  EXPECT_TRUE(sender->Running());
}

TEST_F(EndToEndTest, RenderPreviewsLocalisedTemplatesWithoutACollector) {
  auto p = Process::Spawn({testing::Runfile("mailroom/sender/sender"), "render",
                           "--action=password_recovery", "--locale=de-AT"},
                          {{"MAILROOM_PRODUCT_NAME", "Acme"},
                           {"MAILROOM_COLLECTOR_ADDRESS", "127.0.0.1:1"}},
                          dir_ + "/render.log");
  ASSERT_TRUE(p.ok());
  auto code = (*p)->Wait(absl::Seconds(10));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0) << (*p)->Log();
  EXPECT_THAT((*p)->Log(), HasSubstr("subject: Setzen Sie Ihr Acme-Passwort zurück\n"));
  EXPECT_THAT((*p)->Log(), HasSubstr("Ihr Code lautet 12345."));
  EXPECT_THAT((*p)->Log(), HasSubstr("UTC)"));
  EXPECT_THAT((*p)->Log(), HasSubstr("<html lang=\"de\">"));

  // A broken template is a config error naming the file, before anything connects.
  std::filesystem::create_directories(dir_ + "/templates");
  std::ofstream(dir_ + "/templates/activation.fr.subject") << "{{#open}} Bienvenue";
  auto bad = Process::Spawn(
      {testing::Runfile("mailroom/sender/sender"), "render", "--action=activation", "--locale=fr"},
      {{"MAILROOM_TEMPLATE_DIR", dir_ + "/templates"}}, dir_ + "/render-bad.log");
  ASSERT_TRUE(bad.ok());
  code = (*bad)->Wait(absl::Seconds(10));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 2);
  EXPECT_THAT((*bad)->Log(), HasSubstr("config error: MAILROOM_TEMPLATE_DIR: "));
  EXPECT_THAT((*bad)->Log(), HasSubstr("activation.fr.subject"));

  // So is a subject that uses the code, for `sender render` and for the service alike.
  const std::string coded = dir_ + "/templates-coded";
  std::filesystem::create_directories(coded);
  std::ofstream(coded + "/login_code.subject") << "Your code: {{{code}}}";
  const std::string refusal = absl::StrCat("config error: MAILROOM_TEMPLATE_DIR: ", coded,
                                           "/login_code.subject: a subject may not use the code");
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"render", "--action=login_code"}, {}}) {
    std::vector<std::string> argv = {testing::Runfile("mailroom/sender/sender")};
    argv.insert(argv.end(), args.begin(), args.end());
    auto refused = Process::Spawn(argv,
                                  {{"MAILROOM_TEMPLATE_DIR", coded},
                                   {"MAILROOM_COLLECTOR_TOKEN", "collector-token-secret-1"},
                                   {"MAILROOM_METRICS_ADDRESS", "off"},
                                   {"MAILROOM_HEALTH_ADDRESS", "off"},
                                   {"MAILROOM_FILE_DIR", dir_ + "/out-coded"}},
                                  dir_ + "/coded-" + absl::StrCat(args.size()) + ".log");
    ASSERT_TRUE(refused.ok());
    code = (*refused)->Wait(absl::Seconds(10));
    ASSERT_TRUE(code.ok()) << (*refused)->Log();
    EXPECT_EQ(*code, 2) << (*refused)->Log();
    EXPECT_THAT((*refused)->Log(), HasSubstr(refusal));
  }

  // Every action by its name: a built-in one, and one of the application's own from the
  // template directory; an action without templates is a config error naming the files.
  const std::string custom = dir_ + "/templates-custom";
  std::filesystem::create_directories(custom);
  std::ofstream(custom + "/welcome_gift.subject") << "A gift from {{product_name}}";
  std::ofstream(custom + "/welcome_gift.txt") << "Redeem {{code}}: {{link}}";
  std::ofstream(custom + "/welcome_gift.html") << "<p>Redeem {{code}}</p>";
  struct Case {
    std::string action, expect;
    int code;
  };
  for (const Case& c : std::vector<Case>{
           {"login_code", "subject: Ihr Acme-Anmeldecode\n", 0},
           {"login_code", "\n    123456\n", 0},  // its 6 digits
           {"welcome_gift",
            "Redeem 123456: https://app.example.test/action/welcome_gift?token=", 0},
           {"team_invite", "config error: no templates for action \"team_invite\"", 2}}) {
    auto r = Process::Spawn({testing::Runfile("mailroom/sender/sender"), "render",
                             "--action=" + c.action, "--locale=de"},
                            {{"MAILROOM_PRODUCT_NAME", "Acme"},
                             {"MAILROOM_LINK_BASE_URL", "https://app.example.test"},
                             {"MAILROOM_TEMPLATE_DIR", custom}},
                            dir_ + "/render-" + c.action + ".log");
    ASSERT_TRUE(r.ok());
    code = (*r)->Wait(absl::Seconds(10));
    ASSERT_TRUE(code.ok());
    EXPECT_EQ(*code, c.code) << (*r)->Log();
    EXPECT_THAT((*r)->Log(), HasSubstr(c.expect));
  }
}

}  // namespace
}  // namespace mailroom
