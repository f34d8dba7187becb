#include "collector/api/tls_credentials.h"

#include <cstdlib>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string TempFile(const std::string& name, const std::string& content) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << content;
  return path;
}

TEST(TlsCredentialsTest, NoCertificateMeansPlaintext) {
  auto creds = LoadServerCredentials({});
  ASSERT_TRUE(creds.ok());
  EXPECT_NE(*creds, nullptr);
}

TEST(TlsCredentialsTest, UnreadableFilesNameTheVariableButNotTheContents) {
  const std::string key = TempFile("key.pem", "-----BEGIN PRIVATE KEY-----secret-----");
  auto creds = LoadServerCredentials({"/nonexistent/cert.pem", key, ""});
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(creds.status().message(), HasSubstr("MAILROOM_TLS_CERT"));

  const std::string cert = TempFile("cert.pem", "-----BEGIN CERTIFICATE-----");
  creds = LoadServerCredentials({cert, "/nonexistent/key.pem", ""});
  EXPECT_THAT(creds.status().message(), HasSubstr("MAILROOM_TLS_KEY"));
  creds = LoadServerCredentials({cert, key, "/nonexistent/ca.pem"});
  EXPECT_THAT(creds.status().message(), HasSubstr("MAILROOM_TLS_CLIENT_CA"));
  EXPECT_THAT(creds.status().message(), Not(HasSubstr("secret")));
}

TEST(TlsCredentialsTest, ReadableFilesGiveTlsCredentials) {
  const std::string cert = TempFile("c.pem", "-----BEGIN CERTIFICATE-----");
  const std::string key = TempFile("k.pem", "-----BEGIN PRIVATE KEY-----");
  const std::string ca = TempFile("ca.pem", "-----BEGIN CERTIFICATE-----");
  auto creds = LoadServerCredentials({cert, key, ca});
  ASSERT_TRUE(creds.ok()) << creds.status();
  EXPECT_NE(*creds, nullptr);
}

}  // namespace
}  // namespace mailroom
