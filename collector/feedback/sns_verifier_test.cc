// SnsVerifier against messages signed by a throwaway CA's certificate (testing/sns_signer):
// both signature versions, and every way a message can be refused.
#include "collector/feedback/sns_verifier.h"

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"

#include "collector/feedback/testing/sns_signer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;

constexpr char kCertUrl[] =
    "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0123456789abcdef.pem";

class SnsVerifierTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { signer_ = new testing::SnsSigner; }
  static void TearDownTestSuite() { delete signer_; }

  // A verifier trusting the signer's CA, fetching every URL's certificate from the signer.
  SnsVerifier Verifier(SnsVerifierOptions o = Topic()) {
    o.ca_file = CaFile();
    return SnsVerifier(
        o,
        [this](const std::string& url) -> absl::StatusOr<std::string> {
          ++fetches_;
          fetched_url_ = url;
          return signer_->cert_pem();
        },
        [this] { return now_; });
  }
  // Options accepting the signer's topic.
  static SnsVerifierOptions Topic() {
    SnsVerifierOptions o;
    o.topic_arns = {testing::kTopicArn};
    return o;
  }
  static std::string CaFile() {
    static const std::string path = [] {
      std::string p = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") +
                      "/sns_test_ca.pem";
      FILE* f = fopen(p.c_str(), "w");
      fputs(signer_->ca_pem().c_str(), f);
      fclose(f);
      return p;
    }();
    return path;
  }

  static testing::SnsSigner* signer_;
  absl::Time now_ = absl::Now();  // the certificates are valid from an hour ago for 30 days
  std::atomic<int> fetches_{0};
  std::string fetched_url_;
};
testing::SnsSigner* SnsVerifierTest::signer_ = nullptr;

TEST(SnsStringToSignTest, FollowsTheDocumentedFieldOrder) {
  SnsMessage n;
  n.type = "Notification";
  n.message = "m";
  n.message_id = "id";
  n.timestamp = "t";
  n.topic_arn = "arn";
  EXPECT_EQ(SnsStringToSign(n),
            "Message\nm\nMessageId\nid\nTimestamp\nt\nTopicArn\narn\nType\nNotification\n");
  n.subject = "s";
  n.has_subject = true;
  EXPECT_EQ(
      SnsStringToSign(n),
      "Message\nm\nMessageId\nid\nSubject\ns\nTimestamp\nt\nTopicArn\narn\nType\nNotification\n");
  SnsMessage c = n;
  c.type = "SubscriptionConfirmation";
  c.subscribe_url = "u";
  c.token = "tok";
  EXPECT_EQ(SnsStringToSign(c),
            "Message\nm\nMessageId\nid\nSubscribeURL\nu\nTimestamp\nt\nToken\ntok\nTopicArn\narn\n"
            "Type\nSubscriptionConfirmation\n");
  c.type = "Something";
  EXPECT_EQ(SnsStringToSign(c), "");
}

TEST(SnsUrlAllowedTest, OnlyHttpsOnSnsHostsOrTheAllowList) {
  EXPECT_TRUE(SnsUrlAllowed("https://sns.eu-west-1.amazonaws.com/x.pem", {}));
  EXPECT_TRUE(SnsUrlAllowed("https://sns.cn-north-1.amazonaws.com.cn/x.pem", {}));
  EXPECT_TRUE(SnsUrlAllowed("https://SNS.us-east-1.amazonaws.com/x.pem", {}));
  EXPECT_FALSE(SnsUrlAllowed("http://sns.us-east-1.amazonaws.com/x.pem", {}));
  EXPECT_FALSE(SnsUrlAllowed("https://sns.us-east-1.amazonaws.com.evil.test/x.pem", {}));
  EXPECT_FALSE(SnsUrlAllowed("https://evil.test/sns.us-east-1.amazonaws.com/x.pem", {}));
  EXPECT_FALSE(SnsUrlAllowed("https://sns.us-east-1.amazonaws.com@evil.test/x.pem", {}));
  EXPECT_FALSE(SnsUrlAllowed("https://s3.us-east-1.amazonaws.com/x.pem", {}));
  EXPECT_TRUE(SnsUrlAllowed("https://sns.us-gov-west-1.amazonaws.com/x.pem", {}));
  EXPECT_TRUE(SnsUrlAllowed("https://sns.ap-southeast-3.amazonaws.com/x.pem", {}));
  // S3's virtual hosts and other names that are not a region.
  EXPECT_FALSE(SnsUrlAllowed("https://sns.s3.amazonaws.com/x.pem", {}));
  EXPECT_FALSE(SnsUrlAllowed("https://sns.s3-accelerate.amazonaws.com/x.pem", {}));
  EXPECT_FALSE(SnsUrlAllowed("https://sns.s3.us-east-1.amazonaws.com/x.pem", {}));
  EXPECT_FALSE(SnsUrlAllowed("https://sns.us-east-1.amazonaws.com:8443/x.pem", {}));
  EXPECT_FALSE(SnsUrlAllowed("https://sns.us-east-1.amazonaws.com.cn/x.pem", {}));
  EXPECT_FALSE(SnsUrlAllowed("https://sns.eu-west-1.amazonaws.com.cn/x.pem", {}));
  EXPECT_FALSE(SnsUrlAllowed("https://127.0.0.1:8443/x.pem", {}));
  EXPECT_TRUE(SnsUrlAllowed("https://127.0.0.1:8443/x.pem", {"127.0.0.1:8443"}));
  EXPECT_FALSE(SnsUrlAllowed("https://127.0.0.1:8444/x.pem", {"127.0.0.1:8443"}));
  EXPECT_FALSE(SnsUrlAllowed("http://127.0.0.1:8443/x.pem", {"127.0.0.1:8443"}));
}

TEST(SnsCertUrlAllowedTest, AwssCertificatePathOnAnSnsHost) {
  EXPECT_TRUE(SnsCertUrlAllowed(kCertUrl, {}));
  EXPECT_TRUE(
      SnsCertUrlAllowed("https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0.pem", {}));
  EXPECT_FALSE(SnsCertUrlAllowed("https://sns.us-east-1.amazonaws.com/x.der", {}));
  EXPECT_FALSE(SnsCertUrlAllowed("https://sns.us-east-1.amazonaws.com/?Action=x.pem", {}));
  EXPECT_FALSE(SnsCertUrlAllowed("https://sns.us-east-1.amazonaws.com/x.pem#y", {}));
  EXPECT_FALSE(SnsCertUrlAllowed("https://sns.s3.amazonaws.com/x.pem", {}));
  // Only AWS's path form: /SimpleNotificationService-<lower-case hex>.pem, nothing around it.
  for (const char* path :
       {"/x.pem", "/SimpleNotificationService-.pem", "/SimpleNotificationService-0g.pem",
        "/SimpleNotificationService-ABC.pem", "/a/SimpleNotificationService-0.pem",
        "/SimpleNotificationService-0.pem?x=1", "/SimpleNotificationService-0.pem#y",
        "/SimpleNotificationService-0.pem/", "/SimpleNotificationService-0.pem.pem",
        "/simplenotificationservice-0.pem", "//SimpleNotificationService-0.pem",
        "/SimpleNotificationService-0.pem%00"}) {
    EXPECT_FALSE(SnsCertUrlAllowed(absl::StrCat("https://sns.us-east-1.amazonaws.com", path), {}))
        << path;
  }
  EXPECT_FALSE(SnsCertUrlAllowed(
      absl::StrCat("https://sns.us-east-1.amazonaws.com/SimpleNotificationService-",
                   std::string(65, 'a'), ".pem"),
      {}));
  EXPECT_FALSE(SnsCertUrlAllowed(
      "https://sns.us-east-1.amazonaws.com?x/SimpleNotificationService-0.pem", {}));
  EXPECT_FALSE(SnsCertUrlAllowed(
      "https://sns.us-east-1.amazonaws.com#x/SimpleNotificationService-0.pem", {}));
  EXPECT_FALSE(SnsCertUrlAllowed("https://127.0.0.1:8443/c.pem", {"127.0.0.1:8443"}));
  EXPECT_TRUE(SnsCertUrlAllowed("https://127.0.0.1:8443/SimpleNotificationService-0.pem",
                                {"127.0.0.1:8443"}));
}

TEST(SnsUrlRegionTest, TheRegionOfAnSnsHostAndOfATopicArn) {
  EXPECT_EQ(SnsUrlRegion(kCertUrl), "us-east-1");
  EXPECT_EQ(SnsUrlRegion("https://sns.cn-north-1.amazonaws.com.cn/x.pem"), "cn-north-1");
  EXPECT_EQ(SnsUrlRegion("https://127.0.0.1:8443/x.pem"), "");
  EXPECT_EQ(TopicArnRegion("arn:aws:sns:eu-west-1:123456789012:t"), "eu-west-1");
  EXPECT_EQ(TopicArnRegion("arn:aws-cn:sns:cn-north-1:123456789012:t"), "cn-north-1");
  EXPECT_EQ(TopicArnRegion("arn:aws:sqs:eu-west-1:123456789012:t"), "");
  EXPECT_EQ(TopicArnRegion("eu-west-1"), "");
}

TEST(SnsCertificateNamesTest, SnsAndTheRegionalFormsOfTheUrlsRegion) {
  using ::testing::ElementsAre;
  EXPECT_THAT(SnsCertificateNames("https://sns.us-east-1.amazonaws.com/x.pem"),
              ElementsAre("sns.amazonaws.com", "sns-signing.us-east-1.amazonaws.com"));
  EXPECT_THAT(SnsCertificateNames("https://sns.cn-north-1.amazonaws.com.cn/x.pem"),
              ElementsAre("sns.amazonaws.com", "sns-cn-north-1.amazonaws.com.cn"));
  EXPECT_THAT(SnsCertificateNames("https://sns.us-gov-east-1.amazonaws.com/x.pem"),
              ElementsAre("sns.amazonaws.com", "sns-us-gov-west-1.amazonaws.com"));
  EXPECT_THAT(SnsCertificateNames("https://127.0.0.1:8443/c.pem"),
              ElementsAre("sns.amazonaws.com"));
}

TEST(ParseSnsMessageTest, NeedsAnObjectWithTypeAndMessageId) {
  EXPECT_EQ(ParseSnsMessage("not json").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSnsMessage("[1]").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSnsMessage(R"({"Type":"Notification"})").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto m = ParseSnsMessage(R"({"Type":"Notification","MessageId":"a","Subject":"s"})");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->has_subject);
}

TEST_F(SnsVerifierTest, ValidVersion1And2AreAcceptedAndTheCertificateIsCached) {
  SnsVerifier v = Verifier();
  SnsMessage v1 = signer_->Notification("m1", "{}", kCertUrl, now_, 1);
  SnsMessage v2 = signer_->Notification("m2", "{}", kCertUrl, now_, 2);
  EXPECT_TRUE(v.Verify(v1).ok()) << v.Verify(v1);
  EXPECT_TRUE(v.Verify(v2).ok()) << v.Verify(v2);
  SnsMessage c = signer_->Confirmation(
      "c1", "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription", kCertUrl, now_, 2);
  EXPECT_TRUE(v.Verify(c).ok()) << v.Verify(c);
  EXPECT_EQ(fetches_, 1);
  EXPECT_EQ(fetched_url_, kCertUrl);
}

TEST_F(SnsVerifierTest, AForgedMessageIsRefused) {
  SnsVerifier v = Verifier();
  SnsMessage m = signer_->Notification("m1", R"({"eventType":"Bounce"})", kCertUrl, now_);
  m.message = R"({"eventType":"Complaint"})";  // changed after signing
  absl::Status st = v.Verify(m);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(st.message(), HasSubstr("signature does not match"));
  // Signed as version 1, claimed as version 2.
  SnsMessage w = signer_->Notification("m2", "{}", kCertUrl, now_, 1);
  w.signature_version = "2";
  EXPECT_EQ(v.Verify(w).code(), absl::StatusCode::kPermissionDenied);
  // A signature that is not base64.
  SnsMessage b = signer_->Notification("m3", "{}", kCertUrl, now_);
  b.signature = "!!!";
  EXPECT_EQ(v.Verify(b).code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(SnsVerifierTest, UnsignedUnknownTypeOrVersionIsRefused) {
  SnsVerifier v = Verifier();
  SnsMessage m = signer_->Notification("m1", "{}", kCertUrl, now_);
  SnsMessage unsigned_m = m;
  unsigned_m.signature.clear();
  EXPECT_THAT(v.Verify(unsigned_m).message(), HasSubstr("unsigned"));
  SnsMessage no_url = m;
  no_url.signing_cert_url.clear();
  EXPECT_THAT(v.Verify(no_url).message(), HasSubstr("unsigned"));
  SnsMessage version3 = m;
  version3.signature_version = "3";
  EXPECT_THAT(v.Verify(version3).message(), HasSubstr("SignatureVersion"));
  SnsMessage other = m;
  other.type = "Advertisement";
  EXPECT_THAT(v.Verify(other).message(), HasSubstr("unknown message type"));
  for (const SnsMessage& x : {unsigned_m, no_url, version3, other}) {
    EXPECT_EQ(v.Verify(x).code(), absl::StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(fetches_, 0);
}

TEST_F(SnsVerifierTest, ACertificateFromAnotherHostOrOverHttpIsNeverFetched) {
  SnsVerifier v = Verifier();
  for (const char* url :
       {"https://evil.test/cert.pem", "http://sns.us-east-1.amazonaws.com/c.pem",
        "https://sns.us-east-1.amazonaws.com.evil.test/c.pem", "https://sns.s3.amazonaws.com/x.pem",
        "https://sns.s3-accelerate.amazonaws.com/x.pem",
        "https://sns.us-east-1.amazonaws.com/made-up.pem",
        "https://sns.us-east-1.amazonaws.com/x/SimpleNotificationService-0.pem",
        // An SNS host of another region than the TopicArn's (us-east-1).
        "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-0.pem",
        "https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-0.pem"}) {
    SnsMessage m = signer_->Notification("m1", "{}", url, now_);
    absl::Status st = v.Verify(m);
    EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << url;
    EXPECT_THAT(st.message(), HasSubstr("SigningCertURL")) << url;
  }
  EXPECT_EQ(fetches_, 0);
  // The allow-list (tests) admits its host.
  SnsVerifierOptions o = Topic();
  o.extra_hosts = {"127.0.0.1:8443"};
  SnsVerifier allowed = Verifier(o);
  EXPECT_TRUE(allowed
                  .Verify(signer_->Notification(
                      "m2", "{}", "https://127.0.0.1:8443/SimpleNotificationService-0.pem", now_))
                  .ok());
}

TEST_F(SnsVerifierTest, ExpiredOrFutureMessagesAreRefused) {
  SnsVerifier v = Verifier();
  SnsMessage old = signer_->Notification("m1", "{}", kCertUrl, now_ - absl::Minutes(61));
  EXPECT_THAT(v.Verify(old).message(), HasSubstr("expired"));
  EXPECT_EQ(v.Verify(old).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(v.Verify(signer_->Notification("m2", "{}", kCertUrl, now_ - absl::Minutes(59))).ok());
  SnsMessage future = signer_->Notification("m3", "{}", kCertUrl, now_ + absl::Minutes(6));
  EXPECT_THAT(v.Verify(future).message(), HasSubstr("future"));
  SnsMessage garbage = signer_->Notification("m4", "{}", kCertUrl, now_);
  garbage.timestamp = "yesterday";
  signer_->Sign(garbage, 2);
  EXPECT_EQ(v.Verify(garbage).code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(SnsVerifierTest, AnUntrustedCertificateOrTopicIsRefused) {
  // Signed by another CA's certificate: the chain does not reach the trust store.
  testing::SnsSigner stranger;
  SnsVerifierOptions o = Topic();
  o.ca_file = CaFile();
  SnsVerifier v(
      o, [&](const std::string&) -> absl::StatusOr<std::string> { return stranger.cert_pem(); },
      [this] { return now_; });
  absl::Status st = v.Verify(stranger.Notification("m1", "{}", kCertUrl, now_));
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(st.message(), HasSubstr("not trusted"));

  // A certificate that cannot be fetched is a retryable problem, not a forgery.
  SnsVerifier unreachable(
      Topic(),
      [](const std::string&) -> absl::StatusOr<std::string> {
        return absl::UnavailableError("connection refused");
      },
      [this] { return now_; });
  EXPECT_EQ(unreachable.Verify(signer_->Notification("m3", "{}", kCertUrl, now_)).code(),
            absl::StatusCode::kUnavailable);
}

// SNS serves its certificate alone; the intermediate that issued it is fetched from the
// certificate's caIssuers URL (only on amazontrust.com or the allow-list) and must chain up.
TEST_F(SnsVerifierTest, TheMissingIntermediateIsFetchedFromAnAmazonTrustHostOnly) {
  constexpr char kIssuerUrl[] = "http://crt.r2m02.amazontrust.com/r2m02.cer";
  testing::SnsSigner chained(kIssuerUrl);
  SnsVerifierOptions o = Topic();
  const std::string ca_path = std::string(getenv("TEST_TMPDIR")) + "/chained_ca.pem";
  FILE* f = fopen(ca_path.c_str(), "w");
  fputs(chained.ca_pem().c_str(), f);
  fclose(f);
  o.ca_file = ca_path;
  auto leaf = [&](const std::string&) -> absl::StatusOr<std::string> { return chained.cert_pem(); };
  std::vector<std::string> issuer_fetches;
  auto issuer = [&](const std::string& url) -> absl::StatusOr<std::string> {
    issuer_fetches.push_back(url);
    return chained.intermediate_der();
  };
  // Without an issuer fetcher: the chain is incomplete.
  SnsVerifier without(o, leaf, [this] { return now_; });
  EXPECT_THAT(without.Verify(chained.Notification("m1", "{}", kCertUrl, now_)).message(),
              HasSubstr("not trusted"));
  SnsVerifier with(
      o, leaf, [this] { return now_; }, issuer);
  EXPECT_TRUE(with.Verify(chained.Notification("m2", "{}", kCertUrl, now_)).ok());
  EXPECT_THAT(issuer_fetches, ::testing::ElementsAre(kIssuerUrl));
  // Another host's caIssuers URL is never fetched.
  testing::SnsSigner elsewhere("http://evil.test/int.cer");
  SnsVerifierOptions eo = o;
  SnsVerifier evil(
      eo, [&](const std::string&) -> absl::StatusOr<std::string> { return elsewhere.cert_pem(); },
      [this] { return now_; }, issuer);
  EXPECT_EQ(evil.Verify(elsewhere.Notification("m3", "{}", kCertUrl, now_)).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(issuer_fetches.size(), 1u);
}

// The issuer's fetch is part of the certificate's, which the cap allowed: it is counted but not
// refused, so the second fetch of a second (made-up URLs took the first) still verifies.
TEST_F(SnsVerifierTest, TheIssuerOfACertificateTheCapAllowedIsFetchedBeyondIt) {
  constexpr char kIssuerUrl[] = "http://crt.r2m02.amazontrust.com/r2m02.cer";
  testing::SnsSigner chained(kIssuerUrl);
  SnsVerifierOptions o = Topic();
  const std::string ca_path = std::string(getenv("TEST_TMPDIR")) + "/chained_ca_capped.pem";
  FILE* f = fopen(ca_path.c_str(), "w");
  fputs(chained.ca_pem().c_str(), f);
  fclose(f);
  o.ca_file = ca_path;
  std::vector<std::string> fetched;
  SnsVerifier v(
      o,
      [&](const std::string& url) -> absl::StatusOr<std::string> {
        fetched.push_back(url);
        if (url != kCertUrl) return absl::NotFoundError("https get: HTTP 404");
        return chained.cert_pem();
      },
      [this] { return now_; },
      [&](const std::string& url) -> absl::StatusOr<std::string> {
        fetched.push_back(url);
        return chained.intermediate_der();
      });
  auto made_up = [&](int i) {
    return v.Verify(chained.Notification(
        "x", "{}",
        absl::StrCat("https://sns.us-east-1.amazonaws.com/SimpleNotificationService-", i, ".pem"),
        now_));
  };
  EXPECT_EQ(made_up(1).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(v.Verify(chained.Notification("g", "{}", kCertUrl, now_)).ok());
  EXPECT_EQ(made_up(2).code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(fetched,
              ::testing::ElementsAre(::testing::HasSubstr("-1.pem"), kCertUrl, kIssuerUrl));
}

// Only the operator's topics: a correctly signed message from any other topic (another AWS
// account's, which anyone can create) is refused before its certificate is fetched; with no
// topic listed, every message is refused.
TEST_F(SnsVerifierTest, AnotherTopicIsRefusedWithoutAFetch) {
  SnsMessage theirs = signer_->Notification("m1", "{}", kCertUrl, now_);
  theirs.topic_arn = "arn:aws:sns:us-east-1:666666666666:attackers-own-topic";
  signer_->Sign(theirs, 2);
  SnsVerifier v = Verifier();
  absl::Status st = v.Verify(theirs);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(st.message(), HasSubstr("TopicArn not allowed"));
  EXPECT_EQ(fetches_, 0);
  SnsVerifier none = Verifier(SnsVerifierOptions{});
  EXPECT_THAT(none.Verify(signer_->Notification("m2", "{}", kCertUrl, now_)).message(),
              HasSubstr("TopicArn not allowed"));
  EXPECT_EQ(fetches_, 0);
  EXPECT_TRUE(v.Verify(signer_->Notification("m3", "{}", kCertUrl, now_)).ok());
  EXPECT_EQ(fetches_, 1);
}

// A certificate that chains to the trust store but does not name SNS is refused; the name may
// be the subject CN or a DNS subjectAltName, exactly.
TEST_F(SnsVerifierTest, ACertificateThatDoesNotNameSnsIsRefused) {
  struct Case {
    std::string cn, dns;
    bool accepted;
  };
  const Case cases[] = {{"not-sns.evil.example", "", false},
                        {"sns.amazonaws.com.evil.example", "", false},
                        {"evil.sns.amazonaws.com", "", false},
                        {"*.amazonaws.com", "", false},
                        {"sns.us-east-1.amazonaws.com", "", false},
                        {"sns-signing.us-east-1.amazonaws.com", "", true},
                        {"mailroom test", "sns.amazonaws.com", true},
                        {"SNS.amazonaws.com", "", true}};
  for (const Case& c : cases) {
    const std::string pem = signer_->CertificateNamed(c.cn, c.dns);
    SnsVerifierOptions o = Topic();
    o.ca_file = CaFile();
    SnsVerifier v(
        o, [&](const std::string&) -> absl::StatusOr<std::string> { return pem; },
        [this] { return now_; });
    absl::Status st = v.Verify(signer_->Notification("m", "{}", kCertUrl, now_));
    if (c.accepted) {
      EXPECT_TRUE(st.ok()) << c.cn << " " << st;
    } else {
      EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << c.cn;
      EXPECT_THAT(st.message(), HasSubstr("does not name sns.amazonaws.com")) << c.cn;
    }
  }
}

// A URL that failed for good (the SNS host answered 404) is not fetched again for a minute, and
// at most two fetches start per second whatever the URLs: unauthenticated POSTs cannot make the
// collector fetch without bound.
TEST_F(SnsVerifierTest, DefiniteFailuresAreRememberedAndFetchesAreCapped) {
  int fetches = 0;
  SnsVerifierOptions o = Topic();
  o.ca_file = CaFile();
  SnsVerifier v(
      o,
      [&](const std::string&) -> absl::StatusOr<std::string> {
        ++fetches;
        return absl::NotFoundError("https get: HTTP 404");
      },
      [this] { return now_; });
  auto post = [&](const std::string& url) {
    return v.Verify(signer_->Notification("m", "{}", url, now_));
  };
  auto made_up = [](int i) {
    return absl::StrCat("https://sns.us-east-1.amazonaws.com/SimpleNotificationService-",
                        absl::Hex(i), ".pem");
  };
  const std::string same = made_up(0xdead);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(post(same).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(fetches, 1);
  now_ += absl::Seconds(59);
  EXPECT_EQ(post(same).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(fetches, 1);
  now_ += absl::Seconds(1);
  EXPECT_EQ(post(same).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(fetches, 2);
  // 100 different URLs within one second: the one left in this second's window (403), then
  // none (503).
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(post(made_up(i)).code(),
              i == 0 ? absl::StatusCode::kPermissionDenied : absl::StatusCode::kUnavailable);
  }
  EXPECT_EQ(fetches, 3);
  now_ += absl::Seconds(1);
  for (int i = 100; i < 200; ++i) (void)post(made_up(i));
  EXPECT_EQ(fetches, 5);
  // A URL refused by the cap and asked for again outranks those asked for once: the next fetch
  // the cap allows is its.
  now_ += absl::Seconds(1);
  EXPECT_EQ(post(made_up(150)).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(fetches, 6);
  // A certificate that does not verify is remembered too.
  testing::SnsSigner stranger;
  int stranger_fetches = 0;
  SnsVerifier w(
      o,
      [&](const std::string&) -> absl::StatusOr<std::string> {
        ++stranger_fetches;
        return stranger.cert_pem();
      },
      [this] { return now_; });
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(w.Verify(stranger.Notification("m", "{}", kCertUrl, now_)).code(),
              absl::StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(stranger_fetches, 1);
}

// A fetch that fails for a reason that may pass (a timeout, 5xx) is not remembered as the URL's
// failure for a minute: the URL is fetched again after 5 s, the first time even when strangers'
// made-up URLs have used up the second's fetches, so SNS's retry (about 20 s later) verifies.
TEST_F(SnsVerifierTest, ATransientFailureIsRetriedSoonEvenWhenTheCapIsUsedUp) {
  std::vector<std::string> fetched;
  bool down = true;
  SnsVerifierOptions o = Topic();
  o.ca_file = CaFile();
  SnsVerifier v(
      o,
      [&](const std::string& url) -> absl::StatusOr<std::string> {
        fetched.push_back(url);
        if (url == kCertUrl && !down) return signer_->cert_pem();
        if (url == kCertUrl) return absl::UnavailableError("https get: HTTP 503");
        return absl::NotFoundError("https get: HTTP 404");
      },
      [this] { return now_; });
  EXPECT_EQ(v.Verify(signer_->Notification("g", "{}", kCertUrl, now_)).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(v.Verify(signer_->Notification("g", "{}", kCertUrl, now_)).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(fetched.size(), 1u);  // held back for 5 s
  down = false;
  now_ += o.transient_retry - absl::Milliseconds(1);
  EXPECT_EQ(v.Verify(signer_->Notification("g", "{}", kCertUrl, now_)).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(fetched.size(), 1u);
  now_ += absl::Milliseconds(1);
  // A stranger spends this second's fetches on made-up URLs first.
  for (int i = 0; i < 10; ++i) {
    (void)v.Verify(signer_->Notification(
        "x", "{}",
        absl::StrCat("https://sns.us-east-1.amazonaws.com/SimpleNotificationService-", i, ".pem"),
        now_));
  }
  ASSERT_EQ(fetched.size(), 3u);
  EXPECT_TRUE(v.Verify(signer_->Notification("g", "{}", kCertUrl, now_)).ok());
  EXPECT_EQ(fetched.size(), 4u);
  EXPECT_EQ(fetched.back(), kCertUrl);
}

// SNS's posts against a stranger who posts 20 fresh made-up certificate URLs on the topic's SNS
// host every second (each fails for good: 404). SNS posts a notification at `first_posts` and,
// while it is refused, again every 20 s, 3 times. Returns, per notification, how many retries it
// took to verify (-1: never), with every fetch's time and the genuine certificate's fetch time.
struct Flood {
  std::vector<int> retries;
  std::vector<absl::Time> fetches;
  absl::Time genuine_fetched = absl::InfinitePast();
};
Flood PostDuringAFlood(testing::SnsSigner& signer, const std::string& ca_file,
                       const std::vector<absl::Duration>& first_posts, absl::Duration length) {
  const absl::Time start = absl::Now();
  absl::Time now = start;
  Flood out;
  SnsVerifierOptions o;
  o.topic_arns = {testing::kTopicArn};
  o.ca_file = ca_file;
  SnsVerifier v(
      o,
      [&](const std::string& url) -> absl::StatusOr<std::string> {
        out.fetches.push_back(now);
        if (url != kCertUrl) return absl::NotFoundError("https get: HTTP 404");
        out.genuine_fetched = now;
        return signer.cert_pem();
      },
      [&] { return now; });
  constexpr absl::Duration kTick = absl::Milliseconds(25);
  out.retries.assign(first_posts.size(), -1);
  int made_up = 0;
  for (absl::Duration t; t < length; t += kTick) {
    now = start + t;
    if ((t / kTick) % 2 == 0) {  // the stranger, every 50 ms
      (void)v.Verify(signer.Notification(
          "x", "{}",
          absl::StrCat("https://sns.us-east-1.amazonaws.com/SimpleNotificationService-",
                       absl::Hex(++made_up), ".pem"),
          now));
    }
    for (size_t n = 0; n < first_posts.size(); ++n) {
      for (int retry = 0; retry <= 3 && out.retries[n] < 0; ++retry) {
        if (t != first_posts[n] + retry * absl::Seconds(20)) continue;
        if (v.Verify(
                 signer.Notification(absl::StrCat("n", n), "{}", kCertUrl, start + first_posts[n]))
                .ok()) {
          out.retries[n] = retry;
        }
      }
    }
  }
  return out;
}

// A fetch the cap allows goes to the waiting URL most posts asked for. A stranger's made-up URLs
// are asked for once each; SNS's certificate URL is asked for by every notification and every
// retry, so its second post puts it first and it is fetched within a second: a burst of
// notifications verifies by its first retry, a lone notification by its second. The stranger's
// posts still get no more than 2 fetches in any one second.
TEST_F(SnsVerifierTest, SnssCertificateIsFetchedWhileAStrangerPostsMadeUpUrls) {
  const absl::Duration length = absl::Seconds(120);
  // SNS posts after the stranger's first two in a second, which use up its fetches.
  const absl::Duration burst = absl::Milliseconds(10075);
  Flood f = PostDuringAFlood(*signer_, CaFile(),
                             {burst, burst + absl::Milliseconds(500), burst + absl::Seconds(1)},
                             length);
  EXPECT_THAT(f.retries, ::testing::Each(::testing::AllOf(::testing::Ge(0), ::testing::Le(1))));
  ASSERT_NE(f.genuine_fetched, absl::InfinitePast());
  EXPECT_LE(f.genuine_fetched - f.fetches.front(),
            burst + absl::Milliseconds(500) + absl::Seconds(1));
  // The cap: every second, 2 fetches and no more.
  EXPECT_EQ(f.fetches.size(), 2 * absl::ToInt64Seconds(length));
  for (size_t i = 2; i < f.fetches.size(); ++i) {
    EXPECT_GE(f.fetches[i] - f.fetches[i - 2], absl::Seconds(1)) << i;
  }

  Flood lone = PostDuringAFlood(*signer_, CaFile(), {burst}, length);
  EXPECT_THAT(lone.retries, ::testing::ElementsAre(2));
  EXPECT_LE(lone.genuine_fetched - lone.fetches.front(), burst + absl::Seconds(21));
}

// URLs refused by the cap wait in a table of 1,024, which drops the least recently asked: a URL
// asked for again while fewer than 1,024 other URLs were asked for since keeps its asks (its
// second puts it first and it gets the next fetch); after 1,024 others it was dropped.
TEST_F(SnsVerifierTest, WaitingUrlsAreBoundedAndTheLeastRecentlyAskedIsDropped) {
  for (const int others : {1023, 1024}) {
    std::vector<std::string> fetched;
    SnsVerifierOptions o = Topic();
    o.ca_file = CaFile();
    SnsVerifier v(
        o,
        [&](const std::string& url) -> absl::StatusOr<std::string> {
          fetched.push_back(url);
          if (url != kCertUrl) return absl::NotFoundError("https get: HTTP 404");
          return signer_->cert_pem();
        },
        [this] { return now_; });
    int made_up = 0;
    auto stranger = [&] {
      return v.Verify(signer_->Notification(
          "x", "{}",
          absl::StrCat("https://sns.us-east-1.amazonaws.com/SimpleNotificationService-",
                       absl::Hex(++made_up), ".pem"),
          now_));
    };
    auto genuine = [&] { return v.Verify(signer_->Notification("g", "{}", kCertUrl, now_)); };
    while (stranger().code() != absl::StatusCode::kUnavailable) {
    }
    EXPECT_EQ(genuine().code(), absl::StatusCode::kUnavailable);
    for (int i = 0; i < others; ++i) EXPECT_EQ(stranger().code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(genuine().code(), absl::StatusCode::kUnavailable);
    now_ += absl::Seconds(1);
    EXPECT_EQ(stranger().code(), absl::StatusCode::kUnavailable);  // its fetch: the first waiting
    ASSERT_EQ(fetched.size(), 3u) << others;
    EXPECT_EQ(fetched.back() == kCertUrl, others == 1023);
  }
}

// A certificate being fetched is not fetched again by the posts that arrive meanwhile (503,
// SNS retries): they would spend the cap on a certificate already coming.
TEST_F(SnsVerifierTest, ACertificateBeingFetchedIsNotFetchedAgain) {
  std::atomic<int> fetches{0};
  absl::Notification started, release;
  SnsVerifierOptions o = Topic();
  o.ca_file = CaFile();
  SnsVerifier v(
      o,
      [&](const std::string&) -> absl::StatusOr<std::string> {
        if (++fetches == 1) {
          started.Notify();
          release.WaitForNotification();
        }
        return signer_->cert_pem();
      },
      [this] { return now_; });
  const SnsMessage m = signer_->Notification("g", "{}", kCertUrl, now_);
  absl::Status first;
  std::thread fetching([&] { first = v.Verify(m); });
  started.WaitForNotification();
  EXPECT_EQ(v.Verify(m).code(), absl::StatusCode::kUnavailable);
  release.Notify();
  fetching.join();
  EXPECT_TRUE(first.ok()) << first;
  EXPECT_TRUE(v.Verify(m).ok());
  EXPECT_EQ(fetches, 1);
}

}  // namespace
}  // namespace mailroom
