#include "sender/transport/transport_factory.h"

#include <cstdlib>
#include <filesystem>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "sender/transport/file_transport.h"
#include "sender/transport/http_transport.h"
#include "sender/transport/sandbox_transport.h"
#include "sender/transport/ses_transport.h"
#include "sender/transport/smtp_session.h"

namespace mailroom {
namespace {

std::string TmpDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

TEST(TransportFactoryTest, KindPicksTheTransport) {
  TransportConfig c;
  c.kind = "file";
  c.Mutable<FileSettings>().dir = TmpDir() + "/factory-outbox/nested";
  c.connections = 3;
  auto file = MakeTransport(c);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->Name(), "file");
  EXPECT_EQ((*file)->Concurrency(), 3);
  EXPECT_TRUE(std::filesystem::is_directory(c.Get<FileSettings>().dir));

  c.kind = "smtp";
  c.Set<SmtpSettings>().url = "smtp://127.0.0.1:1";
  auto smtp = MakeTransport(c);
  ASSERT_TRUE(smtp.ok());
  EXPECT_EQ((*smtp)->Name(), "smtp");
  EXPECT_EQ((*smtp)->Concurrency(), 3);

  c.kind = "ses";
  c.Set<SesSettings>();
  auto ses = MakeTransport(c);
  ASSERT_TRUE(ses.ok());
  EXPECT_EQ((*ses)->Name(), "ses");

  c.kind = "http";
  c.Set<HttpSettings>().url = "https://hooks.example.com/mail";
  c.Mutable<HttpSettings>().secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
  auto http = MakeTransport(c);
  ASSERT_TRUE(http.ok()) << http.status();
  EXPECT_EQ((*http)->Name(), "http");
  EXPECT_EQ((*http)->Concurrency(), 3);
  c.Mutable<HttpSettings>().secret = "whsec_dG9vLXNob3J0";  // "too-short": not 24 bytes
  EXPECT_TRUE(absl::StartsWith(MakeTransport(c).status().message(), "MAILROOM_HTTP_SECRET: "));

  c.kind = "sandbox";
  c.Set<SandboxSettings>();
  auto sandbox = MakeTransport(c);
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  EXPECT_EQ((*sandbox)->Name(), "sandbox");
  EXPECT_EQ((*sandbox)->Concurrency(), 3);
  c.Mutable<SandboxSettings>().feedback_url = "http://127.0.0.1:9/feedback/sandbox";
  c.Mutable<SandboxSettings>().feedback_secret = "whsec_dG9vLXNob3J0";
  EXPECT_TRUE(
      absl::StartsWith(MakeTransport(c).status().message(), "MAILROOM_SANDBOX_FEEDBACK_SECRET: "));
}

TEST(TransportFactoryTest, ErrorsNameTheVariable) {
  TransportConfig c;
  c.kind = "pigeon";
  auto bad = MakeTransport(c);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(bad.status().message(), "MAILROOM_TRANSPORT:"));

  std::string blocker = TmpDir() + "/factory-blocker";
  std::filesystem::remove_all(blocker);
  FILE* f = std::fopen(blocker.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  c.kind = "file";
  c.Mutable<FileSettings>().dir = blocker + "/outbox";  // under a regular file: cannot be created
  auto blocked = MakeTransport(c);
  EXPECT_EQ(blocked.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StartsWith(blocked.status().message(), "MAILROOM_FILE_DIR:"));
}

}  // namespace
}  // namespace mailroom
