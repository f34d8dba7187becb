#include "collector/store/stats_gauges.h"
#include "collector/feedback/reputation_guard.h"

#include "collector/store/testing/fake_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

GroupStatsRow Row(const std::string& group, uint64_t depth) {
  GroupStatsRow s;
  s.group = group;
  s.depth = depth;
  s.lag_seconds = 1.5;
  s.in_flight = 3;
  s.sent = 7;
  s.superseded = 2;
  s.rate_limited = 5;
  s.suppressed = 6;
  return s;
}

TEST(StatsGaugesTest, OneSeriesPerGroupAndState) {
  Metrics m;
  SetQueueGauges({Row("a", 4), Row("b", 0)}, m);
  EXPECT_EQ(m.Value("mailroom_queue_depth", {{"group", "a"}}), 4);
  EXPECT_EQ(m.Value("mailroom_queue_lag_seconds", {{"group", "a"}}), 1.5);
  EXPECT_EQ(m.Value("mailroom_queue_jobs", {{"group", "a"}, {"state", "in_flight"}}), 3);
  EXPECT_EQ(m.Value("mailroom_queue_jobs", {{"group", "b"}, {"state", "sent"}}), 7);
  EXPECT_EQ(m.Value("mailroom_queue_jobs", {{"group", "a"}, {"state", "superseded"}}), 2);
  EXPECT_EQ(m.Value("mailroom_queue_jobs", {{"group", "a"}, {"state", "rate_limited"}}), 5);
  EXPECT_EQ(m.Value("mailroom_queue_jobs", {{"group", "a"}, {"state", "suppressed"}}), 6);
  // A group that disappeared loses its series.
  SetQueueGauges({Row("b", 2)}, m);
  EXPECT_EQ(m.Value("mailroom_queue_depth", {{"group", "a"}}), 0);
  EXPECT_EQ(m.Value("mailroom_queue_jobs", {{"group", "a"}, {"state", "sent"}}), 0);
  EXPECT_EQ(m.Value("mailroom_queue_depth", {{"group", "b"}}), 2);
}

TEST(StatsGaugesTest, RefreshedFromTheStoreOnScrape) {
  testing::FakeStore store;
  store.SetStats({Row("mailroom", 9)});
  Metrics m;
  ExportQueueStatsOnScrape(&store, m);
  EXPECT_EQ(store.CallCount("Stats"), 0);  // only when scraped
  m.Render();
  EXPECT_EQ(store.CallCount("Stats"), 1);
  EXPECT_EQ(m.Value("mailroom_queue_depth", {{"group", "mailroom"}}), 9);
  // A failing store keeps the last values.
  store.FailWith("Stats", absl::UnavailableError("down"));
  m.Render();
  EXPECT_EQ(m.Value("mailroom_queue_depth", {{"group", "mailroom"}}), 9);
}

ReputationRow Reputation(const std::string& group, uint64_t sent, uint64_t bounced,
                         uint64_t complained) {
  ReputationRow r;
  r.group = group;
  r.sent = sent;
  r.bounced = bounced;
  r.complained = complained;
  return r;
}

TEST(ReputationGaugesTest, CountsAndRatesPerGroup) {
  Metrics m;
  ReputationRow a = Reputation("a", 400, 8, 1);
  a.delivered = 390;
  SetReputationGauges({a, Reputation("idle", 0, 0, 0)}, m);
  EXPECT_EQ(m.Value("mailroom_reputation_sent", {{"group", "a"}}), 400);
  EXPECT_EQ(m.Value("mailroom_reputation_delivered", {{"group", "a"}}), 390);
  EXPECT_EQ(m.Value("mailroom_reputation_bounced", {{"group", "a"}}), 8);
  EXPECT_EQ(m.Value("mailroom_reputation_complained", {{"group", "a"}}), 1);
  EXPECT_DOUBLE_EQ(m.Value("mailroom_reputation_bounce_rate", {{"group", "a"}}), 0.02);
  EXPECT_DOUBLE_EQ(m.Value("mailroom_reputation_complaint_rate", {{"group", "a"}}), 0.0025);
  EXPECT_EQ(m.Value("mailroom_reputation_bounce_rate", {{"group", "idle"}}), 0);
  SetReputationGauges({Reputation("idle", 0, 0, 0)}, m);
  EXPECT_EQ(m.Value("mailroom_reputation_sent", {{"group", "a"}}), 0);
}

}  // namespace
}  // namespace mailroom
