#pragma once

#include "collector/store/store.h"
#include "common/metrics.h"

namespace mailroom {

// Replaces the queue gauges (mailroom_queue_depth, mailroom_queue_lag_seconds and
// mailroom_queue_jobs by state) with `stats`, one series per group. Groups that disappeared
// lose their series.
void SetQueueGauges(const std::vector<GroupStatsRow>& stats, Metrics& metrics);

// Refreshes the queue gauges from `store` whenever `metrics` is scraped. When the statistics
// cannot be read the previous values stay. `store` must outlive `metrics`' scrapes.
void ExportQueueStatsOnScrape(Store* store, Metrics& metrics);

}  // namespace mailroom
