#include "collector/store/stats_gauges.h"

#include <utility>

#include "collector/metrics/collector_metrics.h"

namespace mailroom {

void SetQueueGauges(const std::vector<GroupStatsRow>& stats, Metrics& metrics) {
  metrics.Clear(collector_metrics::kQueueDepth);
  metrics.Clear(collector_metrics::kQueueLag);
  metrics.Clear(collector_metrics::kQueueJobs);
  for (const GroupStatsRow& s : stats) {
    const LabelValues<1> g(s.group);
    metrics.Set(collector_metrics::kQueueDepth, s.depth, g);
    metrics.Set(collector_metrics::kQueueLag, s.lag_seconds, g);
    const std::pair<const char*, uint64_t> states[] = {{"in_flight", s.in_flight},
                                                       {"waiting_retry", s.waiting_retry},
                                                       {"sent", s.sent},
                                                       {"failed", s.failed},
                                                       {"expired", s.expired},
                                                       {"cancelled", s.cancelled},
                                                       {"superseded", s.superseded},
                                                       {"rate_limited", s.rate_limited},
                                                       {"suppressed", s.suppressed}};
    for (const auto& [state, n] : states) {
      metrics.Set(collector_metrics::kQueueJobs, n, {s.group, state});
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
