// ReputationGuard's verdicts from reputation counters and the gauge it sets.
#include "collector/feedback/reputation_guard.h"

#include "gtest/gtest.h"

namespace mailroom {
namespace {

ReputationRow Row(const std::string& group, uint64_t sent, uint64_t bounced, uint64_t complained) {
  ReputationRow r;
  r.group = group;
  r.sent = sent;
  r.bounced = bounced;
  r.complained = complained;
  return r;
}

TEST(ReputationGuardTest, PausesAtTheMaximaWithEnoughEmailsAndResumesUnder) {
  Metrics m;
  ReputationGuard g({/*max_bounce_rate=*/0.02, /*max_complaint_rate=*/0.0005, /*min_sent=*/100},
                    &m);
  g.Update({Row("a", 1000, 19, 0), Row("b", 99, 50, 50), Row("c", 10000, 0, 4)});
  EXPECT_FALSE(g.Paused("a"));  // 1.9 % bounces
  EXPECT_FALSE(g.Paused("b"));  // too few emails for a verdict
  EXPECT_FALSE(g.Paused("c"));  // 0.04 % complaints
  g.Update({Row("a", 1000, 20, 0), Row("b", 100, 0, 0), Row("c", 10000, 0, 5)});
  EXPECT_TRUE(g.Paused("a"));  // 2 %
  EXPECT_FALSE(g.Paused("b"));
  EXPECT_TRUE(g.Paused("c"));  // 0.05 %
  EXPECT_EQ(m.Value("mailroom_reputation_paused", {{"group", "a"}}), 1);
  EXPECT_EQ(m.Value("mailroom_reputation_paused", {{"group", "b"}}), 0);
  // The window moves on: under the maxima again, sending resumes.
  g.Update({Row("a", 1001, 20, 0), Row("c", 10000, 0, 5)});
  EXPECT_FALSE(g.Paused("a"));
  EXPECT_TRUE(g.Paused("c"));
  EXPECT_EQ(m.Value("mailroom_reputation_paused", {{"group", "a"}}), 0);
}

TEST(ReputationGuardTest, OffByDefault) {
  Metrics m;
  ReputationGuard g(GuardOptions{}, &m);
  g.Update({Row("a", 1000, 1000, 1000)});
  EXPECT_FALSE(g.Paused("a"));
  // Only complaints checked when only their maximum is set.
  ReputationGuard complaints({0, 0.001, 10}, &m);
  complaints.Update({Row("a", 1000, 1000, 0), Row("b", 1000, 0, 1)});
  EXPECT_FALSE(complaints.Paused("a"));
  EXPECT_TRUE(complaints.Paused("b"));
}

}  // namespace
}  // namespace mailroom
