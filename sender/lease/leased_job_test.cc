// OutcomeReport's wire form: the reason cut at a character boundary, the delay clamped, and the
// fields that belong to one outcome left off the others.
#include "sender/lease/leased_job.h"

#include <string>

#include "gtest/gtest.h"

namespace mailroom {
namespace {

TEST(OutcomeReportTest, CutsAnOverLongReasonAtACharacterBoundary) {
  std::string utf8 = "x";
  for (int i = 0; i < 600; ++i) utf8 += "\xc3\xa9";  // 2 bytes each: 1201 bytes
  const v1::JobOutcome o = OutcomeReport::Failed(7, utf8).ToProto();
  EXPECT_LE(o.reason().size(), 1000u);
  EXPECT_GE(o.reason().size(), 999u);
  EXPECT_EQ(o.reason().size() % 2, 1u) << "a cut inside a character";
  EXPECT_EQ(o.job_id(), 7u);
}

TEST(OutcomeReportTest, ClampsTheDelayTo0Through31Days) {
  EXPECT_EQ(OutcomeReport::Retry(1, "r", -absl::Seconds(5)).ToProto().retry_after_ms(), 0u);
  EXPECT_EQ(OutcomeReport::Defer(1, "d", absl::Hours(24 * 365)).ToProto().retry_after_ms(),
            31u * 24 * 3600 * 1000);
  EXPECT_EQ(OutcomeReport::Retry(1, "r", absl::InfiniteDuration()).ToProto().retry_after_ms(),
            31u * 24 * 3600 * 1000);
  EXPECT_EQ(OutcomeReport::Defer(1, "d").ToProto().retry_after_ms(), 0u);
}

TEST(OutcomeReportTest, SendsProviderFieldsOnlyWithSentAndSuppressionOnlyWithFailed) {
  OutcomeReport r = OutcomeReport::Sent(3, 150, "msg-1", "ses");
  EXPECT_EQ(r.ToProto().provider_message_id(), "msg-1");
  EXPECT_EQ(r.ToProto().provider(), "ses");
  EXPECT_EQ(r.ToProto().cost_micros(), 150);
  r.outcome = v1::OUTCOME_RETRY;
  r.suppress_recipient = true;
  EXPECT_EQ(r.ToProto().provider_message_id(), "");
  EXPECT_FALSE(r.ToProto().suppress_recipient());
  EXPECT_TRUE(OutcomeReport::Failed(3, "bounce", true).ToProto().suppress_recipient());
}

}  // namespace
}  // namespace mailroom
