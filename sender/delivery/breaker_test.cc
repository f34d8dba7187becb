#include "sender/delivery/breaker.h"

#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"
#include "sender/transport/transport.h"

namespace mailroom {
namespace {

using D = Breaker::Decision;

class BreakerTest : public ::testing::Test {
 protected:
  BreakerTest()
      : clock_(absl::FromUnixSeconds(1700000000)), breaker_(Options(), &clock_, &metrics_) {}
  static Breaker::Options Options() {
    Breaker::Options o;
    o.initial_backoff = absl::Seconds(1);
    o.max_backoff = absl::Seconds(8);
    return o;
  }
  void Trip() {
    auto t = breaker_.Admit();
    ASSERT_EQ(t.decision, D::kSend);
    breaker_.Record(t, ProviderError("smtp AUTH: 535 5.7.8 Authentication credentials invalid"));
  }
  FakeClock clock_;
  Metrics metrics_;
  Breaker breaker_;
};

TEST_F(BreakerTest, ClosedSendsAndRecipientErrorsDoNotOpen) {
  for (int i = 0; i < 5; ++i) {
    auto t = breaker_.Admit();
    EXPECT_EQ(t.decision, D::kSend);
    breaker_.Record(t, absl::InvalidArgumentError("smtp RCPT: 550 5.1.1 <x>: user unknown"));
  }
  auto t = breaker_.Admit();
  breaker_.Record(t, absl::UnavailableError("smtp RCPT: 451 4.3.0 try later"));
  EXPECT_FALSE(breaker_.open());
  EXPECT_EQ(breaker_.trips(), 0);
}

TEST_F(BreakerTest, ProviderErrorOpensAndHoldsEverythingUntilTheFirstProbe) {
  Trip();
  EXPECT_TRUE(breaker_.open());
  EXPECT_EQ(breaker_.trips(), 1);
  EXPECT_EQ(breaker_.reason(), "smtp AUTH: 535 5.7.8 Authentication credentials invalid");
  EXPECT_EQ(breaker_.NextProbe(), clock_.Now() + absl::Seconds(1));
  EXPECT_EQ(breaker_.Admit().decision, D::kHold);
  clock_.Advance(absl::Milliseconds(999));
  EXPECT_EQ(breaker_.Admit().decision, D::kHold);
  clock_.Advance(absl::Milliseconds(1));
  auto probe = breaker_.Admit();
  EXPECT_EQ(probe.decision, D::kProbe);
  // One probe at a time.
  EXPECT_EQ(breaker_.Admit().decision, D::kHold);
  clock_.Advance(absl::Seconds(100));
  EXPECT_EQ(breaker_.Admit().decision, D::kHold);
}

// A provider that says how long to wait is waited for, when longer than our own backoff, up to
// max_backoff (8 s here): a 429's Retry-After: 3 puts the first probe 3 s out, not 1 s.
TEST_F(BreakerTest, TheProvidersRetryAfterIsWaitedForUpToTheCap) {
  auto t = breaker_.Admit();
  breaker_.Record(t, WithRetryAfter(ProviderError("postmark 429: Rate limit exceeded"),
                                    absl::Seconds(3)));
  EXPECT_EQ(breaker_.NextProbe(), clock_.Now() + absl::Seconds(3));
  clock_.Advance(absl::Seconds(3) - absl::Milliseconds(1));
  EXPECT_EQ(breaker_.Admit().decision, D::kHold);
  clock_.Advance(absl::Milliseconds(1));
  auto probe = breaker_.Admit();
  ASSERT_EQ(probe.decision, D::kProbe);
  // An hour asked for: the cap. Shorter than our own backoff (2 s now): ours.
  breaker_.Record(probe, WithRetryAfter(ProviderError("sendgrid 429"), absl::Hours(1)));
  EXPECT_EQ(breaker_.NextProbe(), clock_.Now() + absl::Seconds(8));
  clock_.Advance(absl::Seconds(8));
  probe = breaker_.Admit();
  ASSERT_EQ(probe.decision, D::kProbe);
  breaker_.Record(probe, WithRetryAfter(ProviderError("sendgrid 429"), absl::Milliseconds(10)));
  EXPECT_EQ(breaker_.NextProbe(), clock_.Now() + absl::Seconds(4));
}

TEST_F(BreakerTest, FailedProbesDoubleTheWaitUpToTheCap) {
  Trip();
  absl::Duration want = absl::Seconds(1);
  for (int i = 0; i < 6; ++i) {
    clock_.Advance(want);
    auto probe = breaker_.Admit();
    ASSERT_EQ(probe.decision, D::kProbe) << i;
    breaker_.Record(probe, ProviderError("ses 400 SendingPausedException: paused"));
    want = std::min(want * 2, absl::Seconds(8));
    EXPECT_EQ(breaker_.NextProbe(), clock_.Now() + want) << i;
    clock_.Advance(want - absl::Milliseconds(1));
    EXPECT_EQ(breaker_.Admit().decision, D::kHold) << i;
    clock_.Advance(-(want - absl::Milliseconds(1)));
  }
  EXPECT_TRUE(breaker_.open());
  EXPECT_EQ(breaker_.trips(), 1);  // failed probes are not new trips
  EXPECT_EQ(breaker_.reason(), "ses 400 SendingPausedException: paused");
}

TEST_F(BreakerTest, SuccessfulProbeClosesAndAStaleResultCannotReopen) {
  auto before = breaker_.Admit();  // in flight when the breaker trips
  Trip();
  clock_.Advance(absl::Seconds(1));
  auto probe = breaker_.Admit();
  ASSERT_EQ(probe.decision, D::kProbe);
  breaker_.Record(probe, absl::OkStatus());
  EXPECT_FALSE(breaker_.open());
  EXPECT_EQ(breaker_.Admit().decision, D::kSend);
  breaker_.Record(before, ProviderError("connection refused"));
  EXPECT_FALSE(breaker_.open());
  // A fresh trip starts again from the initial backoff.
  Trip();
  EXPECT_EQ(breaker_.NextProbe(), clock_.Now() + absl::Seconds(1));
  EXPECT_EQ(breaker_.trips(), 2);
}

TEST_F(BreakerTest, ProbeRejectedForItsOwnRecipientStillCloses) {
  Trip();
  clock_.Advance(absl::Seconds(1));
  auto probe = breaker_.Admit();
  breaker_.Record(probe, absl::InvalidArgumentError("smtp RCPT: 550 5.1.1 <x>: user unknown"));
  EXPECT_FALSE(breaker_.open());
}

TEST_F(BreakerTest, CancelledProbeFreesTheSlot) {
  Trip();
  clock_.Advance(absl::Seconds(1));
  auto probe = breaker_.Admit();
  ASSERT_EQ(probe.decision, D::kProbe);
  breaker_.Cancel(probe);
  EXPECT_EQ(breaker_.Admit().decision, D::kProbe);
}

TEST_F(BreakerTest, OnlyTheProbeDecidesWhileOpen) {
  auto a = breaker_.Admit();
  auto b = breaker_.Admit();
  breaker_.Record(a, ProviderError("connection refused"));
  breaker_.Record(b, absl::OkStatus());  // started before the trip: says nothing about now
  EXPECT_TRUE(breaker_.open());
  breaker_.Record(b, ProviderError("connection refused"));
  EXPECT_EQ(breaker_.trips(), 1);
}

TEST_F(BreakerTest, MetricsFollowTheState) {
  EXPECT_EQ(metrics_.Value("mailroom_sender_breaker_open"), 0);
  Trip();
  EXPECT_EQ(metrics_.Value("mailroom_sender_breaker_open"), 1);
  EXPECT_EQ(metrics_.Value("mailroom_sender_breaker_trips_total"), 1);
  clock_.Advance(absl::Seconds(1));
  breaker_.Record(breaker_.Admit(), absl::OkStatus());
  EXPECT_EQ(metrics_.Value("mailroom_sender_breaker_open"), 0);
  EXPECT_EQ(metrics_.Value("mailroom_sender_breaker_trips_total"), 1);
}

}  // namespace
}  // namespace mailroom
