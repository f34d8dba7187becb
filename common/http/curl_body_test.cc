#include "common/http/curl_body.h"

#include <string>
#include <vector>

#include "common/http/curl_handle.h"
#include "common/http/testing/http_peer.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

// An HTTP/1.1 peer on 127.0.0.1 that keeps connections alive and answers every request 200,
// except the request numbered `drop` (counting from 1 over all connections): that one it reads
// in full and then closes its connection without a byte of answer.
class DroppingPeer : public http_testing::HttpPeer {
 public:
  explicit DroppingPeer(int drop)
      : HttpPeer("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", /*keep_alive=*/true, drop) {}
};

// POSTs `body` to `url` on `c` (its connection kept for the next call): through a CurlBody, or
// as CURLOPT_POSTFIELDS.
CURLcode Post(CURL* c, const std::string& url, const std::string& body, bool curl_body) {
  CurlBody reader(body);
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
  curl_easy_setopt(
      c, CURLOPT_WRITEFUNCTION, +[](char*, size_t s, size_t n, void*) { return s * n; });
  if (curl_body) {
    reader.Attach(c);
  } else {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }
  const CURLcode rc = curl_easy_perform(c);
  EXPECT_EQ(reader.started(), curl_body);
  return rc;
}

TEST(CurlBodyTest, TheBodyGoesOutWhole) {
  CurlGlobalInit();
  DroppingPeer peer(/*drop=*/0);
  CurlHandle c(curl_easy_init());
  const std::string big(200 * 1024, 'x');  // more than one read of libcurl's
  ASSERT_EQ(Post(c.get(), peer.url(), "{\"n\": 1}", true), CURLE_OK);
  ASSERT_EQ(Post(c.get(), peer.url(), big, true), CURLE_OK);
  long connects = 0;
  curl_easy_getinfo(c.get(), CURLINFO_NUM_CONNECTS, &connects);
  EXPECT_EQ(connects, 0);  // the second request rode the first's connection
  EXPECT_EQ(peer.bodies(), (std::vector<std::string>{"{\"n\": 1}", big}));
}

TEST(CurlBodyTest, AKeptAliveConnectionClosedUnansweredIsNotSentAgain) {
  CurlGlobalInit();
  DroppingPeer peer(/*drop=*/2);
  CurlHandle c(curl_easy_init());
  ASSERT_EQ(Post(c.get(), peer.url(), "first", true), CURLE_OK);
  EXPECT_EQ(Post(c.get(), peer.url(), "second", true), CURLE_SEND_FAIL_REWIND);
  EXPECT_EQ(peer.bodies(), (std::vector<std::string>{"first", "second"}));
}

// What CurlBody prevents: with CURLOPT_POSTFIELDS libcurl sends the dropped request again on a
// fresh connection and reports success, the peer having received it twice.
TEST(CurlBodyTest, PostFieldsWouldBeSentTwice) {
  CurlGlobalInit();
  DroppingPeer peer(/*drop=*/2);
  CurlHandle c(curl_easy_init());
  ASSERT_EQ(Post(c.get(), peer.url(), "first", false), CURLE_OK);
  EXPECT_EQ(Post(c.get(), peer.url(), "second", false), CURLE_OK);
  EXPECT_EQ(peer.bodies(), (std::vector<std::string>{"first", "second", "second"}));
}

}  // namespace
}  // namespace mailroom
