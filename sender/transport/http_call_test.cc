// What an HTTP API's answer means beyond its body: the wait a provider asks for (RetryAfter)
// and the status of each HTTP code (HttpApiStatus). The transfer itself runs against real
// peers in conformance_test.
#include "sender/transport/http_call.h"

#include "gtest/gtest.h"
#include "sender/transport/transport.h"

namespace mailroom {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1767225600);  // 2026-01-01 00:00:00 UTC

OutboundAnswer With(std::vector<std::pair<std::string, std::string>> headers) {
  OutboundAnswer a;
  a.status = 429;
  a.headers = std::move(headers);
  return a;
}

TEST(RetryAfterTest, SecondsAnHttpDateOrSendgridsResetTime) {
  EXPECT_EQ(RetryAfter(With({{"retry-after", "30"}}), kNow), absl::Seconds(30));
  EXPECT_EQ(RetryAfter(With({{"retry-after", "0"}}), kNow), absl::ZeroDuration());
  EXPECT_EQ(RetryAfter(With({{"retry-after", "Thu, 01 Jan 2026 00:00:45 GMT"}}), kNow),
            absl::Seconds(45));
  // A date already past: no wait.
  EXPECT_EQ(RetryAfter(With({{"retry-after", "Wed, 31 Dec 2025 23:00:00 GMT"}}), kNow),
            absl::ZeroDuration());
  EXPECT_EQ(RetryAfter(With({{"x-ratelimit-reset", "1767225612"}}), kNow), absl::Seconds(12));
  // Retry-After first when both are there.
  EXPECT_EQ(RetryAfter(With({{"x-ratelimit-reset", "1767225612"}, {"retry-after", "2"}}), kNow),
            absl::Seconds(2));
  // Absurd values are bounded (a year), never negative.
  EXPECT_EQ(RetryAfter(With({{"retry-after", "99999999999"}}), kNow), absl::Hours(366 * 24));
}

TEST(RetryAfterTest, NoneOrAnythingElseIsNoWait) {
  EXPECT_EQ(RetryAfter(With({}), kNow), std::nullopt);
  for (const char* v : {"-5", "soon", "1.5", "", "Thu, 01 Jan 2026"}) {
    EXPECT_EQ(RetryAfter(With({{"retry-after", v}}), kNow), std::nullopt) << v;
  }
  EXPECT_EQ(RetryAfter(With({{"x-ratelimit-reset", "tomorrow"}}), kNow), std::nullopt);
}

TEST(RetryAfterTest, TheWaitTravelsOnTheStatus) {
  absl::Status st = WithRetryAfter(ProviderError("resend 429"), absl::Milliseconds(2500));
  EXPECT_TRUE(IsProviderError(st));
  EXPECT_EQ(ProviderRetryAfter(st), absl::Milliseconds(2500));
  EXPECT_EQ(ProviderRetryAfter(WithRetryAfter(ProviderError("x"), std::nullopt)), std::nullopt);
  EXPECT_TRUE(WithRetryAfter(absl::OkStatus(), absl::Seconds(1)).ok());
  EXPECT_EQ(ProviderRetryAfter(absl::UnavailableError("451")), std::nullopt);
}

TEST(HttpApiStatusTest, EachCodeMeansWhatTheHeaderSays) {
  EXPECT_TRUE(HttpApiStatus(202, "").ok());
  for (long code : {408L, 429L, 500L, 503L, 401L, 403L, 404L, 301L}) {
    EXPECT_TRUE(IsProviderError(HttpApiStatus(code, "x"))) << code;
  }
  EXPECT_EQ(HttpApiStatus(409, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(IsProviderError(HttpApiStatus(409, "x")));
  EXPECT_EQ(HttpApiStatus(422, "x").code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mailroom
