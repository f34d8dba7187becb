// HttpsGet against a local HTTP peer: what each answer becomes, the protocol and size limits,
// and errors that never quote the URL's query.
#include "collector/feedback/https_get.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/http/testing/http_peer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using http_testing::HttpPeer;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Answer(const std::string& status, const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Length: ", body.size(), "\r\n\r\n", body);
}

TEST(HttpsGetTest, A2xxAnswerIsItsBody) {
  HttpPeer peer(Answer("200 OK", "-----BEGIN CERTIFICATE-----"));
  auto body = HttpsGet(peer.url(), "", /*allow_http=*/true);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, "-----BEGIN CERTIFICATE-----");
  EXPECT_EQ(peer.requests().size(), 1u);
}

TEST(HttpsGetTest, PlainHttpOnlyWhenAllowed) {
  HttpPeer peer(Answer("200 OK", "x"));
  auto refused = HttpsGet(peer.url(), "");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), Not(HasSubstr("q=1")));
  EXPECT_TRUE(peer.requests().empty());
}

TEST(HttpsGetTest, A4xxIsNotFoundButThrottlingAndServerErrorsAreUnavailable) {
  for (const auto& [status, code] : std::vector<std::pair<std::string, absl::StatusCode>>{
           {"404 Not Found", absl::StatusCode::kNotFound},
           {"403 Forbidden", absl::StatusCode::kNotFound},
           {"408 Request Timeout", absl::StatusCode::kUnavailable},
           {"429 Too Many Requests", absl::StatusCode::kUnavailable},
           {"503 Service Unavailable", absl::StatusCode::kUnavailable},
           {"302 Found", absl::StatusCode::kUnavailable}}) {
    HttpPeer peer(Answer(status, "no"));
    auto got = HttpsGet(peer.url(), "", /*allow_http=*/true);
    EXPECT_EQ(got.status().code(), code) << status << ": " << got.status();
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(status.substr(0, 3)));
  }
}

TEST(HttpsGetTest, ABodyOverTheCapIsOutOfRange) {
  HttpPeer peer(Answer("200 OK", std::string(2000, 'c')));
  auto got = HttpsGet(peer.url(), "", /*allow_http=*/true, /*max_bytes=*/1000);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kOutOfRange) << got.status();
  EXPECT_TRUE(HttpsGet(peer.url(), "", true, /*max_bytes=*/2000).ok());
}

TEST(HttpsGetTest, ASilentServerIsUnavailableWithinTheTimeout) {
  HttpPeer silent("");
  auto got = HttpsGet(silent.url(), "", true, 1000, absl::Milliseconds(300));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_THAT(std::string(got.status().message()), Not(HasSubstr("q=1")));
}

}  // namespace
}  // namespace mailroom
