#include "collector/stats_gauges.h"

#include <utility>

namespace mailroom {

void DescribeCollectorMetrics(Metrics& m) {
  using T = Metrics::Type;
  m.Describe("mailroom_collector_wakeups_total", T::kCounter, "NOTIFY wake-ups received.");
  m.Describe("mailroom_collector_dequeues_total", T::kCounter, "Dequeue statements run.");
  m.Describe("mailroom_collector_signups_collected_total", T::kCounter,
             "Queued signups taken (their activation tokens created).");
  m.Describe("mailroom_collector_busy_total", T::kCounter,
             "Times the collector marked itself busy (commits stop notifying; it polls).");
  m.Describe("mailroom_collector_job_messages_total", T::kCounter,
             "Jobs messages (SubscribeResponse, at least one job) streamed.");
  m.Describe("mailroom_collector_jobs_dispatched_total", T::kCounter, "Jobs streamed.");
  m.Describe("mailroom_collector_acknowledged_total", T::kCounter,
             "Job outcomes recorded, by outcome.");
  m.Describe("mailroom_collector_malformed_total", T::kCounter,
             "Token rows that could not be signed (failed).");
  m.Describe("mailroom_collector_reconnects_total", T::kCounter, "Database reconnect attempts.");
  m.Describe("mailroom_collector_subscribers", T::kGauge, "Connected subscribers.");
  m.Describe("mailroom_collector_database_up", T::kGauge, "1 while PostgreSQL is reachable.");
  m.Describe("mailroom_queue_depth", T::kGauge,
             "Tokens (and queued signups) not yet handed out, per group.");
  m.Describe("mailroom_queue_lag_seconds", T::kGauge, "Age of the oldest queued token or signup.");
  m.Describe("mailroom_queue_jobs", T::kGauge, "Jobs per group and state.");
  m.Describe("mailroom_reputation_sent", T::kGauge, "Emails sent in the reputation window.");
  m.Describe("mailroom_reputation_delivered", T::kGauge,
             "SES Delivery events in the reputation window.");
  m.Describe("mailroom_reputation_bounced", T::kGauge,
             "Permanent bounces (SES feedback) in the reputation window.");
  m.Describe("mailroom_reputation_complained", T::kGauge,
             "Complaints (SES feedback) in the reputation window.");
  m.Describe("mailroom_reputation_bounce_rate", T::kGauge,
             "Permanent bounces / emails sent in the reputation window (0..1).");
  m.Describe("mailroom_reputation_complaint_rate", T::kGauge,
             "Complaints / emails sent in the reputation window (0..1).");
  m.Describe("mailroom_reputation_paused", T::kGauge,
             "1 while the reputation guard pauses the group's sending.");
  m.Describe("mailroom_collector_feedback_total", T::kCounter,
             "SNS messages received by the feedback endpoint, by type and result.");
  m.Describe("mailroom_collector_feedback_events_total", T::kCounter,
             "SES events recorded from SNS notifications, by event and result.");
  m.Describe("mailroom_collector_pruned_total", T::kCounter,
             "Rows deleted by retention, by table (deliveries, lease_batches, tokens, budget_grants, "
             "budget_subscriptions, soft_bounces).");
}

void SetQueueGauges(const std::vector<GroupStatsRow>& stats, Metrics& metrics) {
  metrics.Clear("mailroom_queue_depth");
  metrics.Clear("mailroom_queue_lag_seconds");
  metrics.Clear("mailroom_queue_jobs");
  for (const GroupStatsRow& s : stats) {
    const Labels g = {{"group", s.group}};
    metrics.Set("mailroom_queue_depth", s.depth, g);
    metrics.Set("mailroom_queue_lag_seconds", s.lag_seconds, g);
    const std::pair<const char*, uint64_t> states[] = {
        {"in_flight", s.in_flight}, {"waiting_retry", s.waiting_retry}, {"sent", s.sent},
        {"failed", s.failed},       {"expired", s.expired},           {"cancelled", s.cancelled},
        {"superseded", s.superseded}, {"rate_limited", s.rate_limited},
        {"suppressed", s.suppressed}};
    for (const auto& [state, n] : states) {
      metrics.Set("mailroom_queue_jobs", n, {{"group", s.group}, {"state", state}});
    }
  }
}

void ExportQueueStatsOnScrape(Store* store, Metrics& metrics) {
  metrics.SetCollectHook([store, &metrics] {
    auto stats = store->Stats("");
    if (stats.ok()) SetQueueGauges(*stats, metrics);
  });
}

}  // namespace mailroom
