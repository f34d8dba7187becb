// One SMTP session against a real SMTP server (aiosmtpd): commands pipelined when PIPELINING
// is offered and one at a time when not, dot-stuffing, refusals that keep the connection,
// a kept connection the server dropped, a final reply lost.
#include "sender/transport/smtp_session.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sender/transport/testing/transport_peers.h"

namespace mailroom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using transport_testing::Email;
using transport_testing::Slurp;
using transport_testing::TransportTest;

TEST(DotStuffedTest, EndsEveryLineWithCrlfAndDoublesLeadingDots) {
  EXPECT_EQ(DotStuffed(""), ".\r\n");
  EXPECT_EQ(DotStuffed("a\r\n"), "a\r\n.\r\n");
  EXPECT_EQ(DotStuffed("a"), "a\r\n.\r\n");
  EXPECT_EQ(DotStuffed(".a\r\n.\r\n..\r\nb.c\r\n"), "..a\r\n..\r\n...\r\nb.c\r\n.\r\n");
  // A bare LF or CR is a line end too: the server must not see "\n.\n" as the end of data.
  EXPECT_EQ(DotStuffed("a\n.\nb\r.c"), "a\r\n..\r\nb\r\n..c\r\n.\r\n");
  EXPECT_EQ(DotStuffed("\r\n\r\n"), "\r\n\r\n.\r\n");
}

class SmtpSessionTest : public TransportTest {
 protected:
  // A session with the peer started with `extra`; counts the peer's connections from now.
  std::unique_ptr<SmtpSession> Session(std::vector<std::string> extra) {
    const int port = StartSmtp(std::move(extra));
    connections_before_ = Count("connections");
    return std::make_unique<SmtpSession>(
        Smtp(absl::StrCat("smtp://127.0.0.1:", port), /*require_tls=*/false));
  }
  absl::StatusOr<SendResult> Send(SmtpSession* s, const OutgoingEmail& email) {
    bool auth_refused = true;
    absl::StatusOr<SendResult> r = s->Send(email, "", &auth_refused);
    EXPECT_FALSE(auth_refused);
    return r;
  }
  // The peer's counter file `name` (0 when absent).
  int Count(const std::string& name) {
    const std::string text = Slurp(dir_ + "/smtp/" + name);
    return text.empty() ? 0 : std::stoi(text);
  }
  int NewConnections() { return Count("connections") - connections_before_; }
  // The verbs of each read by the peer that held commands, after the session's greeting.
  std::vector<std::string> Reads() {
    std::vector<std::string> reads;
    for (absl::string_view line : absl::StrSplit(Slurp(dir_ + "/smtp/reads"), '\n')) {
      if (!line.empty() && line != "EHLO") reads.emplace_back(line);
    }
    return reads;
  }

  int connections_before_ = 0;
};

TEST_F(SmtpSessionTest, PipelinedCommandsLeaveInOneWrite) {
  auto s = Session({"--pipelining"});
  for (int i = 0; i < 3; ++i) {
    auto r = Send(s.get(), Email("a@example.test", i));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_THAT(r->provider_id, HasSubstr("250 2.0.0 queued as"));
  }
  // Two client turns a message: the commands in one read, then the message.
  EXPECT_THAT(Reads(), ElementsAre("MAIL RCPT DATA", "MAIL RCPT DATA", "MAIL RCPT DATA"));
  EXPECT_EQ(Recorded(), 3u);
  EXPECT_EQ(NewConnections(), 1);
}

TEST_F(SmtpSessionTest, WithoutPipeliningCommandsGoOneAtATime) {
  auto s = Session({});
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Send(s.get(), Email("a@example.test", i)).ok());
  EXPECT_THAT(Reads(), ElementsAre("MAIL", "RCPT", "DATA", "MAIL", "RCPT", "DATA"));
  EXPECT_EQ(Recorded(), 2u);
}

TEST_F(SmtpSessionTest, PipelinesOverStartTlsWithAuth) {
  MakeCert();
  const int port = StartSmtp({"--tls-cert", dir_ + "/cert.pem", "--tls-key", dir_ + "/key.pem",
                              "--require-tls", "--auth", "mailer:pw", "--pipelining"});
  TransportConfig c = Smtp(absl::StrCat("smtp://127.0.0.1:", port), /*require_tls=*/true);
  c.Mutable<SmtpSettings>().ca_file = dir_ + "/cert.pem";
  c.Mutable<SmtpSettings>().username = "mailer";
  c.Mutable<SmtpSettings>().password = "pw";
  SmtpSession s(c);
  for (int i = 0; i < 2; ++i) {
    auto r = Send(&s, Email("a@example.test", i));
    ASSERT_TRUE(r.ok()) << r.status();
  }
  std::vector<std::string> reads = Reads();
  EXPECT_EQ(std::count(reads.begin(), reads.end(), "MAIL RCPT DATA"), 2);
  EXPECT_THAT(Slurp(dir_ + "/smtp/000002.json"), HasSubstr("\"tls\": true"));
}

TEST_F(SmtpSessionTest, OnlyTheEhloAfterStartTlsCounts) {
  MakeCert();
  const int port = StartSmtp({"--tls-cert", dir_ + "/cert.pem", "--tls-key", dir_ + "/key.pem",
                              "--require-tls", "--pipelining-before-tls"});
  TransportConfig c = Smtp(absl::StrCat("smtp://127.0.0.1:", port), /*require_tls=*/true);
  c.Mutable<SmtpSettings>().ca_file = dir_ + "/cert.pem";
  SmtpSession s(c);
  auto r = Send(&s, Email("a@example.test"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Reads(), ElementsAre("STARTTLS", "MAIL", "RCPT", "DATA"));
}

TEST_F(SmtpSessionTest, DotsAndLineEndsArriveIntact) {
  auto s = Session({"--pipelining"});
  OutgoingEmail email = Email("a@example.test");
  email.mime = "Subject: dots\r\n\r\n.leading\r\n.\r\nbare\n.\nend";
  ASSERT_TRUE(Send(s.get(), email).ok());
  ASSERT_TRUE(Send(s.get(), Email("b@example.test")).ok());  // the session still in step
  EXPECT_EQ(Slurp(dir_ + "/smtp/000001.eml"),
            "Subject: dots\r\n\r\n.leading\r\n.\r\nbare\r\n.\r\nend\r\n");
  EXPECT_EQ(Recorded(), 2u);
}

TEST_F(SmtpSessionTest, RefusedRecipientIsReportedAndTheConnectionKept) {
  auto s = Session({"--pipelining", "--reject-rcpt", "bounce"});
  auto refused = Send(s.get(), Email("bounce@example.test"));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_TRUE(IsRecipientRejected(refused.status())) << refused.status();
  EXPECT_FALSE(IsMaybeSent(refused.status()));
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("smtp RCPT: 550 5.1.1 <bounce@example.test>: mailbox unavailable"));
  EXPECT_TRUE(s->connected());
  auto ok = Send(s.get(), Email("b@example.test"));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(Reads(), ElementsAre("MAIL RCPT DATA", "RSET", "MAIL RCPT DATA"));
  EXPECT_EQ(Recorded(), 1u);
  EXPECT_EQ(NewConnections(), 1);
}

TEST_F(SmtpSessionTest, TemporaryRecipientFailureIsRetryable) {
  auto s = Session({"--pipelining", "--fail-first", "1", "--fail-code", "451"});
  auto first = Send(s.get(), Email("a@example.test"));
  EXPECT_EQ(first.status().code(), absl::StatusCode::kUnavailable) << first.status();
  EXPECT_FALSE(IsProviderError(first.status())) << first.status();
  EXPECT_THAT(std::string(first.status().message()),
              HasSubstr("smtp RCPT: 451 4.3.0 temporary failure (injected)"));
  ASSERT_TRUE(Send(s.get(), Email("a@example.test")).ok());
  EXPECT_EQ(NewConnections(), 1);
}

// A server that answers a pipelined RCPT with 421 and hangs up: the 421 (the server is busy,
// for every message) is the answer, not the failed read of the DATA reply that never comes.
TEST_F(SmtpSessionTest, A421FollowedByAHangUpIsReportedAsTheServersRefusal) {
  auto s = Session(
      {"--pipelining", "--fail-first", "1", "--fail-code", "421", "--hangup-after-421"});
  auto first = Send(s.get(), Email("a@example.test"));
  EXPECT_TRUE(IsProviderError(first.status())) << first.status();
  EXPECT_FALSE(IsMaybeSent(first.status()));
  EXPECT_THAT(std::string(first.status().message()), HasSubstr("smtp RCPT: 421 4.3.0"));
  EXPECT_FALSE(s->connected());
  ASSERT_TRUE(Send(s.get(), Email("a@example.test")).ok());
  EXPECT_EQ(Recorded(), 1u);
  EXPECT_EQ(NewConnections(), 2);
}

// An address that could end a command line is refused before anything is written: no command
// can be smuggled into the transaction, whatever the callers checked.
TEST_F(SmtpSessionTest, AnAddressWithALineEndIsRefusedBeforeAnyCommand) {
  auto s = Session({"--pipelining"});
  for (const char* to :
       {"a@example.test\r\nRCPT TO:<b@example.test>", "a@example.test>x", "a\n@example.test"}) {
    auto r = Send(s.get(), Email(to));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  }
  EXPECT_THAT(Reads(), ::testing::IsEmpty());
  EXPECT_EQ(Recorded(), 0u);
}

TEST_F(SmtpSessionTest, RefusedEndOfDataIsReported) {
  auto s = Session({"--pipelining", "--reject-data-first", "1"});
  auto data = Send(s.get(), Email("a@example.test"));
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument) << data.status();
  EXPECT_THAT(std::string(data.status().message()),
              HasSubstr("smtp DATA: 554 5.6.0 message rejected (injected)"));
  EXPECT_FALSE(IsMaybeSent(data.status()));
  ASSERT_TRUE(Send(s.get(), Email("a@example.test")).ok());
  EXPECT_EQ(NewConnections(), 1);
}

class DroppedConnectionTest : public SmtpSessionTest, public ::testing::WithParamInterface<bool> {};

TEST_P(DroppedConnectionTest, KeptConnectionClosedByTheServerIsReplacedWithoutFailure) {
  std::vector<std::string> args = {"--drop-kept-mail", "1"};
  if (GetParam()) args.emplace_back("--pipelining");
  auto s = Session(args);
  ASSERT_TRUE(Send(s.get(), Email("a@example.test", 1)).ok());
  // The server closes the kept connection as the next MAIL arrives, with no reply.
  auto second = Send(s.get(), Email("a@example.test", 2));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(Count("kept_dropped"), 1);
  EXPECT_EQ(Recorded(), 2u);
  EXPECT_EQ(NewConnections(), 2);
}

TEST_P(DroppedConnectionTest, IdleConnectionClosedByTheServerIsReplacedWithoutFailure) {
  std::vector<std::string> args = {"--close-idle-ms", "100"};
  if (GetParam()) args.emplace_back("--pipelining");
  auto s = Session(args);
  ASSERT_TRUE(Send(s.get(), Email("a@example.test", 1)).ok());
  for (int i = 0; i < 500 && Count("idle_closed") == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_EQ(Count("idle_closed"), 1);
  auto second = Send(s.get(), Email("a@example.test", 2));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(Recorded(), 2u);
  EXPECT_EQ(NewConnections(), 2);
}

INSTANTIATE_TEST_SUITE_P(Pipelining, DroppedConnectionTest, ::testing::Bool());

TEST_F(SmtpSessionTest, FinalReplyLostAfterTheMessageLeftMayHaveBeenSent) {
  auto s = Session({"--pipelining", "--faults-by-recipient"});
  ASSERT_TRUE(Send(s.get(), Email("ok@example.test")).ok());
  // On the kept connection: the server records the message and closes with no final reply.
  auto lost = Send(s.get(), Email("lost-1@example.test"));
  ASSERT_FALSE(lost.ok());
  EXPECT_TRUE(IsMaybeSent(lost.status())) << lost.status();
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kUnavailable) << lost.status();
  EXPECT_FALSE(s->connected());
  EXPECT_EQ(Recorded(), 2u);  // not sent again by the session itself
  ASSERT_TRUE(Send(s.get(), Email("ok@example.test", 3)).ok());
  EXPECT_EQ(NewConnections(), 2);
}

TEST_F(SmtpSessionTest, ReplyTimeoutClosesTheConnection) {
  auto s = Session({"--pipelining", "--slow-data-first", "1", "--slow-data-ms", "3000"});
  OutgoingEmail email = Email("slow@example.test");
  email.timeout = absl::Seconds(1);
  const absl::Time start = absl::Now();
  auto first = Send(s.get(), email);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(2500));
  ASSERT_FALSE(first.ok());
  EXPECT_TRUE(IsMaybeSent(first.status())) << first.status();
  EXPECT_THAT(std::string(first.status().message()), HasSubstr("(curl 28)"));
  // The late "250" must not answer the next message's commands: a fresh connection.
  auto second = Send(s.get(), email);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(NewConnections(), 2);
}

TEST_F(SmtpSessionTest, QuitOnDestruction) {
  auto s = Session({"--pipelining"});
  ASSERT_TRUE(Send(s.get(), Email("a@example.test")).ok());
  s.reset();
  EXPECT_THAT(Reads(), ElementsAre("MAIL RCPT DATA", "QUIT"));
}

}  // namespace
}  // namespace mailroom
