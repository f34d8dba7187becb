// The SES transport against the SES v2 emulator (npm aws-ses-v2-local) behind a front that
// checks SigV4 and throttles; the map from SES answers to Status.
#include "sender/transport/ses_transport.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sender/transport/testing/transport_peers.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using transport_testing::Email;
using transport_testing::TransportTest;

TEST_F(TransportTest, SesEmulatorStoresTheRawMessage) {
  if (NodeModules().empty()) GTEST_SKIP() << "MAILROOM_NODE_MODULES not set (run .ci/test)";
  SesTransport t(Ses(StartSes(0, /*direct=*/true)));
  auto r = t.Send(Email("ses@example.test", 7));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->provider_id.empty());
  std::string store = SesStore();
  EXPECT_THAT(store, HasSubstr("ses@example.test"));
  EXPECT_THAT(store, HasSubstr("test 7"));
}

TEST_F(TransportTest, SesSignatureIsVerifiedByTheFront) {
  if (NodeModules().empty()) GTEST_SKIP() << "MAILROOM_NODE_MODULES not set (run .ci/test)";
  std::string endpoint = StartSes(0);
  SesTransport good(Ses(endpoint));
  auto ok = good.Send(Email("signed@example.test"));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(SesStore(), HasSubstr("signed@example.test"));
  SesTransport bad(Ses(endpoint, "not-the-secret-key-at-all"));
  auto denied = bad.Send(Email("forged@example.test"));
  EXPECT_TRUE(IsProviderError(denied.status())) << denied.status();
  EXPECT_THAT(std::string(denied.status().message()), HasSubstr("403 SignatureDoesNotMatch"));
  EXPECT_THAT(std::string(denied.status().message()), Not(HasSubstr("not-the-secret")));
  EXPECT_THAT(SesStore(), Not(HasSubstr("forged@example.test")));
}

TEST_F(TransportTest, SesThrottlingIsRetryable) {
  if (NodeModules().empty()) GTEST_SKIP() << "MAILROOM_NODE_MODULES not set (run .ci/test)";
  SesTransport t(Ses(StartSes(2)));
  for (int i = 0; i < 2; ++i) {
    auto r = t.Send(Email("slow@example.test"));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
    EXPECT_FALSE(IsProviderError(r.status())) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("TooManyRequestsException"));
  }
  EXPECT_TRUE(t.Send(Email("slow@example.test")).ok());
}

TEST_F(TransportTest, SesATimeoutAfterTheRequestLeftMayHaveBeenSent) {
  if (NodeModules().empty()) GTEST_SKIP() << "MAILROOM_NODE_MODULES not set (run .ci/test)";
  // The front accepts the first message to each recipient and answers 3 s later.
  const std::string endpoint = StartSes(0, false, {"--slow-first-ms", "3000"});
  TransportConfig c = Ses(endpoint);
  c.timeout = absl::Seconds(30);
  SesTransport t(c);
  OutgoingEmail email = Email("slow@example.test");
  email.timeout = absl::Seconds(1);  // what the job's lease leaves: it caps the 30 s
  const absl::Time start = absl::Now();
  auto r = t.Send(email);
  ASSERT_FALSE(r.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_TRUE(IsMaybeSent(r.status())) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("(curl 28)"));
  EXPECT_THAT(SesStore(), HasSubstr("slow@example.test"));  // it was accepted
  ASSERT_TRUE(t.Send(email).ok());                          // the second answer is prompt
  // Nothing left when the provider cannot be reached at all.
  TransportConfig down = Ses(absl::StrCat("http://127.0.0.1:", ::mailroom::testing::FreePort()));
  auto refused = SesTransport(down).Send(email);
  EXPECT_TRUE(IsProviderError(refused.status())) << refused.status();
  EXPECT_FALSE(IsMaybeSent(refused.status()));
}

TEST(SesResponseTest, RecipientRejectionsFailThrottlingWaitsProviderProblemsHold) {
  EXPECT_TRUE(SesTransport::ResponseStatus(200, "", "{}").ok());
  auto rejected = SesTransport::ResponseStatus(400, "MessageRejected",
                                               "{\"message\":\"Email address is not verified.\"}");
  EXPECT_EQ(rejected.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rejected.message(), "ses 400 MessageRejected: Email address is not verified.");
  EXPECT_EQ(SesTransport::ResponseStatus(400, "", "{\"__type\":\"com.amazon#BadRequestException\"}")
                .code(),
            absl::StatusCode::kInvalidArgument);
  for (auto throttled : {SesTransport::ResponseStatus(400, "LimitExceededException", ""),
                         SesTransport::ResponseStatus(429, "TooManyRequestsException", "")}) {
    EXPECT_EQ(throttled.code(), absl::StatusCode::kUnavailable);
    EXPECT_FALSE(IsProviderError(throttled)) << throttled;
  }
  struct Case {
    long http;
    const char* type;
  };
  for (Case c : {Case{503, ""}, Case{500, "InternalFailure"}, Case{403, ""},
                 Case{403, "SignatureDoesNotMatch"}, Case{403, "InvalidSignatureException"},
                 Case{403, "RequestTimeTooSkewed"}, Case{400, "RequestExpired"},
                 Case{403, "InvalidClientTokenId"}, Case{403, "AccessDeniedException"},
                 Case{400, "SendingPausedException"}, Case{400, "AccountSuspendedException"},
                 Case{400, "MailFromDomainNotVerifiedException"}, Case{404, "NotFoundException"},
                 Case{401, ""}}) {
    auto st = SesTransport::ResponseStatus(c.http, c.type, "{\"message\":\"why\"}");
    EXPECT_TRUE(IsProviderError(st)) << c.http << " " << c.type << ": " << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.type));
    EXPECT_THAT(std::string(st.message()), HasSubstr("why"));
  }
}

}  // namespace
}  // namespace mailroom
