#pragma once

#include "collector/feedback_store.h"
#include "collector/store.h"
#include "common/metrics.h"

namespace mailroom {

// Declares every metric the collector exports (names, types, help texts).
void DescribeCollectorMetrics(Metrics& metrics);

// Replaces the queue gauges (mailroom_queue_depth, mailroom_queue_lag_seconds and
// mailroom_queue_jobs by state) with `stats`, one series per group. Groups that disappeared
// lose their series.
void SetQueueGauges(const std::vector<GroupStatsRow>& stats, Metrics& metrics);

// Refreshes the queue gauges from `store` whenever `metrics` is scraped. When the statistics
// cannot be read the previous values stay. `store` must outlive `metrics`' scrapes.
void ExportQueueStatsOnScrape(Store* store, Metrics& metrics);

// Replaces the reputation gauges (mailroom_reputation_{sent,delivered,bounced,complained}
// {group} over the rolling window, mailroom_reputation_bounce_rate and
// mailroom_reputation_complaint_rate {group}: bounced / sent and complained / sent, 0 without
// emails sent) with `rows`; groups that disappeared lose their series.
void SetReputationGauges(const std::vector<ReputationRow>& rows, Metrics& metrics);

}  // namespace mailroom
