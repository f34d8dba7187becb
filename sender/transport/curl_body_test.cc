#include "sender/transport/curl_body.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "sender/transport/curl_handle.h"

namespace mailroom {
namespace {

// An HTTP/1.1 peer on 127.0.0.1 that keeps connections alive and answers every request 200,
// except the request numbered `drop` (counting from 1 over all connections): that one it reads
// in full and then closes its connection without a byte of answer.
class DroppingPeer {
 public:
  explicit DroppingPeer(int drop) : drop_(drop) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(listen(fd_, 8), 0);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~DroppingPeer() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_, "/send"); }
  std::vector<std::string> bodies() {
    absl::MutexLock lock(&mu_);
    return bodies_;
  }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int conn = accept(fd_, nullptr, nullptr);
      if (conn < 0) continue;
      std::string in;
      for (;;) {
        std::string body;
        if (!ReadRequest(conn, &in, &body)) break;
        int n;
        {
          absl::MutexLock lock(&mu_);
          bodies_.push_back(body);
          n = static_cast<int>(bodies_.size());
        }
        if (n == drop_) break;
        const std::string answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        if (write(conn, answer.data(), answer.size()) < 0) break;
      }
      close(conn);
    }
  }
  // Reads one request (headers and a Content-Length body) from `conn`; false at the end.
  bool ReadRequest(int conn, std::string* in, std::string* body) {
    char buf[4096];
    size_t end;
    while ((end = in->find("\r\n\r\n")) == std::string::npos) {
      const ssize_t r = read(conn, buf, sizeof buf);
      if (r <= 0) return false;
      in->append(buf, r);
    }
    size_t length = 0;
    const size_t at = in->find("Content-Length: ");
    if (at != std::string::npos && at < end) {
      (void)absl::SimpleAtoi(in->substr(at + 16, in->find("\r\n", at) - at - 16), &length);
    }
    while (in->size() < end + 4 + length) {
      const ssize_t r = read(conn, buf, sizeof buf);
      if (r <= 0) return false;
      in->append(buf, r);
    }
    *body = in->substr(end + 4, length);
    in->erase(0, end + 4 + length);
    return true;
  }

  const int drop_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  std::vector<std::string> bodies_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
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
