// Transports against real peers started here: an aiosmtpd SMTP server (STARTTLS, implicit TLS,
// AUTH, injected 4xx/5xx), the SES v2 emulator (npm aws-ses-v2-local) behind a front that
// checks SigV4 and throttles, and the file system.
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration_tests/support/pg_server.h"
#include "integration_tests/support/process.h"
#include "sender/file_transport.h"
#include "sender/ses_transport.h"
#include "sender/smtp_transport.h"

namespace mailroom {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::Process;

constexpr char kPassword[] = "sm7p-pa55word";
constexpr char kAwsSecret[] = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

OutgoingEmail Email(const std::string& to, int n = 0) {
  return OutgoingEmail{"no-reply@example.test", to,
                       absl::StrCat("From: <no-reply@example.test>\r\nTo: <", to,
                                    ">\r\nSubject: test ", n, "\r\n\r\nhello ", n, "\r\n"),
                       absl::StrCat("id", n, "@example.test")};
}

class TransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp", "/",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  // A self-signed certificate for 127.0.0.1.
  void MakeCert() {
    std::string cmd = absl::StrCat(
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
        "-addext subjectAltName=IP:127.0.0.1 -keyout ", dir_, "/key.pem -out ", dir_,
        "/cert.pem >/dev/null 2>&1");
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  int StartSmtp(std::vector<std::string> extra) {
    int port = testing::FreePort();
    std::vector<std::string> argv = {"/usr/bin/python3",
                                     testing::Runfile("mailroom/sender/testing/smtp_peer.py"),
                                     "--port", absl::StrCat(port), "--dir", dir_ + "/smtp"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = Process::Spawn(argv, {}, dir_ + "/smtp.log");
    EXPECT_TRUE(p.ok());
    EXPECT_TRUE((*p)->WaitForLog("ready", absl::Seconds(20))) << (*p)->Log();
    peers_.push_back(*std::move(p));
    return port;
  }
  TransportConfig Smtp(const std::string& url, bool require_tls) {
    TransportConfig c;
    c.kind = "smtp";
    c.smtp_url = url;
    c.smtp_require_tls = require_tls;
    c.connections = 1;
    c.timeout = absl::Seconds(10);
    return c;
  }
  size_t Recorded() {
    size_t n = 0;
    if (!fs::exists(dir_ + "/smtp")) return 0;
    for (const auto& e : fs::directory_iterator(dir_ + "/smtp")) n += e.path().extension() == ".eml";
    return n;
  }
  std::string NodeModules() {
    const char* m = std::getenv("MAILROOM_NODE_MODULES");
    return m == nullptr ? "" : m;
  }
  // Starts the SES emulator (and, unless `direct`, the checking front); returns the endpoint.
  std::string StartSes(int throttle_first, bool direct = false) {
    int emu = testing::FreePort();
    auto e = Process::Spawn({"node", NodeModules() + "/aws-ses-v2-local/dist/cli.js", "--host",
                             "127.0.0.1", "--port", absl::StrCat(emu)},
                            {}, dir_ + "/ses.log");
    EXPECT_TRUE(e.ok());
    EXPECT_TRUE((*e)->WaitForLog("server running", absl::Seconds(30))) << (*e)->Log();
    peers_.push_back(*std::move(e));
    emulator_ = absl::StrCat("http://127.0.0.1:", emu);
    if (direct) return emulator_;
    int front = testing::FreePort();
    auto f = Process::Spawn(
        {"/usr/bin/python3", testing::Runfile("mailroom/sender/testing/ses_front.py"), "--port",
         absl::StrCat(front), "--upstream", emulator_, "--access-key", "AKIDEXAMPLE",
         "--secret-key", kAwsSecret, "--throttle-first", absl::StrCat(throttle_first)},
        {}, dir_ + "/front.log");
    EXPECT_TRUE(f.ok());
    EXPECT_TRUE((*f)->WaitForLog("ready", absl::Seconds(20))) << (*f)->Log();
    peers_.push_back(*std::move(f));
    return absl::StrCat("http://127.0.0.1:", front);
  }
  TransportConfig Ses(const std::string& endpoint, const std::string& secret = kAwsSecret) {
    TransportConfig c;
    c.kind = "ses";
    c.ses_endpoint = endpoint;
    c.ses_region = "us-east-1";
    c.aws_access_key_id = "AKIDEXAMPLE";
    c.aws_secret_access_key = secret;
    c.connections = 2;
    return c;
  }
  std::string SesStore() {
    std::string out = dir_ + "/store.json";
    std::system(absl::StrCat("curl -s ", emulator_, "/store > ", out).c_str());
    return Slurp(out);
  }

  std::string dir_, emulator_;
  std::vector<std::unique_ptr<Process>> peers_;
};

TEST_F(TransportTest, FileTransportWritesWholeMessages) {
  FileTransport t(dir_ + "/out", 1);
  fs::create_directories(dir_ + "/out");
  auto r = t.Send(Email("a@example.test", 1));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Slurp(r->provider_id), Email("a@example.test", 1).mime);
  EXPECT_TRUE(absl::EndsWith(r->provider_id, "id1example.test.eml"));
  for (const auto& e : fs::directory_iterator(dir_ + "/out")) {
    EXPECT_EQ(e.path().extension(), ".eml");  // no temporary files left
  }
}

TEST_F(TransportTest, SmtpPlainWhenExplicitlyAllowed) {
  int port = StartSmtp({});
  SmtpTransport t(Smtp(absl::StrCat("smtp://127.0.0.1:", port), /*require_tls=*/false));
  auto r = t.Send(Email("a@example.test"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Recorded(), 1u);
  EXPECT_THAT(Slurp(dir_ + "/smtp/000001.json"), HasSubstr("\"tls\": false"));
}

TEST_F(TransportTest, SmtpStartTlsWithAuth) {
  MakeCert();
  int port = StartSmtp({"--tls-cert", dir_ + "/cert.pem", "--tls-key", dir_ + "/key.pem",
                        "--require-tls", "--auth", absl::StrCat("mailer:", kPassword)});
  TransportConfig c = Smtp(absl::StrCat("smtp://127.0.0.1:", port), true);
  c.smtp_ca_file = dir_ + "/cert.pem";
  c.smtp_username = "mailer";
  c.smtp_password = kPassword;
  SmtpTransport t(c);
  auto r = t.Send(Email("a@example.test"));
  ASSERT_TRUE(r.ok()) << r.status();
  std::string env = Slurp(dir_ + "/smtp/000001.json");
  EXPECT_THAT(env, HasSubstr("\"tls\": true"));
  EXPECT_THAT(env, HasSubstr("\"auth\": true"));
}

TEST_F(TransportTest, SmtpRefusesToSendWhenStartTlsIsNotOffered) {
  int port = StartSmtp({});
  SmtpTransport t(Smtp(absl::StrCat("smtp://127.0.0.1:", port), /*require_tls=*/true));
  auto r = t.Send(Email("a@example.test"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_EQ(Recorded(), 0u);
}

TEST_F(TransportTest, SmtpsImplicitTls) {
  MakeCert();
  int port = StartSmtp({"--tls-cert", dir_ + "/cert.pem", "--tls-key", dir_ + "/key.pem",
                        "--implicit-tls"});
  TransportConfig c = Smtp(absl::StrCat("smtps://127.0.0.1:", port), true);
  c.smtp_ca_file = dir_ + "/cert.pem";
  SmtpTransport t(c);
  auto r = t.Send(Email("a@example.test"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Recorded(), 1u);
}

TEST_F(TransportTest, SmtpWrongPasswordIsPermanentAndNotEchoed) {
  MakeCert();
  int port = StartSmtp({"--tls-cert", dir_ + "/cert.pem", "--tls-key", dir_ + "/key.pem",
                        "--require-tls", "--auth", "mailer:right-password"});
  TransportConfig c = Smtp(absl::StrCat("smtp://127.0.0.1:", port), true);
  c.smtp_ca_file = dir_ + "/cert.pem";
  c.smtp_username = "mailer";
  c.smtp_password = kPassword;
  SmtpTransport t(c);
  auto r = t.Send(Email("a@example.test"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied) << r.status();
  EXPECT_THAT(std::string(r.status().message()), Not(HasSubstr(kPassword)));
}

TEST_F(TransportTest, SmtpTemporaryFailureIsRetryableThenSucceeds) {
  int port = StartSmtp({"--fail-first", "1", "--fail-code", "451"});
  SmtpTransport t(Smtp(absl::StrCat("smtp://127.0.0.1:", port), false));
  auto first = t.Send(Email("a@example.test"));
  EXPECT_EQ(first.status().code(), absl::StatusCode::kUnavailable) << first.status();
  EXPECT_THAT(std::string(first.status().message()), HasSubstr("451"));
  EXPECT_TRUE(t.Send(Email("a@example.test")).ok());
}

TEST_F(TransportTest, SmtpPermanentRejectionsCarryTheReplyCode) {
  int port = StartSmtp({"--reject-rcpt", "bounce", "--reject-data-first", "1"});
  SmtpTransport t(Smtp(absl::StrCat("smtp://127.0.0.1:", port), false));
  auto data = t.Send(Email("a@example.test"));  // 554 at the end of DATA: curl's error 8
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument) << data.status();
  EXPECT_THAT(std::string(data.status().message()), HasSubstr("554"));
  auto rcpt = t.Send(Email("bounce@example.test"));
  EXPECT_EQ(rcpt.status().code(), absl::StatusCode::kInvalidArgument) << rcpt.status();
  EXPECT_THAT(std::string(rcpt.status().message()), HasSubstr("550"));
  EXPECT_TRUE(t.Send(Email("b@example.test")).ok());  // the connection still works
}

TEST_F(TransportTest, SmtpConnectionRefusedIsRetryable) {
  SmtpTransport t(Smtp(absl::StrCat("smtp://127.0.0.1:", testing::FreePort()), false));
  EXPECT_EQ(t.Send(Email("a@example.test")).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(TransportTest, SmtpParallelConnectionsAreReused) {
  int port = StartSmtp({});
  TransportConfig c = Smtp(absl::StrCat("smtp://127.0.0.1:", port), false);
  c.connections = 4;
  SmtpTransport t(c);
  std::vector<std::future<bool>> sends;
  for (int w = 0; w < 4; ++w) {
    sends.push_back(std::async(std::launch::async, [&, w] {
      bool ok = true;
      for (int i = 0; i < 25; ++i) ok &= t.Send(Email("p@example.test", w * 100 + i)).ok();
      return ok;
    }));
  }
  for (auto& s : sends) EXPECT_TRUE(s.get());
  EXPECT_EQ(Recorded(), 100u);
  int connections = std::stoi(Slurp(dir_ + "/smtp/connections"));
  EXPECT_LE(connections, 8) << "connections were not kept open between messages";
}

TEST_F(TransportTest, SesEmulatorStoresTheRawMessage) {
  if (NodeModules().empty()) GTEST_SKIP() << "MAILROOM_NODE_MODULES not set (run .ci/test)";
  SesTransport t(Ses(StartSes(0, /*direct=*/true)));
  auto r = t.Send(Email("ses@example.test", 7));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->provider_id.empty());
  std::string store = SesStore();
  EXPECT_THAT(store, HasSubstr("ses@example.test"));
  EXPECT_THAT(store, HasSubstr("test 7"));
}

TEST_F(TransportTest, SesSignatureIsVerifiedByTheFront) {
  if (NodeModules().empty()) GTEST_SKIP() << "MAILROOM_NODE_MODULES not set (run .ci/test)";
  std::string endpoint = StartSes(0);
  SesTransport good(Ses(endpoint));
  auto ok = good.Send(Email("signed@example.test"));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(SesStore(), HasSubstr("signed@example.test"));
  SesTransport bad(Ses(endpoint, "not-the-secret-key-at-all"));
  auto denied = bad.Send(Email("forged@example.test"));
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied) << denied.status();
  EXPECT_THAT(std::string(denied.status().message()), Not(HasSubstr("not-the-secret")));
  EXPECT_THAT(SesStore(), Not(HasSubstr("forged@example.test")));
}

TEST_F(TransportTest, SesThrottlingIsRetryable) {
  if (NodeModules().empty()) GTEST_SKIP() << "MAILROOM_NODE_MODULES not set (run .ci/test)";
  SesTransport t(Ses(StartSes(2)));
  for (int i = 0; i < 2; ++i) {
    auto r = t.Send(Email("slow@example.test"));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("TooManyRequestsException"));
  }
  EXPECT_TRUE(t.Send(Email("slow@example.test")).ok());
}

TEST(SesResponseTest, RejectionsArePermanentThrottlingIsNot) {
  EXPECT_TRUE(SesTransport::ResponseStatus(200, "", "{}").ok());
  EXPECT_EQ(SesTransport::ResponseStatus(400, "MessageRejected", "{\"message\":\"Email address is not verified.\"}").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SesTransport::ResponseStatus(400, "", "{\"__type\":\"com.amazon#BadRequestException\"}").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SesTransport::ResponseStatus(400, "LimitExceededException", "").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(SesTransport::ResponseStatus(503, "", "").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(SesTransport::ResponseStatus(400, "SendingPausedException", "").code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace mailroom
