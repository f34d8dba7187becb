// The SMTP transport against a real SMTP server (aiosmtpd): STARTTLS, implicit TLS, AUTH,
// injected 4xx/5xx replies, connection reuse.
#include "sender/transport/smtp_transport.h"

#include <future>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sender/transport/smtp_session.h"
#include "sender/transport/testing/transport_peers.h"

namespace mailroom {
namespace {

using ::mailroom::testing::FreePort;
using ::testing::HasSubstr;
using ::testing::Not;
using transport_testing::Email;
using transport_testing::kPassword;
using transport_testing::Slurp;
using transport_testing::TransportTest;

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
  c.Mutable<SmtpSettings>().ca_file = dir_ + "/cert.pem";
  c.Mutable<SmtpSettings>().username = "mailer";
  c.Mutable<SmtpSettings>().password = kPassword;
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
  int port = StartSmtp(
      {"--tls-cert", dir_ + "/cert.pem", "--tls-key", dir_ + "/key.pem", "--require-tls"});
  SmtpTransport t(Smtp(absl::StrCat("smtp://127.0.0.1:", port), true));  // no CA file
  auto r = t.Send(Email("a@example.test"));
  EXPECT_TRUE(IsProviderError(r.status())) << r.status();
  EXPECT_EQ(Recorded(), 0u);
}

TEST_F(TransportTest, SmtpsImplicitTls) {
  MakeCert();
  int port = StartSmtp(
      {"--tls-cert", dir_ + "/cert.pem", "--tls-key", dir_ + "/key.pem", "--implicit-tls"});
  TransportConfig c = Smtp(absl::StrCat("smtps://127.0.0.1:", port), true);
  c.Mutable<SmtpSettings>().ca_file = dir_ + "/cert.pem";
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
  c.Mutable<SmtpSettings>().ca_file = dir_ + "/cert.pem";
  c.Mutable<SmtpSettings>().username = "mailer";
  c.Mutable<SmtpSettings>().password = kPassword;
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

TEST_F(TransportTest, SmtpATimeoutAfterTheWholeMessageMayHaveBeenSent) {
  // The server queues the first message and says so only 3 s later.
  int port = StartSmtp({"--slow-data-first", "1", "--slow-data-ms", "3000"});
  TransportConfig c = Smtp(absl::StrCat("smtp://127.0.0.1:", port), false);
  SmtpTransport t(c);
  OutgoingEmail email = Email("slow@example.test");
  email.timeout = absl::Seconds(1);  // what the job's lease leaves: it caps the 10 s
  const absl::Time start = absl::Now();
  auto first = t.Send(email);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(2500));  // not when the server answers
  ASSERT_FALSE(first.ok());
  EXPECT_TRUE(IsMaybeSent(first.status())) << first.status();
  EXPECT_EQ(Recorded(), 1u);  // it was queued
  // The late "250" must not answer the next message's MAIL FROM: a fresh connection.
  auto second = t.Send(email);
  EXPECT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(Recorded(), 2u);
  // Refused at RCPT: nothing was sent, nothing is ambiguous.
  int refusing = StartSmtp({"--fail-first", "1"});
  auto refused =
      SmtpTransport(Smtp(absl::StrCat("smtp://127.0.0.1:", refusing), false)).Send(email);
  ASSERT_FALSE(refused.ok());
  EXPECT_FALSE(IsMaybeSent(refused.status())) << refused.status();
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
  // aiosmtpd's controller connects once to itself before it is ready.
  const int before = std::stoi(Slurp(dir_ + "/smtp/connections"));
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
  int connections = std::stoi(Slurp(dir_ + "/smtp/connections")) - before;
  EXPECT_LE(connections, 4) << "connections were not kept open between messages";
}

TEST_F(TransportTest, SmtpSessionsAwaitTheirFinalRepliesTogether) {
  // The server answers a message's end of data only once all 8 sessions have sent theirs (or
  // 3 s later). A connection that stops the others while it waits for its own reply (libcurl
  // waits inside the transfer) lets the server hold one message at a time.
  constexpr int kConnections = 8;
  int port = StartSmtp({"--hold-data", absl::StrCat(kConnections), "--hold-ms", "3000"});
  TransportConfig c = Smtp(absl::StrCat("smtp://127.0.0.1:", port), false);
  c.connections = kConnections;
  const int before = std::stoi(Slurp(dir_ + "/smtp/connections"));
  SmtpTransport t(c);
  for (int round = 0; round < 2; ++round) {
    std::vector<std::future<absl::StatusOr<SendResult>>> sends;
    for (int w = 0; w < kConnections; ++w) {
      sends.push_back(std::async(std::launch::async, [&, w] {
        return t.Send(Email("p@example.test", round * 100 + w));
      }));
    }
    for (auto& s : sends) {
      auto r = s.get();
      EXPECT_TRUE(r.ok()) << r.status();
    }
    EXPECT_EQ(Slurp(dir_ + "/smtp/held_max"), absl::StrCat(kConnections))
        << "message bodies were not in flight on every connection at once";
  }
  EXPECT_EQ(Recorded(), 2u * kConnections);
  EXPECT_LE(std::stoi(Slurp(dir_ + "/smtp/connections")) - before, kConnections);
}

}  // namespace
}  // namespace mailroom
