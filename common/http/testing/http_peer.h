#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace mailroom::http_testing {

// An HTTP/1.1 peer for tests on 127.0.0.1 (port 0). It answers each request with `answer` and
// closes the connection, or with `keep_alive` reads the connection's next request after
// answering; with an empty `answer` it reads the request and keeps the connection open,
// silent, until destroyed. The request numbered `drop` (counting from 1 over all connections;
// 0: none) it reads in full and then closes its connection without a byte of answer. Requests
// are read whole (head and a Content-Length body), one connection at a time. Thread-safe.
class HttpPeer {
 public:
  explicit HttpPeer(std::string answer, bool keep_alive = false, int drop = 0)
      : answer_(std::move(answer)), keep_alive_(keep_alive), drop_(drop) {
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
  ~HttpPeer() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  // A URL of the peer: `scheme`://127.0.0.1:port/path?q=1.
  std::string url(const std::string& scheme = "http") const {
    return absl::StrCat(scheme, "://127.0.0.1:", port_, "/path?q=1");
  }
  int port() const { return port_; }
  // The requests received, each its head and body as sent.
  std::vector<std::string> requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  // The bodies of the requests received.
  std::vector<std::string> bodies() {
    std::vector<std::string> out;
    for (const std::string& r : requests()) out.push_back(r.substr(r.find("\r\n\r\n") + 4));
    return out;
  }

 private:
  void Serve() {
    std::vector<int> held;
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int conn = accept(fd_, nullptr, nullptr);
      if (conn < 0) continue;
      if (Converse(conn)) {
        held.push_back(conn);
      } else {
        close(conn);
      }
    }
    for (int conn : held) close(conn);
  }
  // Reads and answers the requests of `conn`; true when it is to be held open, silent.
  bool Converse(int conn) {
    std::string in;
    for (;;) {
      std::string request;
      if (!ReadRequest(conn, &in, &request)) return false;
      int n;
      {
        absl::MutexLock lock(&mu_);
        requests_.push_back(request);
        n = static_cast<int>(requests_.size());
      }
      if (n == drop_) return false;
      if (answer_.empty()) return true;
      if (write(conn, answer_.data(), answer_.size()) < 0 || !keep_alive_) return false;
    }
  }
  // Takes one request (its head and a Content-Length body) off `in`, read from `conn` as
  // needed, into `request`; false at the end of the connection.
  static bool ReadRequest(int conn, std::string* in, std::string* request) {
    char buf[65536];
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
    *request = in->substr(0, end + 4 + length);
    in->erase(0, end + 4 + length);
    return true;
  }

  const std::string answer_;
  const bool keep_alive_;
  const int drop_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  std::vector<std::string> requests_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace mailroom::http_testing
