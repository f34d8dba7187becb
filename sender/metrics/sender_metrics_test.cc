#include "sender/metrics/sender_metrics.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

TEST(SenderMetricsTest, GaugesFollowTheStateAndUnlimitedIsMinusOne) {
  Metrics m;
  SenderGauges g;
  g.spent_micros = 1500;
  g.remaining_micros = -1;
  g.pace_per_second = std::numeric_limits<double>::infinity();
  g.sent_this_month = 15;
  g.pending_acks = 2;
  g.connected = true;
  PublishSenderGauges(g, m);
  EXPECT_EQ(m.Value("mailroom_sender_budget_spent_micros"), 1500);
  EXPECT_EQ(m.Value("mailroom_sender_budget_remaining_micros"), -1);
  EXPECT_EQ(m.Value("mailroom_sender_budget_pace_per_second"), -1);
  EXPECT_EQ(m.Value("mailroom_sender_sent_this_month"), 15);
  EXPECT_EQ(m.Value("mailroom_sender_pending_acks"), 2);
  EXPECT_EQ(m.Value("mailroom_sender_connected"), 1);
  g.pace_per_second = 0.25;
  g.connected = false;
  PublishSenderGauges(g, m);
  EXPECT_EQ(m.Value("mailroom_sender_budget_pace_per_second"), 0.25);
  EXPECT_EQ(m.Value("mailroom_sender_connected"), 0);
  EXPECT_THAT(m.Render(), ::testing::HasSubstr("# TYPE mailroom_sender_connected gauge"));
}

}  // namespace
}  // namespace mailroom
