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
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collector/migrate.h"
#include "collector/signing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration_tests/support/pg_server.h"
#include "integration_tests/support/process.h"

namespace mailroom {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::Process;

constexpr char kKey[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
constexpr char kBearer[] = "e2e-subscriber-token-0123456789";

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The decoded text/plain part of a message built by the sender.
std::string TextPart(const std::string& mime) {
  size_t start = mime.find("Content-Type: text/plain");
  if (start == std::string::npos) return "";
  start = mime.find("\r\n\r\n", start);
  size_t end = mime.find("--=_mailroom_", start);
  std::string b64 = mime.substr(start + 4, end - start - 4);
  b64.erase(std::remove(b64.begin(), b64.end(), '\r'), b64.end());
  b64.erase(std::remove(b64.begin(), b64.end(), '\n'), b64.end());
  std::string text;
  absl::Base64Unescape(b64, &text);
  return text;
}

std::string TokenFromLink(const std::string& text) {
  std::smatch m;
  std::regex re("\\?token=([A-Za-z0-9_-]{86})");
  return std::regex_search(text, m, re) ? m[1].str() : "";
}

class EndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pg = testing::PgServer::Start();
    ASSERT_TRUE(pg.ok()) << pg.status();
    pg_ = *std::move(pg);
    url_ = pg_->Url();
    ASSERT_TRUE(MigrateUp(url_, EmbeddedMigrations()).ok());
    dir_ = absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp",
                        "/e2e-", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    collector_port_ = testing::FreePort();
    auto c = Process::Spawn({testing::Runfile("mailroom/collector/collector")},
                            {{"MAILROOM_DATABASE_URL", url_},
                             {"MAILROOM_SECRET_KEY", kKey},
                             {"MAILROOM_LISTEN_ADDRESS", absl::StrCat("127.0.0.1:", collector_port_)},
                             {"MAILROOM_METRICS_ADDRESS", "127.0.0.1:0"},
                             {"MAILROOM_SUBSCRIBER_TOKENS", kBearer},
                             {"MAILROOM_BATCH_TIMEOUT", "0"},
                             {"MAILROOM_POLL_INTERVAL", "300"},
                             {"MAILROOM_LEASE_MS", "3000"}},
                            dir_ + "/collector.log");
    ASSERT_TRUE(c.ok());
    collector_ = *std::move(c);
    ASSERT_TRUE(collector_->WaitForLog("msg=connected", absl::Seconds(20))) << collector_->Log();
  }

  std::unique_ptr<Process> StartSender(std::map<std::string, std::string> extra,
                                       const std::string& name = "sender") {
    std::map<std::string, std::string> env = {
        {"MAILROOM_COLLECTOR_ADDRESS", absl::StrCat("127.0.0.1:", collector_port_)},
        {"MAILROOM_COLLECTOR_TOKEN", kBearer},
        {"MAILROOM_FROM", "Example <no-reply@example.test>"},
        {"MAILROOM_LINK_BASE_URL", "https://app.example.test/"},
        {"MAILROOM_METRICS_ADDRESS", "127.0.0.1:0"},
        {"MAILROOM_HEALTH_ADDRESS", "off"},
        {"MAILROOM_EXPIRY_MARGIN_MS", "1000"},
        {"MAILROOM_RETRY_BASE_MS", "100"},
        {"MAILROOM_RETRY_MAX_MS", "400"},
    };
    for (auto& [k, v] : extra) env[k] = v;
    auto p = Process::Spawn({testing::Runfile("mailroom/sender/sender")}, env,
                            absl::StrCat(dir_, "/", name, ".log"));
    EXPECT_TRUE(p.ok());
    EXPECT_TRUE((*p)->WaitForLog("msg=subscribed", absl::Seconds(20))) << (*p)->Log();
    return *std::move(p);
  }

  std::unique_ptr<Process> StartSmtpPeer(const std::vector<std::string>& extra, int* port) {
    *port = testing::FreePort();
    std::vector<std::string> argv = {"/usr/bin/python3",
                                     testing::Runfile("mailroom/sender/testing/smtp_peer.py"),
                                     "--port", absl::StrCat(*port), "--dir", dir_ + "/smtp"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = Process::Spawn(argv, {}, dir_ + "/smtp.log");
    EXPECT_TRUE(p.ok());
    EXPECT_TRUE((*p)->WaitForLog("ready", absl::Seconds(20))) << (*p)->Log();
    return *std::move(p);
  }

  void Exec(const std::string& sql) {
    pqxx::connection c(url_);
    pqxx::work tx(c);
    tx.exec(sql);
    tx.commit();
  }
  int64_t Scalar(const std::string& sql) {
    pqxx::connection c(url_);
    pqxx::nontransaction tx(c);
    return tx.exec1(sql)[0].as<int64_t>();
  }
  // Waits until `sql` returns `want` (or the timeout), returning the last value.
  int64_t WaitFor(const std::string& sql, int64_t want, absl::Duration timeout) {
    absl::Time deadline = absl::Now() + timeout;
    int64_t v = Scalar(sql);
    while (v != want && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(100));
      v = Scalar(sql);
    }
    return v;
  }
  std::vector<std::string> Files(const std::string& dir, const std::string& ext) {
    std::vector<std::string> out;
    if (!fs::exists(dir)) return out;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ext) out.push_back(e.path().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  void ExpectVerifies(const std::string& mime, TokenAction action, const std::string& code) {
    std::string token = TokenFromLink(TextPart(mime));
    ASSERT_EQ(token.size(), 86u) << TextPart(mime);
    std::vector<SigningKey> keys = {*ParseSigningKey(kKey)};
    EXPECT_TRUE(VerifyToken(keys, action, token, code).ok());
  }

  std::unique_ptr<testing::PgServer> pg_;
  std::string url_, dir_;
  int collector_port_ = 0;
  std::unique_ptr<Process> collector_;
};

TEST_F(EndToEndTest, AccountYieldsAnEmailInTheSmtpCaptureWithAVerifiableLink) {
  int smtp_port;
  auto smtp = StartSmtpPeer({}, &smtp_port);
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "smtp"},
                             {"MAILROOM_SMTP_URL", absl::StrCat("smtp://127.0.0.1:", smtp_port)},
                             {"MAILROOM_SMTP_ALLOW_PLAIN", "true"}});
  Exec("INSERT INTO accounts (email, login) VALUES ('alice@example.test', 'alice')");
  ASSERT_EQ(WaitFor("SELECT count(*) FROM deliveries WHERE state = 'sent'", 1, absl::Seconds(30)), 1)
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

TEST_F(EndToEndTest, PasswordRecoveryEmailCarriesTheSignedCode) {
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "file"}, {"MAILROOM_FILE_DIR", dir_ + "/out"}});
  Exec("INSERT INTO accounts (email, login, status) VALUES ('bob@example.test', 'bob', 'active')");
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts");
  ASSERT_EQ(WaitFor("SELECT count(*) FROM deliveries WHERE state = 'sent'", 1, absl::Seconds(30)), 1)
      << sender->Log();
  std::string code = pqxx::nontransaction(*std::make_unique<pqxx::connection>(url_))
                         .exec1("SELECT code FROM tokens")[0].as<std::string>();
  auto emls = Files(dir_ + "/out", ".eml");
  ASSERT_EQ(emls.size(), 1u);
  std::string mime = Slurp(emls[0]);
  EXPECT_THAT(TextPart(mime), HasSubstr("Your code is " + code));
  EXPECT_THAT(TextPart(mime), HasSubstr("https://app.example.test/recover?token="));
  ExpectVerifies(mime, TokenAction::kPasswordRecovery, code);
}

TEST_F(EndToEndTest, HostileLoginsAndAddressesNeitherInjectNorBlockOthers) {
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "file"}, {"MAILROOM_FILE_DIR", dir_ + "/out"}});
  Exec("INSERT INTO accounts (email, login) VALUES "
       "('ok1@example.test', 'plain'),"
       "('quote@example.test', 'Mallory \"<script>alert(1)</script>\", x@evil.test'),"
       "('crlf@example.test', E'evil\\r\\nBcc: victim@evil.test'),"
       "('unicode@example.test', 'J\u00fcrgen \u5c71\u7530'),"
       "(E'bad\\r\\nBcc: victim@evil.test@example.test', 'badaddr'),"
       "('not-an-address', 'noat'),"
       "('" + std::string(64, 'a') + "@" + std::string(63, 'b') + "." + std::string(63, 'c') + "." +
       std::string(56, 'd') + ".test', 'long254'),"
       "('ok2@example.test', 'plain2')");
  ASSERT_EQ(WaitFor("SELECT count(*) FROM deliveries WHERE state IN ('sent', 'failed')", 8,
                    absl::Seconds(30)),
            8)
      << sender->Log();
  EXPECT_EQ(Scalar("SELECT count(*) FROM deliveries WHERE state = 'sent'"), 6);
  EXPECT_EQ(Scalar("SELECT count(*) FROM deliveries d JOIN tokens t ON t.id = d.token_id "
                   "JOIN accounts a ON a.id = t.account WHERE d.state = 'failed' "
                   "AND d.reason LIKE 'invalid email address%' AND a.login IN ('badaddr', 'noat')"),
            2);
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
  ASSERT_EQ(WaitFor("SELECT count(*) FROM deliveries WHERE state = 'sent'", 1, absl::Seconds(30)), 1)
      << sender->Log();
  EXPECT_EQ(Scalar("SELECT failures FROM deliveries"), 2);
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
  ASSERT_EQ(WaitFor("SELECT count(*) FROM deliveries WHERE state IN ('sent', 'failed')", 21,
                    absl::Seconds(30)),
            21)
      << sender->Log();
  EXPECT_EQ(Scalar("SELECT count(*) FROM deliveries WHERE state = 'sent'"), 20);
  EXPECT_EQ(Scalar("SELECT count(*) FROM deliveries WHERE state = 'failed' AND reason LIKE '%550%'"), 1);
}

TEST_F(EndToEndTest, BudgetPacesSendingAndKeepsTheRestQueued) {
  // $0.001 a month at $0.10 per 1,000 emails: 10 emails this month, and the spend is recorded.
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "file"}, {"MAILROOM_FILE_DIR", dir_ + "/out"},
                             {"MAILROOM_BUDGET", "0.001"}, {"MAILROOM_BURST", "10"}});
  Exec("INSERT INTO accounts (email, login) SELECT 'b' || i || '@example.test', 'b' || i "
       "FROM generate_series(1, 15) i");
  ASSERT_EQ(WaitFor("SELECT count(*) FROM deliveries WHERE state = 'sent'", 10, absl::Seconds(30)), 10)
      << sender->Log();
  absl::SleepFor(absl::Seconds(2));
  EXPECT_EQ(Scalar("SELECT count(*) FROM deliveries WHERE state = 'sent'"), 10);
  EXPECT_EQ(Scalar("SELECT count(*) FROM deliveries WHERE state IN ('failed', 'expired')"), 0);
  EXPECT_EQ(Scalar("SELECT coalesce(sum(cost_micros), 0) FROM group_usage"), 1000);
  // A restarted sender knows the month is spent and sends nothing more.
  sender->Signal(SIGTERM);
  ASSERT_TRUE(sender->Wait(absl::Seconds(20)).ok());
  auto again = StartSender({{"MAILROOM_TRANSPORT", "file"}, {"MAILROOM_FILE_DIR", dir_ + "/out"},
                            {"MAILROOM_BUDGET", "0.001"}}, "sender2");
  absl::SleepFor(absl::Seconds(2));
  EXPECT_EQ(Scalar("SELECT count(*) FROM deliveries WHERE state = 'sent'"), 10);
  EXPECT_THAT(again->Log(), HasSubstr("spent_micros=1000"));
  EXPECT_EQ(Files(dir_ + "/out", ".eml").size(), 10u);
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
  EXPECT_EQ(Scalar("SELECT count(*) FROM deliveries WHERE state = 'leased'"), 0) << sender->Log();
  auto next = StartSender({{"MAILROOM_TRANSPORT", "file"}, {"MAILROOM_FILE_DIR", dir_ + "/out"}},
                          "sender2");
  EXPECT_EQ(WaitFor("SELECT count(*) FROM deliveries WHERE state = 'sent'", 50, absl::Seconds(30)), 50);
  EXPECT_EQ(Files(dir_ + "/out", ".eml").size(), 50u);
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

}  // namespace
}  // namespace mailroom
