#include "sender/lease/collector_credentials.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Tmp(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp", "/", name);
}

TEST(CollectorCredentialsTest, PlaintextWithoutTls) {
  auto creds = CollectorCredentials({});
  ASSERT_TRUE(creds.ok());
  EXPECT_NE(*creds, nullptr);
}

TEST(CollectorCredentialsTest, TlsWithACaAndAClientCertificate) {
  const std::string dir = Tmp("creds");
  std::system(absl::StrCat("mkdir -p ", dir,
                           " && openssl req -x509 -newkey rsa:2048 -nodes "
                           "-days 1 -subj /CN=test -keyout ",
                           dir, "/key.pem -out ", dir, "/cert.pem >/dev/null 2>&1")
                  .c_str());
  CollectorTls tls{true, dir + "/cert.pem", dir + "/cert.pem", dir + "/key.pem"};
  auto creds = CollectorCredentials(tls);
  ASSERT_TRUE(creds.ok()) << creds.status();
  EXPECT_NE(*creds, nullptr);
  // System roots: no CA file needed.
  EXPECT_TRUE(CollectorCredentials(CollectorTls{true, "", "", ""}).ok());
}

TEST(CollectorCredentialsTest, AnUnreadableFileNamesTheVariableNotTheContents) {
  const std::string key = Tmp("only-a-key.pem");
  std::ofstream(key) << "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n";
  auto missing = CollectorCredentials(CollectorTls{true, Tmp("no-such-ca.pem"), "", ""});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StartsWith(missing.status().message(), "MAILROOM_COLLECTOR_CA: "));
  auto no_cert = CollectorCredentials(CollectorTls{true, "", Tmp("no-such-cert.pem"), key});
  ASSERT_FALSE(no_cert.ok());
  EXPECT_THAT(std::string(no_cert.status().message()), HasSubstr("MAILROOM_COLLECTOR_CLIENT_CERT"));
  EXPECT_THAT(std::string(no_cert.status().message()), Not(HasSubstr("c2VjcmV0")));
}

}  // namespace
}  // namespace mailroom
