// The feedback endpoint over real HTTP on loopback (libcurl), with messages signed by a
// throwaway CA (testing/sns_signer) and a real PostgreSQL behind the FeedbackStore.
#include "collector/feedback/feedback_server.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <pqxx/pqxx>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "collector/feedback/https_get.h"
#include "collector/feedback/testing/sns_signer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/migrated_database.h"
#include "testing/pg_server.h"
#include "testing/process.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;

// The endpoint's largest body in these tests.
constexpr size_t kMaxBody = 16 * 1024;

constexpr char kCertPath[] = "/SimpleNotificationService-0123456789abcdef0123456789abcdef.pem";
const std::string kCertUrl = absl::StrCat("https://sns.us-east-1.amazonaws.com", kCertPath);

size_t Collect(char* p, size_t s, size_t n, void* out) {
  static_cast<std::string*>(out)->append(p, s * n);
  return s * n;
}

struct Answer {
  long status = 0;
  std::string body;
  std::string headers;
};

Answer Http(const std::string& method, const std::string& url, const std::string& body) {
  Answer a;
  CURL* c = curl_easy_init();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  if (method == "POST") {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &a.body);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, Collect);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &a.headers);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
  if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a.status);
  curl_easy_cleanup(c);
  return a;
}

class FeedbackServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = testing::PgServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    pg_ = server->release();
    signer_ = new testing::SnsSigner;
    ca_file_ = std::string(getenv("TEST_TMPDIR")) + "/ca.pem";
    FILE* f = fopen(ca_file_.c_str(), "w");
    fputs(signer_->ca_pem().c_str(), f);
    fclose(f);
  }
  static void TearDownTestSuite() {
    delete signer_;
    delete pg_;
  }
  void SetUp() override {
    static int n = 0;
    auto url = pg_->CreateDatabase(absl::StrCat("endpoint_", ++n));
    ASSERT_TRUE(url.ok()) << url.status();
    ASSERT_TRUE(testing::MigrateAll(*url).ok());
    conn_ = std::make_unique<pqxx::connection>(*url);
    store_ = NewPgFeedbackStore(*url);
    SnsVerifierOptions o;
    o.ca_file = ca_file_;
    o.topic_arns = {testing::kTopicArn};
    verifier_ = std::make_unique<SnsVerifier>(
        o, [this](const std::string&) -> absl::StatusOr<std::string> {
          ++fetches_;
          return signer_->cert_pem();
        });
    handler_ = std::make_unique<FeedbackHandler>(
        verifier_.get(), store_.get(),
        [this](const std::string& url) -> absl::StatusOr<std::string> {
          confirmed_.push_back(url);
          return std::string("<ConfirmSubscriptionResponse/>");
        },
        std::vector<std::string>{}, 3, &metrics_, /*suppress_unmatched=*/false);
    FeedbackServerOptions server_options;  // production workers and request timeout
    server_options.max_body = kMaxBody;
    ASSERT_TRUE(server_.Start("127.0.0.1:0", handler_.get(), server_options).ok());
    url_ = absl::StrCat("http://127.0.0.1:", server_.port(), "/sns");
  }
  absl::Duration TimedNotification(const std::string& clients);
  std::string Text(const std::string& sql) {
    pqxx::nontransaction tx(*conn_);
    return tx.exec1(sql)[0].as<std::string>();
  }
  // An account `email` whose activation group "mailroom" leased and acknowledged SENT with SES
  // message id `ses_id`, as the collector records it (mailroom_ack).
  void SentTo(const std::string& email, const std::string& ses_id) {
    // Each statement its own transaction: a dequeue hands out committed tokens only.
    pqxx::nontransaction tx(*conn_);
    tx.exec("SELECT mailroom_ensure_group('mailroom', true)");
    tx.exec_params("INSERT INTO accounts (email, login) VALUES ($1, $1)", email);
    tx.exec("SELECT mailroom_collect_signups(2147483647)");
    pqxx::row job = tx.exec1(
        "SELECT job_id, attempt FROM mailroom_dequeue('mailroom', 1, 's', 60000)");
    tx.exec_params1(
        "SELECT count(*) FROM mailroom_ack('mailroom', 's', ARRAY[$1::bigint], ARRAY[$2::int],"
        " ARRAY['sent'], ARRAY[''], ARRAY[0], ARRAY[0::bigint], ARRAY[$3::text])",
        job[0].as<int64_t>(), job[1].as<int>(), ses_id);
  }
  static std::string BounceFor(const std::string& to) {
    return absl::StrCat(R"({"eventType":"Bounce","bounce":{"bounceType":"Permanent",)",
                        R"("bounceSubType":"General","bouncedRecipients":[{"emailAddress":")", to,
                        R"("}]},"mail":{"messageId":"ses-1"}})");
  }

  static testing::PgServer* pg_;
  static testing::SnsSigner* signer_;
  static std::string ca_file_;
  std::unique_ptr<pqxx::connection> conn_;
  std::unique_ptr<FeedbackStore> store_;
  std::unique_ptr<SnsVerifier> verifier_;
  Metrics metrics_;
  std::unique_ptr<FeedbackHandler> handler_;
  std::vector<std::string> confirmed_;
  std::atomic<int> fetches_{0};
  FeedbackServer server_;
  std::string url_;
};
testing::PgServer* FeedbackServerTest::pg_ = nullptr;
testing::SnsSigner* FeedbackServerTest::signer_ = nullptr;
std::string FeedbackServerTest::ca_file_;

TEST_F(FeedbackServerTest, ASignedBounceIsRecordedOnceAForgedOneChangesNothing) {
  SnsMessage forged = signer_->Notification("sns-f", BounceFor("victim@example.test"), kCertUrl,
                                            absl::Now());
  forged.message = BounceFor("other@example.test");
  Answer f = Http("POST", url_, testing::SnsSigner::Body(forged));
  EXPECT_EQ(f.status, 403);
  EXPECT_THAT(f.body, HasSubstr("signature does not match"));
  EXPECT_EQ(Text("SELECT count(*) FROM suppressions"), "0");
  EXPECT_EQ(Text("SELECT count(*) FROM sns_messages"), "0");

  SnsMessage good = signer_->Notification("sns-1", BounceFor("gone@example.test"), kCertUrl,
                                          absl::Now(), 1);
  Answer ok = Http("POST", url_, testing::SnsSigner::Body(good));
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(ok.body, "unmatched\n");  // no delivery with that SES id in this database
  // An event about no delivery of ours suppresses nothing (without the operator's opt-in).
  EXPECT_EQ(Text("SELECT count(*) FROM suppressions"), "0");
  EXPECT_EQ(Text("SELECT count(*) FROM sns_messages"), "1");
  EXPECT_EQ(metrics_.Value("mailroom_collector_feedback_unmatched_total",
                           {{"provider", "ses"}, {"reason", "no_delivery"}}),
            1);
  Answer again = Http("POST", url_, testing::SnsSigner::Body(good));
  EXPECT_EQ(again.status, 200);
  EXPECT_EQ(again.body, "duplicate\n");
  EXPECT_EQ(metrics_.Value("mailroom_collector_feedback_total",
                           {{"type", "Notification"}, {"result", "forbidden"}}),
            1);
  EXPECT_EQ(metrics_.Value("mailroom_collector_feedback_total",
                           {{"type", "Notification"}, {"result", "duplicate"}}),
            1);
}

// A signed bounce reaches the delivery it names only when its recipient is that delivery's:
// then it is recorded and suppresses the address as before; naming the delivery's message id
// with another address suppresses nothing and is counted unmatched (reason recipient).
TEST_F(FeedbackServerTest, ASignedBounceReachesOnlyTheDeliveryOfItsMessageIdAndRecipient) {
  SentTo("bob@example.test", "ses-1");
  Answer other = Http("POST", url_,
                      testing::SnsSigner::Body(signer_->Notification(
                          "sns-o", BounceFor("victim@example.test"), kCertUrl, absl::Now())));
  EXPECT_EQ(other.body, "unmatched\n");
  EXPECT_EQ(Text("SELECT count(*) FROM suppressions"), "0");
  EXPECT_EQ(Text("SELECT count(*) FROM delivery_states WHERE bounced_at IS NOT NULL"), "0");
  EXPECT_EQ(metrics_.Value("mailroom_collector_feedback_unmatched_total",
                           {{"provider", "ses"}, {"reason", "recipient"}}),
            1);
  Answer ok = Http("POST", url_,
                   testing::SnsSigner::Body(signer_->Notification(
                       "sns-b", BounceFor(" Bob@Example.test"), kCertUrl, absl::Now())));
  EXPECT_EQ(ok.body, "recorded\n");
  EXPECT_EQ(Text("SELECT address || ' ' || reason FROM suppressions"),
            "bob@example.test hard_bounce");
  EXPECT_EQ(Text("SELECT count(*) FROM delivery_states WHERE bounced_at IS NOT NULL"), "1");
  EXPECT_EQ(Text("SELECT sum(bounced) FROM reputation_hourly WHERE provider = 'ses'"), "1");
}

// With SES in MAILROOM_FEEDBACK_SUPPRESS_UNMATCHED (the handler's suppress_unmatched), a signed
// bounce for no delivery suppresses its recipient, as before deliveries were matched; it is
// still answered and counted unmatched.
TEST_F(FeedbackServerTest, WithTheOptInABounceForNoDeliverySuppressesItsRecipient) {
  FeedbackHandler opted(
      verifier_.get(), store_.get(),
      [](const std::string&) -> absl::StatusOr<std::string> { return std::string(); },
      std::vector<std::string>{}, 3, &metrics_, /*suppress_unmatched=*/true);
  HttpReply r = opted.Post(testing::SnsSigner::Body(
      signer_->Notification("sns-s", BounceFor("stray@example.test"), kCertUrl, absl::Now())));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "unmatched");
  EXPECT_EQ(Text("SELECT address || ' ' || reason FROM suppressions"),
            "stray@example.test hard_bounce");
  EXPECT_EQ(metrics_.Value("mailroom_collector_feedback_unmatched_total",
                           {{"provider", "ses"}, {"reason", "no_delivery"}}),
            1);
}

TEST_F(FeedbackServerTest, SubscriptionConfirmationFetchesTheSubscribeUrlOfAnSnsHostOnly) {
  const std::string subscribe =
      "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&Token=t";
  Answer ok = Http("POST", url_,
                   testing::SnsSigner::Body(
                       signer_->Confirmation("c-1", subscribe, kCertUrl, absl::Now())));
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_THAT(confirmed_, ::testing::ElementsAre(subscribe));
  Answer evil = Http("POST", url_,
                     testing::SnsSigner::Body(signer_->Confirmation(
                         "c-2", "https://evil.test/confirm", kCertUrl, absl::Now())));
  EXPECT_EQ(evil.status, 403);
  EXPECT_EQ(confirmed_.size(), 1u);
}

TEST_F(FeedbackServerTest, BadRequestsGetTheirStatus) {
  EXPECT_EQ(Http("POST", url_, "not json").status, 400);
  Answer get = Http("GET", url_, "");
  EXPECT_EQ(get.status, 405);
  EXPECT_THAT(get.headers, HasSubstr("Allow: POST"));
  EXPECT_EQ(Http("PUT", url_, "{}").status, 405);
  EXPECT_EQ(Http("POST", url_, std::string(20 * 1024, 'x')).status, 413);
  // Unsigned, expired, wrongly hosted: 403.
  SnsMessage m = signer_->Notification("u", BounceFor("x@example.test"), kCertUrl, absl::Now());
  SnsMessage unsigned_m = m;
  unsigned_m.signature.clear();
  EXPECT_EQ(Http("POST", url_, testing::SnsSigner::Body(unsigned_m)).status, 403);
  EXPECT_EQ(Http("POST", url_,
                 testing::SnsSigner::Body(signer_->Notification(
                     "e", BounceFor("x@example.test"), kCertUrl, absl::Now() - absl::Hours(2))))
                .status,
            403);
  EXPECT_EQ(Http("POST", url_,
                 testing::SnsSigner::Body(signer_->Notification(
                     "h", BounceFor("x@example.test"), "https://evil.test/c.pem", absl::Now())))
                .status,
            403);
  // Signed, but not an SES event.
  EXPECT_EQ(
      Http("POST", url_,
           testing::SnsSigner::Body(signer_->Notification("n", "hello", kCertUrl, absl::Now())))
          .status,
      400);
  EXPECT_EQ(Text("SELECT count(*) FROM suppressions"), "0");
}

// A correctly signed bounce from a topic of another AWS account (anyone can create one and
// publish): 403, and nothing changes: no suppression, no SNS message remembered, no
// certificate fetched.
TEST_F(FeedbackServerTest, ASignedBounceFromAnotherAccountsTopicChangesNothing) {
  SnsMessage theirs = signer_->Notification("sns-x", BounceFor("ceo@bigcustomer.test"), kCertUrl,
                                            absl::Now());
  theirs.topic_arn = "arn:aws:sns:us-east-1:666666666666:attackers-own-topic";
  signer_->Sign(theirs, 2);
  Answer a = Http("POST", url_, testing::SnsSigner::Body(theirs));
  EXPECT_EQ(a.status, 403);
  EXPECT_THAT(a.body, HasSubstr("TopicArn not allowed"));
  EXPECT_EQ(Text("SELECT count(*) FROM suppressions"), "0");
  EXPECT_EQ(Text("SELECT count(*) FROM sns_messages"), "0");
  EXPECT_EQ(fetches_, 0);
  EXPECT_EQ(metrics_.Value("mailroom_collector_feedback_events_total",
                           {{"event", "Bounce"}, {"result", "unmatched"}}),
            0);
}

// A connection to the endpoint on loopback.
int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// What the endpoint sends on `fd` until it closes the connection (or `limit` passes).
std::string ReadUntilClosed(int fd, absl::Duration limit) {
  const timeval t = absl::ToTimeval(limit);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof(t));
  std::string answer;
  char buf[512];
  ssize_t got;
  while ((got = recv(fd, buf, sizeof(buf), 0)) > 0) answer.append(buf, got);
  return answer;
}

// Sends `request` on a new connection and returns the answer.
std::string Exchange(int port, const std::string& request) {
  const int fd = Connect(port);
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string answer = ReadUntilClosed(fd, absl::Seconds(10));
  close(fd);
  return answer;
}

// Whether the endpoint has answered or closed the connection `fd` (without waiting).
bool Answered(int fd) {
  char c;
  return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) >= 0 || errno != EAGAIN;
}

// Clients that connect and send nothing, until destroyed.
class IdleClients {
 public:
  IdleClients(int port, int n) {
    for (int i = 0; i < n; ++i) fds_.push_back(Connect(port));
  }
  ~IdleClients() {
    for (int fd : fds_) close(fd);
  }
  // How many the endpoint has closed.
  int closed() const { return std::count_if(fds_.begin(), fds_.end(), Answered); }

 private:
  std::vector<int> fds_;
};

// Clients that declare a body of `declared` bytes (by default the largest the endpoint takes,
// so each gets 408, not 413) and send it one byte every `every` (by default 5 s), each on its
// own connection, until destroyed.
class SlowClients {
 public:
  SlowClients(int port, int n, size_t declared = kMaxBody,
              absl::Duration every = absl::Seconds(5)) {
    for (int i = 0; i < n; ++i) {
      const int fd = Connect(port);
      const std::string head = absl::StrCat(
          "POST /sns HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n",
          "Content-Length: ", declared, "\r\n\r\n{");
      send(fd, head.data(), head.size(), MSG_NOSIGNAL);
      fds_.push_back(fd);
    }
    trickle_ = std::thread([this, every] {
      absl::MutexLock lock(&mu_);
      while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), every)) {
        for (int fd : fds_) send(fd, " ", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
    });
  }
  int fd(int i) const { return fds_[i]; }
  ~SlowClients() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    trickle_.join();
    for (int fd : fds_) close(fd);
  }

 private:
  std::vector<int> fds_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread trickle_;
};

// Posts a signed bounce for a new address; expects 200 and the message taken, prints how long
// the answer took beside `clients` and returns that.
absl::Duration FeedbackServerTest::TimedNotification(const std::string& clients) {
  static int n = 0;
  const std::string id = absl::StrCat("sns-slow-", ++n);
  const absl::Time start = absl::Now();
  Answer a = Http("POST", url_,
                  testing::SnsSigner::Body(signer_->Notification(
                      id, BounceFor(absl::StrCat(id, "@example.test")), kCertUrl, absl::Now())));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(Text(absl::StrCat("SELECT count(*) FROM sns_messages WHERE message_id = '", id, "'")),
            "1");
  std::cout << "answered in " << absl::ToInt64Milliseconds(took) << " ms with " << clients << "\n";
  return took;
}

// Fewer slow clients than workers: a notification is answered at once. The bound, 2 s, is
// the local handling (signature check, one statement) with room for a loaded machine; the
// slow clients would otherwise hold it until they finish (16 KiB at one byte per 5 s).
TEST_F(FeedbackServerTest, ANotificationIsAnsweredAtOnceWhileSlowClientsTrickle) {
  SlowClients slow(server_.port(), 4);
  EXPECT_LT(TimedNotification("4 slow clients"), absl::Seconds(2));
}

// More slow clients than workers: they hold no worker (a request reaches one only once it has
// arrived whole), so a notification is answered at once (the 2 s above).
TEST_F(FeedbackServerTest, ANotificationIsAnsweredAtOnceBehindMoreSlowClientsThanWorkers) {
  const FeedbackServerOptions defaults;
  SlowClients slow(server_.port(), defaults.workers + 4);
  EXPECT_LT(TimedNotification(absl::StrCat(defaults.workers + 4, " slow clients")),
            absl::Seconds(2));
}

// More clients than workers, each sending a byte every twelfth of the request timeout (inside
// any per-read wait): none holds a worker, and each gets 408 at the request timeout, so a
// notification is answered at once.
TEST_F(FeedbackServerTest, ANotificationIsAnsweredWhileClientsTrickleInsideEachWait) {
  const FeedbackServerOptions defaults;
  const absl::Duration every = defaults.request_timeout / 12;
  SlowClients slow(server_.port(), defaults.workers + 4, kMaxBody, every);
  EXPECT_LT(TimedNotification(absl::StrCat(defaults.workers + 4, " clients trickling every ",
                                           absl::FormatDuration(every))),
            absl::Seconds(2));
}

// The same clients declaring a body larger than the endpoint takes: each gets 413 as soon as
// its headers are in and its connection closes then, unread.
TEST_F(FeedbackServerTest, ANotificationIsAnsweredAtOnceWhileClientsTrickleTooLargeBodies) {
  const FeedbackServerOptions defaults;
  const absl::Duration every = defaults.request_timeout / 12;
  SlowClients slow(server_.port(), defaults.workers + 4, 200000, every);
  EXPECT_LT(TimedNotification(absl::StrCat(defaults.workers + 4,
                                           " clients trickling too large bodies every ",
                                           absl::FormatDuration(every))),
            absl::Seconds(2));
}

// Hundreds of trickling and idle clients (ten times the workers each): a notification is
// still answered at once.
TEST_F(FeedbackServerTest, ANotificationIsAnsweredAtOnceWhileHundredsOfClientsTrickleOrIdle) {
  const FeedbackServerOptions defaults;
  const absl::Duration every = defaults.request_timeout / 12;
  SlowClients slow(server_.port(), 10 * defaults.workers, kMaxBody, every);
  IdleClients idle(server_.port(), 10 * defaults.workers);
  EXPECT_LT(TimedNotification(absl::StrCat(10 * defaults.workers, " trickling and ",
                                           10 * defaults.workers, " idle clients")),
            absl::Seconds(2));
}

// A client trickling its body and one that sends nothing each get 408 at the request timeout
// after connecting (within 1 s after it), and their connections close.
TEST_F(FeedbackServerTest, TricklingAndIdleClientsGet408AtTheRequestTimeout) {
  const FeedbackServerOptions defaults;
  const absl::Time start = absl::Now();
  SlowClients slow(server_.port(), 1, kMaxBody, defaults.request_timeout / 12);
  const int idle = Connect(server_.port());
  for (int fd : {slow.fd(0), idle}) {
    const std::string answer = ReadUntilClosed(fd, defaults.request_timeout + absl::Seconds(5));
    const absl::Duration took = absl::Now() - start;
    EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 408 Request Timeout\r\n"));
    EXPECT_GE(took, defaults.request_timeout);
    EXPECT_LT(took, defaults.request_timeout + absl::Seconds(1));
  }
  close(idle);
}

// Requests without a Content-Length (411) or with headers over 16 KiB (431) are answered as
// soon as that is known.
TEST_F(FeedbackServerTest, RequestsWithoutLengthOrWithHugeHeadersAreAnsweredAtOnce) {
  const absl::Time start = absl::Now();
  EXPECT_THAT(Exchange(server_.port(), "POST /sns HTTP/1.1\r\nHost: x\r\n\r\n{}"),
              ::testing::StartsWith("HTTP/1.1 411 Length Required\r\n"));
  EXPECT_THAT(Exchange(server_.port(),
                       "POST /sns HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"),
              ::testing::StartsWith("HTTP/1.1 411 Length Required\r\n"));
  EXPECT_THAT(Exchange(server_.port(), absl::StrCat("POST /sns HTTP/1.1\r\nX-Pad: ",
                                                    std::string(17 * 1024, 'p'), "\r\n")),
              ::testing::StartsWith("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

// Malformed requests, each answered at once (not at the request timeout) with its status and
// reason: only HTTP/1.0 and 1.1, digits only in Content-Length, only spaces and tabs around a
// value, no CR, LF or NUL inside a line, no folded lines, no bare LF, no deeply nested JSON.
TEST_F(FeedbackServerTest, MalformedRequestsAreRefusedAtOnce) {
  const std::string kBadLine = "HTTP/1.1 400 Bad Request\r\n";
  const std::string nested = absl::StrCat(R"({"Type":"Notification","MessageId":"n","X":)",
                                          std::string(20, '['), std::string(20, ']'), "}");
  const struct {
    std::string request;
    std::string reason;
  } kCases[] = {
      {"POST /sns HTTP/1.2\r\nContent-Length: 2\r\n\r\n{}", "bad request line"},
      {"POST /sns HTTP/2\r\nContent-Length: 2\r\n\r\n{}", "bad request line"},
      {"POST /sns HTTP/1.1\r\nContent-Length: +2\r\n\r\n{}", "bad Content-Length"},
      {"POST /sns HTTP/1.1\r\nContent-Length: 0x2\r\n\r\n{}", "bad Content-Length"},
      {"POST /sns HTTP/1.1\r\nContent-Length:\v2\r\n\r\n{}", "bad Content-Length"},
      {"POST /sns HTTP/1.1\r\nContent-Length: 2 2\r\n\r\n{}", "bad Content-Length"},
      {"POST /sns HTTP/1.1\r\nContent-Length : 2\r\n\r\n{}", "bad header"},
      {"POST /sns HTTP/1.1\r\nContent-Length: 2\r\nX: a\rb\r\n\r\n{}", "bad header"},
      {absl::StrCat("POST /sns HTTP/1.1\r\nContent-Length: 2\r\nX: a", std::string(1, '\0'),
                    "b\r\n\r\n{}"),
       "bad header"},
      {"POST /sns HTTP/1.1\r\nContent-Length: 2\r\nX: a\r\n b: c\r\n\r\n{}", "bad header"},
      {"POST /sns HTTP/1.1\r\nContent-Length: 2\r\n\tb: c\r\n\r\n{}", "bad header"},
      {"POST /sns HTTP/1.1\nContent-Length: 2\n\n{}", "bad header"},
      {"POST /sns HTTP/1.1\r\nContent-Length: 2\nX: y\r\n", "bad header"},
      {absl::StrCat("POST /sns HTTP/1.1\r\nContent-Length: ", nested.size(), "\r\n\r\n", nested),
       "JSON nested too deeply"},
  };
  for (const auto& c : kCases) {
    const absl::Time start = absl::Now();
    const std::string answer = Exchange(server_.port(), c.request);
    EXPECT_THAT(answer, ::testing::StartsWith(kBadLine)) << absl::CEscape(c.request);
    EXPECT_THAT(answer, ::testing::EndsWith("\r\n\r\n" + c.reason + "\n"))
        << absl::CEscape(c.request);
    EXPECT_LT(absl::Now() - start, absl::Seconds(2)) << absl::CEscape(c.request);
  }
  // Both versions, and spaces and tabs around a value, are taken.
  for (const char* version : {"HTTP/1.0", "HTTP/1.1"}) {
    EXPECT_THAT(Exchange(server_.port(),
                         absl::StrCat("POST /sns ", version, "\r\nContent-Length: \t2 \r\n\r\n{}")),
                ::testing::EndsWith("\r\n\r\nType missing\n"));
  }
  // A body's own line feeds (pretty-printed JSON, as SNS may send) arriving with the headers
  // are not taken for a header line ended by LF alone.
  EXPECT_THAT(Exchange(server_.port(), "POST /sns HTTP/1.1\r\nContent-Length: 5\r\n\r\n{\n}\n\n"),
              ::testing::EndsWith("\r\n\r\nType missing\n"));
}

// A header name must be an RFC 9110 token. Whatever comes before or after the bad name (a
// Transfer-Encoding, a huge Content-Length, a GET), the answer is 400: nothing is acted on.
TEST_F(FeedbackServerTest, HeaderNamesOutsideTheTokenCharactersAreRefused) {
  const std::string kBadLine = "HTTP/1.1 400 Bad Request\r\n";
  const std::vector<std::string> kBadNames = {
      "X Name",      // space inside
      " X",          // leading space (a folded line)
      "X\t",         // tab before the colon
      "X-Name",      // (the line below has no colon at all)
      "X(Comment)",  // delimiters
      "X)",
      "X<",
      "X>",
      "X@",
      "X,",
      "X;",
      "X\\",
      "X\"",
      "X/",
      "X[",
      "X]",
      "X?",
      "X=",
      "X{",
      "X}",
      std::string("X\x01"),
      std::string("X\x1f"),
      std::string("X\x7f"),  // controls, DEL
      "X\x80",
      "Caf\xc3\xa9",
      "\xef\xbb\xbf"
      "Content-Length",  // non-ASCII, a BOM
  };
  for (size_t i = 0; i < kBadNames.size(); ++i) {
    // The fourth case is a line without a colon.
    const std::string line = i == 3 ? kBadNames[i] : kBadNames[i] + ": v";
    for (const std::string& around :
         {std::string("Content-Length: 2\r\n") + line + "\r\n", line + "\r\nContent-Length: 2\r\n",
          std::string("Transfer-Encoding: chunked\r\n") + line + "\r\n",
          std::string("Content-Length: 999999999\r\n") + line + "\r\n"}) {
      for (const char* method : {"POST", "GET"}) {
        const std::string request = absl::StrCat(method, " /sns HTTP/1.1\r\n", around, "\r\n{}");
        const std::string answer = Exchange(server_.port(), request);
        EXPECT_THAT(answer, ::testing::StartsWith(kBadLine)) << absl::CEscape(request);
        EXPECT_THAT(answer, ::testing::EndsWith("\r\n\r\nbad header\n")) << absl::CEscape(request);
      }
    }
  }
  // Every tchar is accepted in a name (the request then fails on its body, not its headers).
  const std::string every_tchar =
      "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  EXPECT_THAT(Exchange(server_.port(), absl::StrCat("POST /sns HTTP/1.1\r\n", every_tchar,
                                                    ": v\r\nContent-Length: 2\r\n\r\n{}")),
              ::testing::EndsWith("\r\n\r\nType missing\n"));
  // A genuine, signed bounce behind a bad header name is refused whole: nothing recorded,
  // nothing fetched; the same message with good headers is recorded.
  const std::string body = testing::SnsSigner::Body(
      signer_->Notification("sns-h", BounceFor("gone@example.test"), kCertUrl, absl::Now(), 1));
  const std::string head = absl::StrCat("POST /sns HTTP/1.1\r\nContent-Length: ", body.size(),
                                        "\r\nContent-Type: text/plain\r\n");
  EXPECT_THAT(Exchange(server_.port(), absl::StrCat(head, "x-amz-sns(topic): t\r\n\r\n", body)),
              ::testing::EndsWith("\r\n\r\nbad header\n"));
  EXPECT_EQ(fetches_.load(), 0);
  EXPECT_EQ(Text("SELECT count(*) FROM sns_messages"), "0");
  EXPECT_EQ(Text("SELECT count(*) FROM suppressions"), "0");
  EXPECT_THAT(Exchange(server_.port(), absl::StrCat(head, "\r\n", body)),
              ::testing::StartsWith("HTTP/1.1 200 "));
  EXPECT_EQ(Text("SELECT count(*) FROM sns_messages"), "1");
}

// A client that asks to be told to go on (Expect: 100-continue) is, and its body is then read.
TEST_F(FeedbackServerTest, AClientExpectingContinueIsToldToSendItsBody) {
  const int fd = Connect(server_.port());
  const std::string head =
      "POST /sns HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\nExpect: 100-continue\r\n\r\n";
  send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  const std::string go_on = "HTTP/1.1 100 Continue\r\n\r\n";
  std::string got(go_on.size(), '\0');
  EXPECT_EQ(recv(fd, got.data(), got.size(), MSG_WAITALL), static_cast<ssize_t>(go_on.size()));
  EXPECT_EQ(got, go_on);
  send(fd, "not json", 8, MSG_NOSIGNAL);
  EXPECT_THAT(ReadUntilClosed(fd, absl::Seconds(10)),
              ::testing::StartsWith("HTTP/1.1 400 Bad Request\r\n"));
  close(fd);
}

// Beyond max_connections() waiting, a new connection closes the oldest (long before its
// request timeout).
TEST_F(FeedbackServerTest, ANewConnectionBeyondThePendingLimitClosesTheOldest) {
  ASSERT_EQ(server_.max_connections(), FeedbackServer::kMaxConnections);  // 20,000 files here
  const int oldest = Connect(server_.port());
  IdleClients others(server_.port(), server_.max_connections());
  const absl::Time start = absl::Now();
  EXPECT_EQ(ReadUntilClosed(oldest, absl::Seconds(10)), "");
  EXPECT_LT(absl::Now() - start, FeedbackServerOptions().request_timeout);
  close(oldest);
}

// A genuine notification half sent when more bare connections than the endpoint holds arrive:
// they give way to it (the fewest bytes per second go first), and once its body is in it is
// answered 200. Sent whole just before such a burst, it is read before the burst is accepted.
TEST_F(FeedbackServerTest, AnArrivingRequestOutlastsABurstOfBareConnections) {
  const int burst = server_.max_connections() + 76;
  auto request = [this](const std::string& id) {
    const std::string body = testing::SnsSigner::Body(signer_->Notification(
        id, BounceFor(absl::StrCat(id, "@example.test")), kCertUrl, absl::Now()));
    return absl::StrCat("POST /sns HTTP/1.1\r\nHost: x\r\nContent-Length: ", body.size(),
                        "\r\n\r\n", body);
  };
  const std::string half_sent = request("sns-burst-1");
  const size_t body_at = half_sent.find("\r\n\r\n") + 4;
  const std::string first = half_sent.substr(0, body_at + (half_sent.size() - body_at) / 2);
  const int genuine = Connect(server_.port());
  send(genuine, first.data(), first.size(), MSG_NOSIGNAL);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (server_.buffered_bytes() < first.size() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_GE(server_.buffered_bytes(), first.size());
  {
    IdleClients bare(server_.port(), burst);
    const std::string rest = half_sent.substr(first.size());
    send(genuine, rest.data(), rest.size(), MSG_NOSIGNAL);
    EXPECT_THAT(ReadUntilClosed(genuine, absl::Seconds(10)),
                ::testing::StartsWith("HTTP/1.1 200 OK\r\n"));
  }
  close(genuine);
  const std::string second_whole = request("sns-burst-2");
  const int sent_whole = Connect(server_.port());
  send(sent_whole, second_whole.data(), second_whole.size(), MSG_NOSIGNAL);
  IdleClients bare(server_.port(), burst);
  EXPECT_THAT(ReadUntilClosed(sent_whole, absl::Seconds(10)),
              ::testing::StartsWith("HTTP/1.1 200 OK\r\n"));
  close(sent_whole);
  EXPECT_EQ(Text("SELECT count(*) FROM sns_messages"), "2");
}

// Under an open-file limit of 512, the endpoint holds at most a quarter of it (128) however
// many connect, and the process can still open files.
TEST_F(FeedbackServerTest, TheEndpointHoldsAtMostAQuarterOfTheOpenFileLimit) {
  rlimit files{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  const rlimit before = files;
  files.rlim_cur = 512;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &files), 0);
  server_.Stop();
  ASSERT_TRUE(server_.Start("127.0.0.1:0", handler_.get()).ok());
  url_ = absl::StrCat("http://127.0.0.1:", server_.port(), "/sns");
  {
    const int n = 200;
    IdleClients idle(server_.port(), n);
    // Accepted after every idle client, so answered once each has been taken or closed.
    EXPECT_LT(TimedNotification(absl::StrCat(n, " idle clients under 512 files")),
              absl::Seconds(2));
    const int held = n - idle.closed();
    std::cout << "held " << held << " of " << n << " idle connections\n";
    EXPECT_LE(held, 512 / 4);
    const int file = open("/dev/null", O_RDONLY | O_CLOEXEC);
    EXPECT_GE(file, 0) << strerror(errno);
    close(file);
  }
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &before), 0);
}

// Clients that each declare a body of the endpoint's production limit and send all of it but
// the last byte, until destroyed; `refused()` counts those answered 503.
class LargeBodyClients {
 public:
  LargeBodyClients(int port, int n) {
    const size_t max_body = FeedbackServerOptions().max_body;
    const std::string request = absl::StrCat("POST /sns HTTP/1.1\r\nHost: x\r\nContent-Length: ",
                                             max_body, "\r\n\r\n", std::string(max_body - 1, ' '));
    const timeval limit = absl::ToTimeval(absl::Seconds(10));
    for (int i = 0; i < n; ++i) {
      const int fd = Connect(port);
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
      send(fd, request.data(), request.size(), MSG_NOSIGNAL);
      fds_.push_back(fd);
    }
  }
  ~LargeBodyClients() {
    for (int fd : fds_) close(fd);
  }
  // How many the endpoint has refused: answered (503) or closed (a close with the rest of the
  // body unread resets the connection, which may discard the answer).
  int refused() const { return std::count_if(fds_.begin(), fds_.end(), Answered); }

 private:
  std::vector<int> fds_;
};

// Clients holding bodies of the largest size far beyond FeedbackServer::kMaxBuffered in total:
// the bytes the endpoint holds never exceed it (those holding the most are answered 503), and
// a notification is still answered at once.
TEST_F(FeedbackServerTest, BytesHeldForUnansweredRequestsStayWithinTheBudget) {
  server_.Stop();
  ASSERT_TRUE(server_.Start("127.0.0.1:0", handler_.get()).ok());  // production limits
  url_ = absl::StrCat("http://127.0.0.1:", server_.port(), "/sns");
  const size_t max_body = FeedbackServerOptions().max_body;
  const int n = FeedbackServer::kMaxBuffered / max_body + 72;
  LargeBodyClients large(server_.port(), n);
  EXPECT_LT(TimedNotification(absl::StrCat(n, " clients holding ", max_body - 1, " bytes")),
            absl::Seconds(2));
  // All but those the budget holds are refused (waits until they are).
  const int held = FeedbackServer::kMaxBuffered / max_body;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (large.refused() < n - held && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  std::cout << "held at most " << server_.peak_buffered_bytes() << " bytes; " << large.refused()
            << " clients refused\n";
  EXPECT_GE(large.refused(), n - held);
  EXPECT_LE(server_.peak_buffered_bytes(), FeedbackServer::kMaxBuffered);
  EXPECT_GT(server_.peak_buffered_bytes(), FeedbackServer::kMaxBuffered - 2 * max_body);
}

// A real HTTPS server on loopback playing SNS's certificate host: kCertPath serves the signing
// certificate (answering 503 the first time when `fail_first`); every other path is 404. Logs
// "GET <path>" for each request.
class CertHost {
 public:
  explicit CertHost(const std::string& cert_pem, bool fail_first = true) {
    static int n = 0;  // each its own files
    const std::string dir = absl::StrCat(getenv("TEST_TMPDIR"), "/cert_host_", ++n);
    mkdir(dir.c_str(), 0700);
    auto openssl = testing::Process::Spawn(
        {"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", dir + "/tls.key",
         "-out", dir + "/tls.pem", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
         "subjectAltName=IP:127.0.0.1"},
        {}, dir + "/openssl.log");
    EXPECT_TRUE(openssl.ok()) << openssl.status();
    EXPECT_EQ(*(*openssl)->Wait(absl::Seconds(60)), 0) << (*openssl)->Log();
    FILE* f = fopen((dir + "/signing.pem").c_str(), "w");
    fputs(cert_pem.c_str(), f);
    fclose(f);
    constexpr char kServer[] = R"(
import http.server, ssl, sys
served = set()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        print("GET " + self.path, flush=True)
        status, body = 404, b""
        if self.path == sys.argv[4]:
            status = 200 if self.path in served or sys.argv[5] == "0" else 503
            served.add(self.path)
            if status == 200:
                body = open(sys.argv[3], "rb").read()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print("port %d" % srv.server_address[1], flush=True)
srv.serve_forever()
)";
    auto https = testing::Process::Spawn({"/usr/bin/python3", "-c", kServer, dir + "/tls.pem",
                                          dir + "/tls.key", dir + "/signing.pem", kCertPath,
                                          fail_first ? "1" : "0"},
                                         {}, dir + "/https.log");
    EXPECT_TRUE(https.ok()) << https.status();
    process_ = std::move(*https);
    EXPECT_TRUE(process_->WaitForLog("port ", absl::Seconds(30))) << process_->Log();
    host_ = absl::StrCat("127.0.0.1:",
                         std::string(absl::StripAsciiWhitespace(
                             process_->Log().substr(process_->Log().find("port ") + 5))));
    tls_ca_ = dir + "/tls.pem";
  }
  // host:port, for MAILROOM_FEEDBACK_SNS_HOSTS.
  const std::string& host() const { return host_; }
  std::string Url(const std::string& path) const { return absl::StrCat("https://", host_, path); }
  absl::StatusOr<std::string> Get(const std::string& url) const { return HttpsGet(url, tls_ca_); }
  // The GETs served so far.
  int64_t Gets() const {
    std::vector<std::string> lines = absl::StrSplit(process_->Log(), '\n');
    return std::count_if(lines.begin(), lines.end(),
                         [](const std::string& l) { return l.rfind("GET ", 0) == 0; });
  }
  std::string Log() const { return process_->Log(); }
  // A verifier for the signer's topic fetching from this host; `on_fetch` (if given) is told
  // of each fetch as it starts.
  SnsVerifier Verifier(const std::string& ca_file,
                       std::function<void(const std::string&)> on_fetch = nullptr) const {
    SnsVerifierOptions o;
    o.ca_file = ca_file;
    o.topic_arns = {testing::kTopicArn};
    o.extra_hosts = {host_};
    return SnsVerifier(o, [this, on_fetch](const std::string& url) {
      if (on_fetch) on_fetch(url);
      return Get(url);
    });
  }

 private:
  std::unique_ptr<testing::Process> process_;
  std::string host_;
  std::string tls_ca_;
};

// Certificate URLs in made-up forms answered 404 by a real HTTPS server: one URL is fetched
// once however often it is posted (403: not SNS's certificate), and many different URLs make
// at most two fetches a second.
TEST_F(FeedbackServerTest, DefinitelyFailedCertificateFetchesAreCachedAndCapped) {
  CertHost cert_host(signer_->cert_pem());
  SnsVerifier verifier = cert_host.Verifier(ca_file_);
  FeedbackHandler handler(&verifier, store_.get(), nullptr, {cert_host.host()}, 3, &metrics_,
                          /*suppress_unmatched=*/false);
  const absl::Time start = absl::Now();
  const std::string same = cert_host.Url("/SimpleNotificationService-90e.pem");
  for (int i = 0; i < 10; ++i) {
    HttpReply r = handler.Post(testing::SnsSigner::Body(signer_->Notification(
        absl::StrCat("same-", i), BounceFor("x@example.test"), same, absl::Now())));
    EXPECT_EQ(r.status, 403) << r.body;
  }
  EXPECT_EQ(cert_host.Gets(), 1);
  for (int i = 0; i < 40; ++i) {
    HttpReply r = handler.Post(testing::SnsSigner::Body(signer_->Notification(
        absl::StrCat("many-", i), BounceFor("x@example.test"),
        cert_host.Url(absl::StrCat("/SimpleNotificationService-", i, ".pem")), absl::Now())));
    EXPECT_THAT(r.status, ::testing::AnyOf(403, 503)) << r.body;
  }
  const int64_t seconds = absl::ToInt64Seconds(absl::Now() - start);
  EXPECT_LE(cert_host.Gets(), 2 * (seconds + 1)) << cert_host.Log();
  std::cout << cert_host.Gets() << " fetches for 50 posts in " << seconds << " s\n";
  EXPECT_EQ(Text("SELECT count(*) FROM sns_messages"), "0");
}

// The real certificate host answers 503 once: the notification is answered 503 (SNS retries),
// the URL is not fetched again for the 5 s the design holds a transient failure, and the first
// post after that is verified and recorded, even when made-up URLs have just used up that
// second's fetches. (A failure remembered for a minute would lose every SNS retry.)
TEST_F(FeedbackServerTest, ATransientCertificateFailureIsRetriedAfterFiveSeconds) {
  CertHost cert_host(signer_->cert_pem());
  SnsVerifier verifier = cert_host.Verifier(ca_file_);
  FeedbackHandler handler(&verifier, store_.get(), nullptr, {cert_host.host()}, 3, &metrics_,
                          /*suppress_unmatched=*/false);
  const std::string genuine = testing::SnsSigner::Body(signer_->Notification(
      "sns-retried", BounceFor("gone@example.test"), cert_host.Url(kCertPath), absl::Now()));
  const absl::Time failed_at = absl::Now();
  EXPECT_EQ(handler.Post(genuine).status, 503);
  EXPECT_EQ(cert_host.Gets(), 1);
  // Posts until one is answered 200 (each 503 before it is a refusal without a fetch).
  HttpReply r;
  absl::Time answered;
  const absl::Time deadline = failed_at + absl::Seconds(20);
  while (absl::Now() < deadline) {
    if (absl::Now() - failed_at >= SnsVerifierOptions().transient_retry) {
      for (int i = 0; i < 4; ++i) {  // strangers spend the second's fetches first
        handler.Post(testing::SnsSigner::Body(signer_->Notification(
            absl::StrCat("made-up-", i), BounceFor("x@example.test"),
            cert_host.Url(absl::StrCat("/SimpleNotificationService-", i, ".pem")), absl::Now())));
      }
    }
    const int64_t gets_before = cert_host.Gets();
    r = handler.Post(genuine);
    answered = absl::Now();
    if (r.status == 200) break;
    ASSERT_EQ(r.status, 503) << r.body;
    ASSERT_EQ(cert_host.Gets(), gets_before) << "fetched again within the hold";
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_GE(answered - failed_at, SnsVerifierOptions().transient_retry);
  EXPECT_LT(answered - failed_at, SnsVerifierOptions().transient_retry + absl::Seconds(2));
  EXPECT_EQ(Text("SELECT count(*) FROM sns_messages"), "1");
  std::cout << "verified " << absl::ToInt64Milliseconds(answered - failed_at)
            << " ms after the certificate host's 503\n";
}

// A stranger posts a fresh made-up certificate URL every 50 ms (20 a second, each 404 when
// fetched) and so uses up the 2 fetches of every second. Two notifications of a burst are
// refused (503) by the cap; their certificate URL, asked for twice, gets the next fetch the cap
// allows, which a stranger's post brings, within a second; SNS's retries then verify.
TEST_F(FeedbackServerTest, SnssCertificateIsFetchedWhileAStrangerPostsMadeUpUrls) {
  CertHost cert_host(signer_->cert_pem(), /*fail_first=*/false);
  absl::Mutex mu;
  absl::Time genuine_fetch = absl::InfiniteFuture();  // when the certificate's fetch started
  SnsVerifier verifier = cert_host.Verifier(ca_file_, [&](const std::string& url) {
    absl::MutexLock lock(&mu);
    if (url == cert_host.Url(kCertPath)) genuine_fetch = absl::Now();
  });
  FeedbackHandler handler(&verifier, store_.get(), nullptr, {cert_host.host()}, 3, &metrics_,
                          /*suppress_unmatched=*/false);
  int made_up = 0;
  absl::Time next = absl::Now();
  absl::Duration longest_post;  // the stranger's; a post that fetches takes longest
  auto stranger = [&] {
    absl::SleepFor(next - absl::Now());
    next += absl::Milliseconds(50);
    ++made_up;
    const absl::Time posted = absl::Now();
    const int status = handler
                           .Post(testing::SnsSigner::Body(signer_->Notification(
                               absl::StrCat("made-up-", made_up), BounceFor("x@example.test"),
                               cert_host.Url(absl::StrCat("/SimpleNotificationService-",
                                                          absl::Hex(made_up), ".pem")),
                               absl::Now())))
                           .status;
    longest_post = std::max(longest_post, absl::Now() - posted);
    return status;
  };
  auto fetched = [&] {
    absl::MutexLock lock(&mu);
    return genuine_fetch != absl::InfiniteFuture();
  };
  const absl::Time start = absl::Now();
  while (stranger() != 503) ASSERT_LT(made_up, 10);  // the second's fetches are used up
  std::vector<std::string> burst;
  for (int i = 0; i < 2; ++i) {
    const std::string id = absl::StrCat("sns-burst-", i);
    burst.push_back(testing::SnsSigner::Body(signer_->Notification(
        id, BounceFor(absl::StrCat(id, "@example.test")), cert_host.Url(kCertPath), absl::Now())));
    HttpReply r = handler.Post(burst.back());
    EXPECT_EQ(r.status, 503) << r.body;
  }
  const absl::Time asked_twice = absl::Now();
  while (!fetched() && absl::Now() - asked_twice < absl::Seconds(5)) {
    EXPECT_THAT(stranger(), ::testing::AnyOf(403, 503));
  }
  ASSERT_TRUE(fetched()) << cert_host.Log();
  const absl::Duration wait = genuine_fetch - asked_twice;
  // A fetch frees less than a second after the cap was found used up; the stranger's next
  // post (every 50 ms, late by at most the longest post) brings it to the certificate.
  EXPECT_LE(wait, absl::Seconds(1) + absl::Milliseconds(50) + longest_post);
  for (const std::string& retry : burst) {
    HttpReply r = handler.Post(retry);
    EXPECT_EQ(r.status, 200) << r.body;
  }
  EXPECT_EQ(Text("SELECT count(*) FROM sns_messages"), "2");
  const absl::Duration flood = absl::Now() - start;
  EXPECT_LE(cert_host.Gets(), 2 * (absl::ToInt64Seconds(flood) + 1)) << cert_host.Log();
  std::cout << "certificate fetched " << absl::ToInt64Milliseconds(wait)
            << " ms after its second post (longest post " << absl::ToInt64Milliseconds(longest_post)
            << " ms); " << made_up << " made-up posts, " << cert_host.Gets() << " fetches in "
            << absl::ToInt64Milliseconds(flood) << " ms\n";
}

}  // namespace
}  // namespace mailroom
