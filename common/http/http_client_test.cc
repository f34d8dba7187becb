// PerformOutbound against a local HTTP/1.1 peer (HttpPeer): what goes out, what is captured,
// and what ends a transfer.
#include "common/http/http_client.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/http/testing/http_peer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Peer = http_testing::HttpPeer;

OutboundRequest Get(const std::string& url) {
  OutboundRequest r;
  r.url = url;
  r.post = false;
  return r;
}

TEST(HttpClientTest, AGetReturnsTheStatusHeadersAndBodyWhateverTheStatus) {
  Peer peer(
      "HTTP/1.1 404 Not Found\r\nRetry-After:  5 \r\nX-Thing: b\r\nContent-Length: 5\r\n\r\nhello");
  const OutboundResult r = PerformOutbound(Get(peer.url()));
  ASSERT_EQ(r.code, CURLE_OK) << r.error;
  EXPECT_EQ(r.answer.status, 404);
  EXPECT_EQ(r.answer.Header("retry-after"), "5");
  EXPECT_EQ(r.answer.Header("x-thing"), "b");
  EXPECT_EQ(r.answer.Header("missing"), "");
  EXPECT_EQ(r.answer.body, "hello");
  ASSERT_EQ(peer.requests().size(), 1u);
  EXPECT_TRUE(absl::StartsWith(peer.requests()[0], "GET /path?q=1 HTTP/1.1\r\n"));
}

TEST(HttpClientTest, APostCarriesItsBodyTypeHeadersAndCredentialsWithoutAContinueWait) {
  Peer peer("HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n");
  OutboundRequest r;
  r.url = peer.url();
  r.body = std::string(2 << 20, 'x');  // past libcurl's threshold for "Expect: 100-continue"
  r.headers = {"X-Api-Key: k1"};
  r.basic_auth = "user:pass";
  CURL* c = curl_easy_init();
  int performed = 0;
  const OutboundResult out = PerformOutbound(c, r, [&performed](CURL* easy) {
    ++performed;
    return curl_easy_perform(easy);
  });
  curl_easy_cleanup(c);
  ASSERT_EQ(out.code, CURLE_OK) << out.error;
  EXPECT_EQ(performed, 1);
  EXPECT_EQ(out.answer.status, 202);
  const std::vector<std::string> requests = peer.requests();
  ASSERT_EQ(requests.size(), 1u);
  const std::string& sent = requests[0];
  EXPECT_TRUE(absl::StartsWith(sent, "POST /path?q=1 HTTP/1.1\r\n"));
  EXPECT_THAT(sent, HasSubstr("\r\nContent-Type: application/json\r\n"));
  EXPECT_THAT(sent, HasSubstr("\r\nX-Api-Key: k1\r\n"));
  EXPECT_THAT(sent, HasSubstr("\r\nAuthorization: Basic dXNlcjpwYXNz\r\n"));
  EXPECT_THAT(sent, HasSubstr(absl::StrCat("\r\nContent-Length: ", 2 << 20, "\r\n")));
  EXPECT_THAT(sent, Not(HasSubstr("Expect:")));
  EXPECT_EQ(sent.substr(sent.find("\r\n\r\n") + 4), r.body);
}

TEST(HttpClientTest, ALongBodyIsCutOrEndsTheTransfer) {
  Peer peer(absl::StrCat("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", std::string(100, 'a')));
  OutboundRequest r = Get(peer.url());
  r.max_body = 10;
  OutboundResult cut = PerformOutbound(r);
  ASSERT_EQ(cut.code, CURLE_OK) << cut.error;
  EXPECT_EQ(cut.answer.body, std::string(10, 'a'));
  EXPECT_FALSE(cut.body_too_large);

  r.long_body = OutboundRequest::LongBody::kFail;
  OutboundResult failed = PerformOutbound(r);
  EXPECT_EQ(failed.code, CURLE_WRITE_ERROR);
  EXPECT_TRUE(failed.body_too_large);
  r.max_body = 100;
  EXPECT_EQ(PerformOutbound(r).answer.body, std::string(100, 'a'));
}

TEST(HttpClientTest, OnlyTheRequestsProtocolsAndNoRedirect) {
  Peer peer("HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n");
  OutboundRequest r = Get(peer.url());
  r.protocols = "https";
  EXPECT_EQ(PerformOutbound(r).code, CURLE_UNSUPPORTED_PROTOCOL);
  EXPECT_TRUE(peer.requests().empty());

  r.protocols = "http,https";
  const OutboundResult redirected = PerformOutbound(r);
  ASSERT_EQ(redirected.code, CURLE_OK) << redirected.error;
  EXPECT_EQ(redirected.answer.status, 302);
  EXPECT_EQ(peer.requests().size(), 1u);
}

TEST(HttpClientTest, TheTimeoutBoundsTheWholeTransfer) {
  Peer silent("");
  OutboundRequest r = Get(silent.url());
  r.timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  const OutboundResult out = PerformOutbound(r);
  EXPECT_EQ(out.code, CURLE_OPERATION_TIMEDOUT);
  EXPECT_EQ(out.answer.status, 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(HttpClientTest, NoCredentialInTheResult) {
  // A closed port: the transfer fails, with libcurl's words.
  int port = 0;
  {
    Peer gone("x");
    port = gone.port();
  }
  OutboundRequest r;
  r.url = absl::StrCat("http://127.0.0.1:", port, "/send?key=secret-in-query");
  r.headers = {"Authorization: Bearer secret-token"};
  r.basic_auth = "user:secret-password";
  r.body = "secret-body";
  const OutboundResult out = PerformOutbound(r);
  EXPECT_EQ(out.code, CURLE_COULDNT_CONNECT);
  EXPECT_THAT(out.error, Not(HasSubstr("secret")));
  EXPECT_THAT(out.answer.body, Not(HasSubstr("secret")));
}

}  // namespace
}  // namespace mailroom
