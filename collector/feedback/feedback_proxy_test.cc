// The feedback endpoint behind the TLS proxy it ships with (deploy/nginx/feedback.conf, run by
// Debian's nginx on 127.0.0.1 with a throwaway certificate): slow and oversized requests are
// held or refused by the proxy, never reach the endpoint, and a signed report from another
// client is still answered at once. The endpoint's own defences (feedback_server_test) stay.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "collector/feedback/feedback_server.h"
#include "collector/feedback/provider_feedback.h"
#include "collector/feedback/testing/provider_samples.h"
#include "collector/feedback/testing/provider_signer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/migrated_database.h"
#include "testing/process.h"

namespace mailroom {
namespace {

constexpr char kSecret[] = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// One TLS connection to the proxy from `source` (a loopback address of its own: the proxy's
// limits are per client address).
class TlsClient {
 public:
  TlsClient(SSL_CTX* ctx, int port, const char* source) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    inet_pton(AF_INET, source, &from.sin_addr);
    bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof(from));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
    ssl_ = SSL_new(ctx);
    SSL_set_fd(ssl_, fd_);
    EXPECT_EQ(SSL_connect(ssl_), 1);
  }
  ~TlsClient() {
    SSL_free(ssl_);
    close(fd_);
  }
  void Send(const std::string& s) { SSL_write(ssl_, s.data(), static_cast<int>(s.size())); }
  // Whether the proxy answered or closed the connection (without waiting). TLS 1.3 session
  // tickets make the socket readable too: a non-blocking peek reads past them.
  bool Answered() {
    const int flags = fcntl(fd_, F_GETFL);
    fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
    char c;
    const int got = SSL_peek(ssl_, &c, 1);
    const int error = SSL_get_error(ssl_, got);
    fcntl(fd_, F_SETFL, flags);
    return got > 0 || error != SSL_ERROR_WANT_READ;
  }
  // The first bytes the proxy sends within `limit` ("" when none).
  std::string FirstBytes(absl::Duration limit) {
    const timeval t = absl::ToTimeval(limit);
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof(t));
    char buf[512];
    const int got = SSL_read(ssl_, buf, sizeof(buf));
    return got > 0 ? std::string(buf, got) : "";
  }
  // What the proxy sends until it closes the connection, or `limit` passes.
  std::string ReadUntilClosed(absl::Duration limit) {
    const timeval t = absl::ToTimeval(limit);
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof(t));
    std::string out;
    char buf[512];
    int got;
    while ((got = SSL_read(ssl_, buf, sizeof(buf))) > 0) out.append(buf, got);
    return out;
  }

 private:
  int fd_ = -1;
  SSL* ssl_ = nullptr;
};

class FeedbackProxyTest : public testing::MigratedDatabaseTest {
 protected:
  void SetUp() override {
    MigratedDatabaseTest::SetUp();
    if (HasFatalFailure()) return;
    dir_ = getenv("TEST_TMPDIR");
    store_ = NewPgFeedbackStore(url_);
    ProviderFeedbackOptions o;
    o.http_keys = *ParseWebhookSecrets(kSecret);
    handler_ = std::make_unique<ProviderFeedbackHandler>(o, store_.get(), 3, &metrics_);
    routes_ = std::make_unique<FeedbackRoutes>(nullptr, handler_.get());
    ASSERT_TRUE(server_.Start("127.0.0.1:0", routes_.get()).ok());  // production limits
    StartProxy();
    ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_load_verify_locations(ctx_, (dir_ + "/proxy.crt").c_str(), nullptr);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
  }
  void TearDown() override {
    proxy_.reset();
    server_.Stop();
    if (ctx_ != nullptr) SSL_CTX_free(ctx_);
  }

  // nginx with deploy/nginx/feedback.conf as shipped, but for its port and certificate.
  void StartProxy() {
    ASSERT_EQ(std::system(
                  absl::StrCat("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
                               "-nodes -subj /CN=localhost -days 1 -addext "
                               "subjectAltName=IP:127.0.0.1 -keyout ",
                               dir_, "/proxy.key -out ", dir_, "/proxy.crt 2>/dev/null")
                      .c_str()),
              0);
    port_ = testing::FreePort();
    const std::string shipped = Slurp(testing::Runfile("mailroom/deploy/nginx/feedback.conf"));
    ASSERT_THAT(shipped, ::testing::HasSubstr("listen 8443 ssl;"));
    std::ofstream(dir_ + "/feedback.conf") << absl::StrReplaceAll(
        shipped, {{"listen 8443 ssl;", absl::StrCat("listen 127.0.0.1:", port_, " ssl;")},
                  {"/etc/mailroom/feedback-tls/tls.crt", dir_ + "/proxy.crt"},
                  {"/etc/mailroom/feedback-tls/tls.key", dir_ + "/proxy.key"}});
    std::ofstream(dir_ + "/nginx.conf")
        << absl::StrCat("pid ", dir_, "/nginx.pid;\nerror_log ", dir_,
                        "/nginx.log warn;\nuser root;\n",
                        "events { worker_connections 1024; }\nhttp {\n  access_log off;\n",
                        "  client_body_temp_path ", dir_, "/body;\n  proxy_temp_path ", dir_,
                        "/proxy;\n", "  fastcgi_temp_path ", dir_, "/fastcgi;\n  uwsgi_temp_path ",
                        dir_, "/uwsgi;\n", "  scgi_temp_path ", dir_, "/scgi;\n",
                        "  upstream mailroom_feedback { server 127.0.0.1:", server_.port(), "; }\n",
                        "  include ", dir_, "/feedback.conf;\n}\n");
    auto p = testing::Process::Spawn({"/usr/sbin/nginx", "-p", dir_, "-c", dir_ + "/nginx.conf",
                                      "-e", dir_ + "/nginx.log", "-g", "daemon off;"},
                                     {}, dir_ + "/nginx.out");
    ASSERT_TRUE(p.ok()) << p.status();
    proxy_ = *std::move(p);
    // Ready once it accepts connections.
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (Post("127.0.0.1", "/", "").first == 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    ASSERT_EQ(Post("127.0.0.1", "/", "").first, 404) << Slurp(dir_ + "/nginx.log");
  }

  // POSTs `body` to the proxy's `path` from `source`; its status (0: no answer) and body.
  std::pair<long, std::string> Post(const char* source, const std::string& path,
                                    const std::string& body,
                                    const std::vector<std::string>& headers = {}) {
    auto a = testing::PostWebhook(absl::StrCat("https://127.0.0.1:", port_, path), body, headers,
                                  dir_ + "/proxy.crt", source);
    return {a.status, a.body};
  }

  // A signed bounce report posted from 127.0.0.2; expects it taken and returns how long the
  // answer took.
  absl::Duration TimedReport(const std::string& beside) {
    static int n = 0;
    const std::string id = absl::StrCat("evt_", ++n);
    const std::string body = absl::StrReplaceAll(testing::kHttpReportBounced,
                                                 {{"bob@", absl::StrCat("bob", n, "@")}});
    const absl::Time start = absl::Now();
    auto [status, answer] = Post("127.0.0.2", "/feedback/http", body,
                                 testing::StandardWebhookHeaders("webhook-", kSecret, id, body,
                                                                 absl::Now()));
    const absl::Duration took = absl::Now() - start;
    EXPECT_EQ(status, 200) << answer;
    EXPECT_EQ(Int(absl::StrCat("SELECT count(*) FROM sns_messages WHERE message_id = 'http:", id,
                               "'")),
              1);
    std::cout << "answered through the proxy in " << absl::ToInt64Milliseconds(took)
              << " ms beside " << beside << "\n";
    return took;
  }

  std::string dir_;
  int port_ = 0;
  Metrics metrics_;
  std::unique_ptr<FeedbackStore> store_;
  std::unique_ptr<ProviderFeedbackHandler> handler_;
  std::unique_ptr<FeedbackRoutes> routes_;
  FeedbackServer server_;
  std::unique_ptr<testing::Process> proxy_;
  SSL_CTX* ctx_ = nullptr;
};

// 30 clients from one address declare a 16 KiB body and trickle it: the proxy takes 20 (its
// per-client limit) and answers the other 10 with 503; those it takes it holds itself, so the
// endpoint holds no byte of them, and a report from another client is answered at once.
TEST_F(FeedbackProxyTest, SlowClientsAreHeldByTheProxyAndLimitedPerAddress) {
  std::vector<std::unique_ptr<TlsClient>> slow;
  for (int i = 0; i < 30; ++i) {
    slow.push_back(std::make_unique<TlsClient>(ctx_, port_, "127.0.0.1"));
    slow.back()->Send(
        "POST /feedback/http HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 16384\r\n\r\n{");
  }
  auto answered = [&] {
    return std::count_if(slow.begin(), slow.end(), [](auto& c) { return c->Answered(); });
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (answered() < 10 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  for (auto& c : slow) c->Send(" ");
  EXPECT_LT(TimedReport("20 trickling clients held by the proxy"), absl::Seconds(2));
  EXPECT_EQ(answered(), 10);
  int refused = 0;
  for (auto& c : slow) {
    if (c->Answered()) {
      EXPECT_THAT(c->ReadUntilClosed(absl::Seconds(1)),
                  ::testing::StartsWith("HTTP/1.1 503 Service Temporarily Unavailable"));
      ++refused;
    }
  }
  EXPECT_EQ(refused, 10);
  EXPECT_EQ(server_.buffered_bytes(), 0u);
  EXPECT_EQ(Int("SELECT count(*) FROM sns_messages"), 1);
}

// A body over 256 KiB is refused by the proxy (413) as soon as its headers say so; the
// endpoint never sees it, and nothing is recorded.
TEST_F(FeedbackProxyTest, AnOversizedBodyIsRefusedByTheProxyAtOnce) {
  TlsClient big(ctx_, port_, "127.0.0.1");
  const absl::Time start = absl::Now();
  big.Send("POST /feedback/http HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 262145\r\n\r\n{");
  const std::string answer = big.FirstBytes(absl::Seconds(5));
  EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 413 Request Entity Too Large")) << answer;
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));  // (nginx then lingers, reading, for 5 s)
  // Exactly the endpoint's largest body passes the proxy (and the signature check refuses it).
  const std::string largest(256 * 1024, ' ');
  EXPECT_EQ(Post("127.0.0.1", "/feedback/http", largest).first, 403);
  EXPECT_EQ(Post("127.0.0.1", "/feedback/http", largest + " ").first, 413);
  EXPECT_EQ(server_.buffered_bytes(), 0u);
  EXPECT_EQ(Int("SELECT count(*) FROM sns_messages"), 0);
  // Only POSTs to the feedback paths are passed on.
  EXPECT_EQ(Post("127.0.0.1", "/metrics", "").first, 404);
}

// A client that stops sending its body is closed by the proxy 10 s after its last byte
// (client_body_timeout), never reaching the endpoint; a report is answered meanwhile.
TEST_F(FeedbackProxyTest, AStalledClientIsClosedByTheProxy) {
  TlsClient stalled(ctx_, port_, "127.0.0.1");
  const absl::Time start = absl::Now();
  stalled.Send("POST /feedback/http HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{");
  EXPECT_LT(TimedReport("a stalled client"), absl::Seconds(2));
  stalled.ReadUntilClosed(absl::Seconds(15));
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Seconds(10));
  EXPECT_LT(took, absl::Seconds(12));
  EXPECT_EQ(server_.buffered_bytes(), 0u);
}

}  // namespace
}  // namespace mailroom
