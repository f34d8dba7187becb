#include "common/pem.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string TempFile(const std::string& name, const std::string& content) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

TEST(ReadPemTest, AGoodFileIsReadWhole) {
  const std::string pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  auto read = ReadPem("MAILROOM_TLS_CERT", TempFile("good.pem", pem));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, pem);
}

TEST(ReadPemTest, AMissingFileNamesTheVariableAndThePath) {
  auto read = ReadPem("MAILROOM_TLS_CERT", "/nonexistent/cert.pem");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(read.status().message()), StartsWith("MAILROOM_TLS_CERT: "));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("/nonexistent/cert.pem"));
}

TEST(ReadPemTest, AnEmptyFileIsAnErrorNamingTheVariable) {
  const std::string path = TempFile("empty.pem", "");
  auto read = ReadPem("MAILROOM_COLLECTOR_CA", path);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(read.status().message()), StartsWith("MAILROOM_COLLECTOR_CA: "));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("empty"));
}

TEST(ReadPemTest, ADirectoryIsAnErrorNamingTheVariable) {
  const char* dir = std::getenv("TEST_TMPDIR");
  auto read = ReadPem("MAILROOM_TLS_KEY", dir ? dir : "/tmp");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(read.status().message()), StartsWith("MAILROOM_TLS_KEY: "));
}

TEST(ReadPemTest, ErrorsNameThePathNotTheContents) {
  const std::string path = TempFile("dir-not-file.pem", "");
  auto read = ReadPem("MAILROOM_TLS_KEY", path);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(read.status().message()), Not(HasSubstr("PRIVATE KEY")));
}

}  // namespace
}  // namespace mailroom
