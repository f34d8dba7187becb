#include "collector/feedback/reputation_guard.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collector/metrics/collector_metrics.h"
#include "common/log.h"

namespace mailroom {

void SetReputationGauges(const std::vector<ReputationRow>& rows, Metrics& metrics) {
  for (const Gauge<1>* gauge :
       {&collector_metrics::kReputationSent, &collector_metrics::kReputationDelivered,
        &collector_metrics::kReputationBounced, &collector_metrics::kReputationComplained,
        &collector_metrics::kReputationBounceRate, &collector_metrics::kReputationComplaintRate}) {
    metrics.Clear(*gauge);
  }
  for (const ReputationRow& r : rows) {
    const LabelValues<1> g(r.group);
    metrics.Set(collector_metrics::kReputationSent, r.sent, g);
    metrics.Set(collector_metrics::kReputationDelivered, r.delivered, g);
    metrics.Set(collector_metrics::kReputationBounced, r.bounced, g);
    metrics.Set(collector_metrics::kReputationComplained, r.complained, g);
    metrics.Set(collector_metrics::kReputationBounceRate, r.bounce_rate(), g);
    metrics.Set(collector_metrics::kReputationComplaintRate, r.complaint_rate(), g);
  }
}

void SetProviderReputationGauges(const std::vector<ProviderReputationRow>& rows, Metrics& metrics) {
  for (const Gauge<2>* gauge : {&collector_metrics::kReputationProviderDelivered,
                                &collector_metrics::kReputationProviderBounced,
                                &collector_metrics::kReputationProviderComplained}) {
    metrics.Clear(*gauge);
  }
  for (const ProviderReputationRow& r : rows) {
    const LabelValues<2> l(r.group, r.provider);
    metrics.Set(collector_metrics::kReputationProviderDelivered, r.delivered, l);
    metrics.Set(collector_metrics::kReputationProviderBounced, r.bounced, l);
    metrics.Set(collector_metrics::kReputationProviderComplained, r.complained, l);
  }
}

ReputationGuard::ReputationGuard(GuardOptions options, Metrics* metrics)
    : options_(options), metrics_(metrics) {}

void ReputationGuard::Update(const std::vector<ReputationRow>& rows) {
  if (!options_.enabled()) return;
  absl::MutexLock lock(&mu_);
  for (const ReputationRow& r : rows) {
    const double bounce = r.bounce_rate();
    const double complaint = r.complaint_rate();
    const bool over = r.sent >= options_.min_sent &&
                      ((options_.max_bounce_rate > 0 && bounce >= options_.max_bounce_rate) ||
                       (options_.max_complaint_rate > 0 &&
                        complaint >= options_.max_complaint_rate));
    const bool was = paused_.count(r.group) > 0;
    const LogField fields[] = {{"group", r.group},
                               {"sent", absl::StrCat(r.sent)},
                               {"bounce_rate", absl::StrFormat("%.4f", bounce)},
                               {"complaint_rate", absl::StrFormat("%.5f", complaint)}};
    if (over && !was) {
      paused_.insert(r.group);
      LogError("sending paused: the group's bounce or complaint rate crossed the guard",
               {fields[0], fields[1], fields[2], fields[3]});
    } else if (!over && was) {
      paused_.erase(r.group);
      LogInfo("sending resumed: the group's rates are under the guard",
              {fields[0], fields[1], fields[2], fields[3]});
    }
    metrics_->Set(collector_metrics::kReputationPaused, over ? 1 : 0, {r.group});
  }
}

bool ReputationGuard::Paused(const std::string& group) const {
  absl::MutexLock lock(&mu_);
  return paused_.count(group) > 0;
}

ReputationMonitor::ReputationMonitor(FeedbackStore* store, absl::Duration window,
                                     absl::Duration refresh, ReputationGuard* guard,
                                     Metrics* metrics, Clock* clock)
    : store_(store), window_(window), refresh_(refresh), guard_(guard), metrics_(metrics),
      worker_([this] { Loop(); }, clock) {}

void ReputationMonitor::Loop() {
  do {
    RefreshOnce();
  } while (worker_.WaitFor(refresh_));
}

void ReputationMonitor::RefreshOnce() {
  auto rows = store_->Reputation(window_);
  if (!rows.ok()) {
    LogWarn("cannot read reputation", {{"error", std::string(rows.status().message())}});
    return;
  }
  SetReputationGauges(*rows, *metrics_);
  if (guard_ != nullptr) guard_->Update(*rows);
  auto by_provider = store_->ReputationByProvider(window_);
  if (by_provider.ok()) SetProviderReputationGauges(*by_provider, *metrics_);
}

}  // namespace mailroom
