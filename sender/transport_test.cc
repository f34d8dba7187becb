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
  EXPECT_TRUE(IsProviderError(r.status())) << r.status();
  EXPECT_EQ(Recorded(), 0u);
}

TEST_F(TransportTest, SmtpUntrustedCertificateIsAProviderError) {
  MakeCert();
  int port = StartSmtp({"--tls-cert", dir_ + "/cert.pem", "--tls-key", dir_ + "/key.pem",
                        "--require-tls"});
  SmtpTransport t(Smtp(absl::StrCat("smtp://127.0.0.1:", port), true));  // no CA file
  auto r = t.Send(Email("a@example.test"));
  EXPECT_TRUE(IsProviderError(r.status())) << r.status();
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

TEST_F(TransportTest, SmtpWrongPasswordIsAProviderErrorAndNotEchoed) {
  MakeCert();
  int port = StartSmtp({"--tls-cert", dir_ + "/cert.pem", "--tls-key", dir_ + "/key.pem",
                        "--require-tls", "--auth", "mailer:right-password"});
  TransportConfig c = Smtp(absl::StrCat("smtp://127.0.0.1:", port), true);
  c.smtp_ca_file = dir_ + "/cert.pem";
  c.smtp_username = "mailer";
  c.smtp_password = kPassword;
  SmtpTransport t(c);
  auto r = t.Send(Email("a@example.test"));
  EXPECT_TRUE(IsProviderError(r.status())) << r.status();
  // The server's own reply, never the credentials.
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("smtp AUTH: 535 5.7.8"));
  EXPECT_THAT(std::string(r.status().message()), Not(HasSubstr(kPassword)));
}

TEST_F(TransportTest, SmtpTemporaryFailureIsRetryableThenSucceeds) {
  int port = StartSmtp({"--fail-first", "1", "--fail-code", "451"});
  SmtpTransport t(Smtp(absl::StrCat("smtp://127.0.0.1:", port), false));
  auto first = t.Send(Email("a@example.test"));
  EXPECT_EQ(first.status().code(), absl::StatusCode::kUnavailable) << first.status();
  EXPECT_FALSE(IsProviderError(first.status())) << first.status();
  EXPECT_THAT(std::string(first.status().message()),
              HasSubstr("smtp RCPT: 451 4.3.0 temporary failure (injected)"));
  EXPECT_TRUE(t.Send(Email("a@example.test")).ok());
}

TEST_F(TransportTest, SmtpPermanentRejectionsCarryTheReplyCode) {
  int port = StartSmtp({"--reject-rcpt", "bounce", "--reject-data-first", "1"});
  SmtpTransport t(Smtp(absl::StrCat("smtp://127.0.0.1:", port), false));
  auto data = t.Send(Email("a@example.test"));  // 554 at the end of DATA: curl's error 8
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument) << data.status();
  EXPECT_THAT(std::string(data.status().message()),
              HasSubstr("smtp DATA: 554 5.6.0 message rejected (injected)"));
  auto rcpt = t.Send(Email("bounce@example.test"));
  EXPECT_EQ(rcpt.status().code(), absl::StatusCode::kInvalidArgument) << rcpt.status();
  // The server's own reply line, not only its code.
  EXPECT_THAT(std::string(rcpt.status().message()),
              HasSubstr("smtp RCPT: 550 5.1.1 <bounce@example.test>: mailbox unavailable"));
  auto ok = t.Send(Email("b@example.test"));  // the connection still works
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(ok->provider_id, HasSubstr("250 2.0.0 queued as"));
}

TEST_F(TransportTest, SmtpConnectionRefusedIsAProviderError) {
  SmtpTransport t(Smtp(absl::StrCat("smtp://127.0.0.1:", testing::FreePort()), false));
  auto r = t.Send(Email("a@example.test"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(IsProviderError(r.status())) << r.status();
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
  EXPECT_TRUE(IsProviderError(denied.status())) << denied.status();
  EXPECT_THAT(std::string(denied.status().message()), HasSubstr("403 SignatureDoesNotMatch"));
  EXPECT_THAT(std::string(denied.status().message()), Not(HasSubstr("not-the-secret")));
  EXPECT_THAT(SesStore(), Not(HasSubstr("forged@example.test")));
}

TEST_F(TransportTest, SesThrottlingIsRetryable) {
  if (NodeModules().empty()) GTEST_SKIP() << "MAILROOM_NODE_MODULES not set (run .ci/test)";
  SesTransport t(Ses(StartSes(2)));
  for (int i = 0; i < 2; ++i) {
    auto r = t.Send(Email("slow@example.test"));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
    EXPECT_FALSE(IsProviderError(r.status())) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("TooManyRequestsException"));
  }
  EXPECT_TRUE(t.Send(Email("slow@example.test")).ok());
}

TEST(SesResponseTest, RecipientRejectionsFailThrottlingWaitsProviderProblemsHold) {
  EXPECT_TRUE(SesTransport::ResponseStatus(200, "", "{}").ok());
  auto rejected = SesTransport::ResponseStatus(
      400, "MessageRejected", "{\"message\":\"Email address is not verified.\"}");
  EXPECT_EQ(rejected.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rejected.message(), "ses 400 MessageRejected: Email address is not verified.");
  EXPECT_EQ(SesTransport::ResponseStatus(400, "", "{\"__type\":\"com.amazon#BadRequestException\"}").code(),
            absl::StatusCode::kInvalidArgument);
  for (auto throttled : {SesTransport::ResponseStatus(400, "LimitExceededException", ""),
                         SesTransport::ResponseStatus(429, "TooManyRequestsException", "")}) {
    EXPECT_EQ(throttled.code(), absl::StatusCode::kUnavailable);
    EXPECT_FALSE(IsProviderError(throttled)) << throttled;
  }
  struct Case {
    long http;
    const char* type;
  };
  for (Case c : {Case{503, ""}, Case{500, "InternalFailure"}, Case{403, ""},
                 Case{403, "SignatureDoesNotMatch"}, Case{403, "InvalidSignatureException"},
                 Case{403, "RequestTimeTooSkewed"}, Case{400, "RequestExpired"},
                 Case{403, "InvalidClientTokenId"}, Case{403, "AccessDeniedException"},
                 Case{400, "SendingPausedException"}, Case{400, "AccountSuspendedException"},
                 Case{400, "MailFromDomainNotVerifiedException"},
                 Case{404, "NotFoundException"}, Case{401, ""}}) {
    auto st = SesTransport::ResponseStatus(c.http, c.type, "{\"message\":\"why\"}");
    EXPECT_TRUE(IsProviderError(st)) << c.http << " " << c.type << ": " << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.type));
    EXPECT_THAT(std::string(st.message()), HasSubstr("why"));
  }
}

TEST(SmtpStatusTest, TheReplyAndTheCommandItAnsweredDecide) {
  auto status = [](const char* command, long code, const char* reply) {
    return SmtpStatus(CURLE_SEND_ERROR, code, SmtpTrace{command, reply, false}, "curl says");
  };
  auto rcpt = status("RCPT", 550, "550 5.1.1 <x@example.test>: user unknown");
  EXPECT_EQ(rcpt.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rcpt.message(), "smtp RCPT: 550 5.1.1 <x@example.test>: user unknown");
  EXPECT_EQ(status("RCPT", 450, "450 4.2.1 busy").code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(IsProviderError(status("RCPT", 450, "450 4.2.1 busy")));
  EXPECT_EQ(status("DATA", 554, "554 5.7.1 spam").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status("MAIL", 552, "552 5.3.4 too big").code(), absl::StatusCode::kInvalidArgument);
  for (auto provider : {status("AUTH", 535, "535 5.7.8 Authentication credentials invalid"),
                        status("AUTH", 534, "534 5.7.9 Authentication mechanism is too weak"),
                        status("MAIL", 530, "530 5.7.0 Authentication required"),
                        status("AUTH", 454, "454 4.7.0 Temporary authentication failure"),
                        status("STARTTLS", 454, "454 4.7.0 TLS not available"),
                        status("RCPT", 421, "421 4.3.2 Service shutting down"),
                        status("MAIL", 550, "550 5.7.1 Sender address rejected"),
                        status("", 554, "554 5.7.1 No service for you"),
                        status("EHLO", 550, "550 go away")}) {
    EXPECT_TRUE(IsProviderError(provider)) << provider;
  }
  // The reply text shown is the server's when the trace has it, else the code and curl's text.
  EXPECT_EQ(status("RCPT", 550, "").message(), "smtp RCPT: 550 curl says");
}

TEST(CurlStatusTest, ReachabilityTlsAndConfigurationAreProviderErrors) {
  for (CURLcode c : {CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_OPERATION_TIMEDOUT,
                     CURLE_PEER_FAILED_VERIFICATION, CURLE_USE_SSL_FAILED, CURLE_SSL_CONNECT_ERROR,
                     CURLE_LOGIN_DENIED, CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL}) {
    EXPECT_TRUE(IsProviderError(CurlStatus(c, ""))) << c;
  }
  for (CURLcode c : {CURLE_SEND_ERROR, CURLE_RECV_ERROR, CURLE_PARTIAL_FILE}) {
    auto st = CurlStatus(c, "");
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << c;
    EXPECT_FALSE(IsProviderError(st)) << c;
  }
  EXPECT_EQ(CurlStatus(CURLE_FILESIZE_EXCEEDED, "").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CurlStatus(CURLE_TFTP_PERM, "").code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(CurlStatus(CURLE_OK, "").ok());
  // Every code has a deliberate answer (the switch is exhaustive; -Werror=switch).
  for (int c = 0; c < CURL_LAST; ++c) (void)CurlStatus(static_cast<CURLcode>(c), "");
}

}  // namespace
}  // namespace mailroom
