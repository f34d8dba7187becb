#pragma once

// A gtest fixture that starts the transports' real peers on 127.0.0.1, each test in its own
// directory under TEST_TMPDIR: an aiosmtpd SMTP server (STARTTLS, implicit TLS, AUTH, injected
// 4xx/5xx; sender/transport/testing/smtp_peer.py), the SES v2 emulator (npm aws-ses-v2-local, found
// through MAILROOM_NODE_MODULES) behind a front that checks SigV4 and throttles
// (sender/transport/testing/ses_front.py). Peers stop when the test ends.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sender/transport/ses_transport.h"
#include "sender/transport/smtp_session.h"
#include "sender/transport/transport.h"
#include "testing/pg_server.h"
#include "testing/process.h"

namespace mailroom {
namespace transport_testing {

namespace fs = std::filesystem;
using ::mailroom::testing::Process;

inline constexpr char kPassword[] = "sm7p-pa55word";
inline constexpr char kAwsSecret[] = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

inline std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline OutgoingEmail Email(const std::string& to, int n = 0) {
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
        "-addext subjectAltName=IP:127.0.0.1 -keyout ",
        dir_, "/key.pem -out ", dir_, "/cert.pem >/dev/null 2>&1");
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  int StartSmtp(std::vector<std::string> extra) {
    int port = ::mailroom::testing::FreePort();
    std::vector<std::string> argv = {"/usr/bin/python3",
                                     ::mailroom::testing::Runfile(
                                         "mailroom/sender/transport/testing/smtp_peer.py"),
                                     "--port",
                                     absl::StrCat(port),
                                     "--dir",
                                     dir_ + "/smtp"};
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
    c.Mutable<SmtpSettings>().url = url;
    c.Mutable<SmtpSettings>().require_tls = require_tls;
    c.connections = 1;
    c.timeout = absl::Seconds(10);
    return c;
  }
  size_t Recorded() {
    size_t n = 0;
    if (!fs::exists(dir_ + "/smtp")) return 0;
    for (const auto& e : fs::directory_iterator(dir_ + "/smtp"))
      n += e.path().extension() == ".eml";
    return n;
  }
  std::string NodeModules() {
    const char* m = std::getenv("MAILROOM_NODE_MODULES");
    return m == nullptr ? "" : m;
  }
  // Starts the SES emulator (and, unless `direct`, the checking front); returns the endpoint.
  // `front_args` go to the front as they are (e.g. --slow-first-ms 3000).
  std::string StartSes(int throttle_first, bool direct = false,
                       const std::vector<std::string>& front_args = {}) {
    int emu = ::mailroom::testing::FreePort();
    auto e = Process::Spawn({"node", NodeModules() + "/aws-ses-v2-local/dist/cli.js", "--host",
                             "127.0.0.1", "--port", absl::StrCat(emu)},
                            {}, dir_ + "/ses.log");
    EXPECT_TRUE(e.ok());
    EXPECT_TRUE((*e)->WaitForLog("server running", absl::Seconds(30))) << (*e)->Log();
    peers_.push_back(*std::move(e));
    emulator_ = absl::StrCat("http://127.0.0.1:", emu);
    if (direct) return emulator_;
    int front = ::mailroom::testing::FreePort();
    std::vector<std::string> argv = {
        "/usr/bin/python3",
        ::mailroom::testing::Runfile("mailroom/sender/transport/testing/ses_front.py"),
        "--port",
        absl::StrCat(front),
        "--upstream",
        emulator_,
        "--access-key",
        "AKIDEXAMPLE",
        "--secret-key",
        kAwsSecret,
        "--throttle-first",
        absl::StrCat(throttle_first)};
    argv.insert(argv.end(), front_args.begin(), front_args.end());
    auto f = Process::Spawn(argv, {}, dir_ + "/front.log");
    EXPECT_TRUE(f.ok());
    EXPECT_TRUE((*f)->WaitForLog("ready", absl::Seconds(20))) << (*f)->Log();
    peers_.push_back(*std::move(f));
    return absl::StrCat("http://127.0.0.1:", front);
  }
  TransportConfig Ses(const std::string& endpoint, const std::string& secret = kAwsSecret) {
    TransportConfig c;
    c.kind = "ses";
    c.Mutable<SesSettings>().endpoint = endpoint;
    c.Mutable<SesSettings>().region = "us-east-1";
    c.Mutable<SesSettings>().access_key_id = "AKIDEXAMPLE";
    c.Mutable<SesSettings>().secret_access_key = secret;
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

}  // namespace transport_testing
}  // namespace mailroom
