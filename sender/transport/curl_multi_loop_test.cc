// The multi-interface loop against a real SMTP server (aiosmtpd) and HTTP server (the SES
// emulator): many threads at once, each with its own result, connections kept in the loop, and
// destruction idle, after transfers and with a transfer in flight.
#include "sender/transport/curl_multi_loop.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/http/curl_handle.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sender/transport/testing/transport_peers.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;
using transport_testing::Email;
using transport_testing::Slurp;
using transport_testing::TransportTest;

size_t ReadBody(char* buf, size_t size, size_t nitems, void* userdata) {
  auto* body = static_cast<std::string*>(userdata);
  size_t n = std::min(size * nitems, body->size());
  std::memcpy(buf, body->data(), n);
  body->erase(0, n);
  return n;
}

// One plain SMTP message to `to` on its own easy handle; Perform() runs it through `loop`.
class Mail {
 public:
  explicit Mail(std::string url) : url_(std::move(url)), handle_(curl_easy_init()) {}

  CURLcode Perform(CurlMultiLoop& loop, const std::string& to, int n) {
    CURL* c = handle_.get();
    curl_easy_reset(c);
    body_ = Email(to, n).mime;
    error_[0] = '\0';
    CurlSlist rcpt(curl_slist_append(nullptr, absl::StrCat("<", to, ">").c_str()));
    curl_easy_setopt(c, CURLOPT_URL, url_.c_str());
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error_);
    curl_easy_setopt(c, CURLOPT_MAIL_FROM, "<no-reply@example.test>");
    curl_easy_setopt(c, CURLOPT_MAIL_RCPT, rcpt.get());
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, ReadBody);
    curl_easy_setopt(c, CURLOPT_READDATA, &body_);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 60000L);
    CURLcode rc = loop.Perform(c);
    long connects = 0;
    curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &connects);
    connects_ += connects;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &reply_);
    return rc;
  }
  long reply() const { return reply_; }
  std::string error() const { return error_; }
  long connects() const { return connects_; }

 private:
  const std::string url_;
  CurlHandle handle_;
  std::string body_;
  char error_[CURL_ERROR_SIZE] = {0};
  long reply_ = 0;
  long connects_ = 0;
};

TEST_F(TransportTest, LoopThreadsShareItsConnections) {
  constexpr int kThreads = 4, kMessages = 10;
  int port = StartSmtp({});
  // aiosmtpd's controller connects once to itself before it is ready.
  const int before = std::stoi(Slurp(dir_ + "/smtp/connections"));
  CurlMultiLoop loop(kThreads);
  std::vector<Mail> mails;
  mails.reserve(kThreads);
  for (int w = 0; w < kThreads; ++w) mails.emplace_back(absl::StrCat("smtp://127.0.0.1:", port));
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < kMessages; ++i) {
        if (mails[w].Perform(loop, "p@example.test", w * 100 + i) == CURLE_OK &&
            mails[w].reply() == 250) {
          ++ok;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, kThreads * kMessages);
  EXPECT_EQ(Recorded(), static_cast<size_t>(kThreads * kMessages));
  // The connections stay in the loop between messages, whichever handle sends next.
  long connects = 0;
  for (const auto& m : mails) connects += m.connects();
  EXPECT_LE(connects, kThreads);
  EXPECT_LE(std::stoi(Slurp(dir_ + "/smtp/connections")) - before, kThreads);
}

size_t Discard(char*, size_t size, size_t nmemb, void*) { return size * nmemb; }

TEST_F(TransportTest, LoopKeepsHttpConnectionsAlive) {
  if (NodeModules().empty()) GTEST_SKIP() << "MAILROOM_NODE_MODULES not set (run .ci/test)";
  constexpr int kThreads = 2, kRequests = 10;
  const std::string url = StartSes(0, /*direct=*/true) + "/store";
  CurlMultiLoop loop(kThreads);
  std::atomic<int> ok{0};
  std::atomic<long> connects{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&] {
      CurlHandle handle(curl_easy_init());
      CURL* c = handle.get();
      for (int i = 0; i < kRequests; ++i) {
        curl_easy_reset(c);
        curl_easy_setopt(c, CURLOPT_URL, url.c_str());
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, Discard);
        long http = 0, opened = 0;
        if (loop.Perform(c) == CURLE_OK &&
            curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http) == CURLE_OK && http == 200) {
          ++ok;
        }
        curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &opened);
        connects += opened;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, kThreads * kRequests);
  EXPECT_LE(connects, kThreads);
}

TEST_F(TransportTest, LoopGivesEachTransferItsOwnResult) {
  constexpr int kThreads = 6, kMessages = 5;
  int port = StartSmtp({"--reject-rcpt", "bounce"});
  const std::string good = absl::StrCat("smtp://127.0.0.1:", port);
  const std::string closed = absl::StrCat("smtp://127.0.0.1:", ::mailroom::testing::FreePort());
  CurlMultiLoop loop(kThreads);
  std::vector<std::thread> threads;
  std::vector<std::vector<std::string>> wrong(kThreads);
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      // Thread kinds: delivered, recipient refused (curl 55 with the 550 reply), no server.
      const int kind = w % 3;
      Mail mail(kind == 2 ? closed : good);
      for (int i = 0; i < kMessages; ++i) {
        CURLcode rc = mail.Perform(loop, kind == 1 ? "bounce@example.test" : "a@example.test", i);
        std::string got = absl::StrCat(rc, " ", mail.reply(), " ", mail.error());
        if (kind == 0 && (rc != CURLE_OK || mail.reply() != 250)) wrong[w].push_back(got);
        if (kind == 1 && (rc != CURLE_SEND_ERROR || mail.reply() != 550 ||
                          mail.error().find("RCPT") == std::string::npos)) {
          wrong[w].push_back(got);
        }
        if (kind == 2 && (rc != CURLE_COULDNT_CONNECT || mail.error().empty())) {
          wrong[w].push_back(got);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < kThreads; ++w) EXPECT_THAT(wrong[w], ::testing::IsEmpty()) << "thread " << w;
  EXPECT_EQ(Recorded(), static_cast<size_t>(2 * kMessages));
}

TEST_F(TransportTest, LoopDestroyedIdleAndRightAfterTransfers) {
  { CurlMultiLoop never_used(2); }
  int port = StartSmtp({});
  Mail a(absl::StrCat("smtp://127.0.0.1:", port)), b(absl::StrCat("smtp://127.0.0.1:", port));
  CURLcode ra = CURLE_OK, rb = CURLE_OK;
  {
    CurlMultiLoop loop(2);
    std::thread ta([&] { ra = a.Perform(loop, "a@example.test", 1); });
    std::thread tb([&] { rb = b.Perform(loop, "b@example.test", 2); });
    ta.join();
    tb.join();
  }  // the two connections are closed here, with the handles still alive
  EXPECT_EQ(ra, CURLE_OK) << a.error();
  EXPECT_EQ(rb, CURLE_OK) << b.error();
  EXPECT_EQ(Recorded(), 2u);
  // The handles work on a new loop (which opens its own connections).
  CurlMultiLoop again(1);
  EXPECT_EQ(a.Perform(again, "c@example.test", 3), CURLE_OK) << a.error();
  EXPECT_EQ(Recorded(), 3u);
}

// A server that accepts connections and never says a word: the transfer waits for a greeting.
class SilentServer {
 public:
  SilentServer() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), len), 0);
    EXPECT_EQ(listen(fd_, 4), 0);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
  }
  ~SilentServer() {
    if (client_ >= 0) close(client_);
    close(fd_);
  }
  int port() const { return port_; }
  // What the client sent until it closed the connection (up to 30 s).
  std::string ReadToEnd() {
    std::string got;
    char buf[512];
    pollfd p{client_, POLLIN, 0};
    while (poll(&p, 1, 30000) == 1) {
      ssize_t n = read(client_, buf, sizeof(buf));
      if (n <= 0) return got;
      got.append(buf, n);
    }
    return got + "(still open)";
  }
  // Waits up to 30 s for a client to connect.
  bool Accept() {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 30000) != 1) return false;
    client_ = accept(fd_, nullptr, nullptr);
    return client_ >= 0;
  }

 private:
  int fd_, port_ = 0, client_ = -1;
};

TEST_F(TransportTest, LoopDestroyedWithATransferInFlightEndsIt) {
  SilentServer server;
  Mail mail(absl::StrCat("smtp://127.0.0.1:", server.port()));
  std::optional<CurlMultiLoop> loop(std::in_place, 1);
  CURLcode rc = CURLE_OK;
  std::thread t([&] { rc = mail.Perform(*loop, "a@example.test", 1); });
  ASSERT_TRUE(server.Accept());
  loop.reset();
  t.join();
  EXPECT_EQ(rc, CurlMultiLoop::kStopped);
  EXPECT_EQ(server.ReadToEnd(), "");  // closed without a word (no QUIT to wait for)
}

}  // namespace
}  // namespace mailroom
