// SMTP XOAUTH2 against real peers on 127.0.0.1: the aiosmtpd peer accepting only the tokens
// the local client-credentials endpoint issued (unexpired, unrevoked), and that endpoint
// (sender/transport/testing/oauth2_token_endpoint.py). What this process logs is captured and
// searched for the client secret and every token issued.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sender/transport/smtp_session.h"
#include "sender/transport/smtp_transport.h"
#include "sender/transport/testing/transport_peers.h"

namespace mailroom {
namespace {

using ::mailroom::testing::FreePort;
using ::mailroom::testing::Process;
using ::mailroom::testing::Runfile;
using ::testing::HasSubstr;
using ::testing::Not;
using transport_testing::Email;
using transport_testing::Slurp;

constexpr char kMailbox[] = "mailbox@example.test";
constexpr char kClientId[] = "6731de76-14a6-49ae-97bc-6eba6914391e";
constexpr char kClientSecret[] = "cl1ent~Secret.Value_For-Tests";

// Polls `done` until it holds or `timeout` passes: waiting for an event another process makes.
bool WaitFor(const std::function<bool()>& done, absl::Duration timeout = absl::Seconds(20)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

class OAuth2Test : public transport_testing::TransportTest {
 protected:
  void SetUp() override {
    TransportTest::SetUp();
    state_ = dir_ + "/oauth2.json";
    // This process's stderr (where the transport logs) goes to a file for the whole test.
    fflush(stderr);
    saved_stderr_ = dup(STDERR_FILENO);
    int fd = open((dir_ + "/sender.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDERR_FILENO);
    close(fd);
  }
  void TearDown() override {
    fflush(stderr);
    dup2(saved_stderr_, STDERR_FILENO);
    close(saved_stderr_);
    // Nothing secret in the log, nor in any status a send returned.
    const std::string log = Slurp(dir_ + "/sender.log");
    std::vector<std::string> secrets = {kClientSecret};
    nlohmann::json state = State();  // kept alive: the loop reads into it
    for (const auto& [token, expiry] : state["tokens"].items()) secrets.push_back(token);
    for (const std::string& s : secrets) {
      EXPECT_THAT(log, Not(HasSubstr(s))) << "a secret in the log";
      EXPECT_THAT(statuses_, Not(HasSubstr(s))) << "a secret in a send's status";
    }
    std::fprintf(stderr, "--- the transport's log ---\n%s", log.c_str());
  }

  // The token endpoint on `port` (0: a free one); returns its token URL.
  std::string StartTokenEndpoint(int expires_in, int fail_first = 0, int port = 0) {
    if (port == 0) port = FreePort();
    auto p = Process::Spawn({"/usr/bin/python3",
                             Runfile("mailroom/sender/transport/testing/oauth2_token_endpoint.py"),
                             "--port", absl::StrCat(port), "--state", state_, "--client-id",
                             kClientId, "--client-secret", kClientSecret, "--expires-in",
                             absl::StrCat(expires_in), "--fail-first", absl::StrCat(fail_first)},
                            {}, dir_ + "/token_endpoint.log");
    EXPECT_TRUE(p.ok());
    EXPECT_TRUE((*p)->WaitForLog("ready", absl::Seconds(20))) << (*p)->Log();
    peers_.push_back(*std::move(p));
    endpoint_ = absl::StrCat("http://127.0.0.1:", port);
    return endpoint_ + "/tenant/oauth2/v2.0/token";
  }
  int StartXoauth2Smtp() {
    return StartSmtp({"--xoauth2-state", state_, "--xoauth2-user", kMailbox});
  }
  TransportConfig Config(int smtp_port, int connections) {
    TransportConfig c = Smtp(absl::StrCat("smtp://127.0.0.1:", smtp_port), false);
    c.connections = connections;
    c.Mutable<SmtpSettings>().username = kMailbox;
    c.Mutable<SmtpSettings>().oauth2_client_id = kClientId;
    c.Mutable<SmtpSettings>().oauth2_client_secret = kClientSecret;
    c.Mutable<SmtpSettings>().oauth2_scope = "https://outlook.office365.com/.default";
    return c;
  }
  nlohmann::json State() {
    auto j = nlohmann::json::parse(Slurp(state_), nullptr, false);
    return j.is_object() ? j : nlohmann::json{{"tokens", nlohmann::json::object()}};
  }
  int Counter(const std::string& name) {
    std::string s = Slurp(dir_ + "/smtp/" + name);
    return s.empty() ? 0 : std::stoi(s);
  }
  absl::StatusOr<SendResult> Send(SmtpTransport& t, const OutgoingEmail& e) {
    auto r = t.Send(e);
    if (!r.ok()) {
      absl::MutexLock lock(&mu_);
      absl::StrAppend(&statuses_, r.status().ToString(), "\n");
    }
    return r;
  }

  std::string state_, endpoint_;
  int saved_stderr_ = -1;
  absl::Mutex mu_;
  std::string statuses_;
};

TEST_F(OAuth2Test, ATokenThatExpiresMidRunFailsNoSend) {
  // Tokens live 3 s and the server refuses them after that; sends go on from 4 connections
  // until the endpoint has issued a third token (at least two expiries crossed).
  const std::string url = StartTokenEndpoint(/*expires_in=*/3);
  TransportConfig c = Config(StartXoauth2Smtp(), /*connections=*/4);
  c.Mutable<SmtpSettings>().oauth2_token_url = url;
  SmtpTransport t(c);
  std::atomic<int> sent{0}, failed{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&, w] {
      for (int n = 0; !stop; ++n) {
        auto r = Send(t, Email("rcpt@example.test", w * 10000 + n));
        (r.ok() ? sent : failed)++;
        absl::SleepFor(absl::Milliseconds(50));  // pacing: sends spread over the tokens' lives
      }
    });
  }
  const bool third = WaitFor([&] { return State().value("issued", 0) >= 3; }, absl::Seconds(40));
  stop = true;
  for (auto& w : workers) w.join();
  EXPECT_TRUE(third) << "issued " << State().value("issued", 0);
  EXPECT_EQ(failed, 0) << statuses_;
  EXPECT_GT(sent, 40);
  EXPECT_EQ(Recorded(), static_cast<size_t>(sent.load()));
  EXPECT_GE(t.tokens()->fetches(), 3);
  EXPECT_GE(Counter("auth_ok"), 3);  // a new token, new sessions
}

TEST_F(OAuth2Test, ARevokedTokenIsReplacedOnRefusalAndTheMessageDelivered) {
  TransportConfig c = Config(StartXoauth2Smtp(), /*connections=*/1);
  c.Mutable<SmtpSettings>().oauth2_token_url = StartTokenEndpoint(/*expires_in=*/3600);
  SmtpTransport t(c);
  ASSERT_TRUE(Send(t, Email("a@example.test", 1)).ok());
  // The grant is revoked: the server ends the session and refuses the token from now on.
  ASSERT_EQ(std::system(absl::StrCat("curl -s -X POST ", endpoint_, "/revoke >/dev/null").c_str()),
            0);
  ASSERT_TRUE(WaitFor([&] { return Counter("revoked_closed") >= 1; }));
  auto second = Send(t, Email("a@example.test", 2));
  EXPECT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(Counter("auth_refused"), 1);
  EXPECT_EQ(State().value("issued", 0), 2);
  EXPECT_EQ(Recorded(), 2u);
}

TEST_F(OAuth2Test, TheTokenEndpointDownHoldsTheJobAndBacksOff) {
  const int port = FreePort();
  TransportConfig c = Config(StartXoauth2Smtp(), /*connections=*/1);
  c.Mutable<SmtpSettings>().oauth2_token_url = absl::StrCat("http://127.0.0.1:", port,
                                                            "/tenant/oauth2/v2.0/token");
  SmtpTransport t(c);
  // Nothing listens: a provider error (the engine holds the job, uncharged, and its breaker
  // probes again later), not a failure of the message.
  auto down = Send(t, Email("a@example.test"));
  ASSERT_FALSE(down.ok());
  EXPECT_TRUE(IsProviderError(down.status())) << down.status();
  EXPECT_THAT(std::string(down.status().message()), HasSubstr("token endpoint"));
  // It comes back, answering 503 once more first. Tried again as the breaker would.
  StartTokenEndpoint(/*expires_in=*/3600, /*fail_first=*/1, port);
  absl::StatusOr<SendResult> r = down.status();
  ASSERT_TRUE(WaitFor([&] {
    r = Send(t, Email("a@example.test"));
    EXPECT_TRUE(r.ok() || IsProviderError(r.status())) << r.status();
    if (!r.ok()) absl::SleepFor(absl::Milliseconds(100));
    return r.ok();
  }));
  EXPECT_EQ(Recorded(), 1u);
  // Backoff: one refused connection, one 503, one token; not a request per send.
  EXPECT_EQ(State().value("requests", 0), 2);
}

TEST_F(OAuth2Test, WrongClientSecretIsAProviderErrorThatNamesNoSecret) {
  TransportConfig c = Config(StartXoauth2Smtp(), /*connections=*/1);
  c.Mutable<SmtpSettings>().oauth2_token_url = StartTokenEndpoint(/*expires_in=*/3600);
  c.Mutable<SmtpSettings>().oauth2_client_secret = "not-the-secret-0123";
  SmtpTransport t(c);
  auto r = Send(t, Email("a@example.test"));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(IsProviderError(r.status())) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("HTTP 401 invalid_client"));
  EXPECT_THAT(statuses_, Not(HasSubstr("not-the-secret-0123")));
  EXPECT_THAT(Slurp(dir_ + "/sender.log"), Not(HasSubstr("not-the-secret-0123")));
  EXPECT_EQ(Recorded(), 0u);
}

TEST_F(OAuth2Test, ATokenFileIsReadAgainWhenItChanges) {
  // A sidecar keeps the token file fresh; here the test plays it, and the issuer: it writes
  // the state the SMTP peer checks tokens against.
  auto issue = [&](const std::string& token, const std::vector<std::string>& revoked) {
    nlohmann::json st = {{"tokens", {{token, absl::ToUnixSeconds(absl::Now()) + 3600}}},
                         {"revoked", revoked}};
    for (const std::string& r : revoked) st["tokens"][r] = 0;
    std::ofstream(state_ + ".tmp") << st.dump();
    std::rename((state_ + ".tmp").c_str(), state_.c_str());
    std::ofstream(dir_ + "/token.tmp") << token << "\n";
    std::rename((dir_ + "/token.tmp").c_str(), (dir_ + "/token").c_str());
  };
  issue("file-token-1-Zq8", {});
  TransportConfig c = Config(StartXoauth2Smtp(), /*connections=*/1);
  c.Mutable<SmtpSettings>().oauth2_token_file = dir_ + "/token";
  SmtpTransport t(c);
  ASSERT_TRUE(Send(t, Email("a@example.test", 1)).ok());
  issue("file-token-2-Kx3", {"file-token-1-Zq8"});
  ASSERT_TRUE(WaitFor([&] { return Counter("revoked_closed") >= 1; }));
  auto second = Send(t, Email("a@example.test", 2));
  EXPECT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(Recorded(), 2u);
  EXPECT_EQ(t.tokens()->fetches(), 2);
  // The sidecar stops: the refused token is not offered again, the job is held.
  issue("file-token-3-Pw1", {"file-token-1-Zq8", "file-token-2-Kx3"});
  std::ofstream(dir_ + "/token") << "file-token-2-Kx3\n";
  ASSERT_TRUE(WaitFor([&] { return Counter("revoked_closed") >= 2; }));
  auto held = Send(t, Email("a@example.test", 3));
  EXPECT_TRUE(IsProviderError(held.status())) << held.status();
  EXPECT_EQ(Recorded(), 2u);
}

}  // namespace
}  // namespace mailroom
