// The feedback endpoint over real HTTP on loopback (libcurl), with messages signed by a
// throwaway CA (testing/sns_signer) and a real PostgreSQL behind the FeedbackStore.
#include "collector/feedback_server.h"

#include <curl/curl.h>

#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "collector/migrate.h"
#include "collector/testing/sns_signer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/pg_server.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;

constexpr char kCertUrl[] = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem";

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
    ASSERT_TRUE(MigrateUp(*url, EmbeddedMigrations()).ok());
    conn_ = std::make_unique<pqxx::connection>(*url);
    store_ = NewPgFeedbackStore(*url);
    SnsVerifierOptions o;
    o.ca_file = ca_file_;
    verifier_ = std::make_unique<SnsVerifier>(
        o, [](const std::string&) -> absl::StatusOr<std::string> { return signer_->cert_pem(); });
    handler_ = std::make_unique<FeedbackHandler>(
        verifier_.get(), store_.get(),
        [this](const std::string& url) -> absl::StatusOr<std::string> {
          confirmed_.push_back(url);
          return std::string("<ConfirmSubscriptionResponse/>");
        },
        std::vector<std::string>{}, 3, &metrics_);
    ASSERT_TRUE(server_.Start("127.0.0.1:0", handler_.get(), 16 * 1024).ok());
    url_ = absl::StrCat("http://127.0.0.1:", server_.port(), "/sns");
  }
  std::string Text(const std::string& sql) {
    pqxx::nontransaction tx(*conn_);
    return tx.exec1(sql)[0].as<std::string>();
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
  FeedbackServer server_;
  std::string url_;
};
testing::PgServer* FeedbackServerTest::pg_ = nullptr;
testing::SnsSigner* FeedbackServerTest::signer_ = nullptr;
std::string FeedbackServerTest::ca_file_;

TEST_F(FeedbackServerTest, ASignedBounceIsRecordedOnceAForgedOneChangesNothing) {
  SnsMessage forged =
      signer_->Notification("sns-f", BounceFor("victim@example.test"), kCertUrl, absl::Now());
  forged.message = BounceFor("other@example.test");
  Answer f = Http("POST", url_, testing::SnsSigner::Body(forged));
  EXPECT_EQ(f.status, 403);
  EXPECT_THAT(f.body, HasSubstr("signature does not match"));
  EXPECT_EQ(Text("SELECT count(*) FROM suppressions"), "0");
  EXPECT_EQ(Text("SELECT count(*) FROM sns_messages"), "0");

  SnsMessage good =
      signer_->Notification("sns-1", BounceFor("gone@example.test"), kCertUrl, absl::Now(), 1);
  Answer ok = Http("POST", url_, testing::SnsSigner::Body(good));
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(ok.body, "unmatched\n");  // no delivery with that SES id in this database
  EXPECT_EQ(Text("SELECT reason FROM suppressions"), "hard_bounce");
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

TEST_F(FeedbackServerTest, SubscriptionConfirmationFetchesTheSubscribeUrlOfAnSnsHostOnly) {
  const std::string subscribe =
      "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&Token=t";
  Answer ok = Http(
      "POST", url_,
      testing::SnsSigner::Body(signer_->Confirmation("c-1", subscribe, kCertUrl, absl::Now())));
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

}  // namespace
}  // namespace mailroom
