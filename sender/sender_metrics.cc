#include "sender/sender_metrics.h"

#include <cmath>

namespace mailroom {

void DescribeSenderMetrics(Metrics& m) {
  using T = Metrics::Type;
  m.Describe("mailroom_sender_jobs_total", T::kCounter, "Jobs finished, by action and outcome.");
  m.Describe("mailroom_sender_failures_total", T::kCounter, "Permanent failures, by reason.");
  m.Describe("mailroom_sender_retries_total", T::kCounter, "Deliveries handed back for a retry.");
  m.Describe("mailroom_sender_maybe_sent_total", T::kCounter,
             "Failed sends that may have reached the provider (charged, never refunded).");
  m.Describe("mailroom_sender_unconfirmed_total", T::kCounter,
             "Jobs counted as sent after a send that may have reached the provider, not retried.");
  m.Describe("mailroom_sender_held_total", T::kCounter,
             "Deliveries handed back uncounted because the provider was unavailable.");
  m.Describe("mailroom_sender_rate_limit_wait_seconds_total", T::kCounter,
             "Time spent waiting for the budget or provider pace.");
  m.Describe("mailroom_sender_budget_deferrals_total", T::kCounter,
             "Times queued jobs were handed back because the budget was spent for now.");
  m.Describe("mailroom_sender_send_seconds_total", T::kCounter, "Time spent in transport sends.");
  m.Describe("mailroom_sender_spent_micros_total", T::kCounter,
             "Money spent by this process, in millionths.");
  m.Describe("mailroom_sender_queued_jobs", T::kGauge, "Jobs held and not yet being sent.");
  m.Describe("mailroom_sender_budget_spent_micros", T::kGauge, "Spent this month by this sender under its own cap, MAILROOM_BUDGET (millionths).");
  m.Describe("mailroom_sender_budget_remaining_micros", T::kGauge,
             "Left this month under this sender's own cap, MAILROOM_BUDGET (millionths; -1 unlimited).");
  m.Describe("mailroom_sender_budget_pace_per_second", T::kGauge, "The group budget's pace, as the collector last said (emails/s; -1 unlimited).");
  m.Describe("mailroom_sender_sent_this_month", T::kGauge, "Emails paid for this month.");
  m.Describe("mailroom_sender_pending_acks", T::kGauge, "Outcomes not yet recorded.");
  m.Describe("mailroom_sender_connected", T::kGauge, "1 while subscribed to a collector.");
  m.Describe("mailroom_sender_budget_held_emails", T::kGauge,
             "Unused emails of the group budget's grants this sender holds.");
  m.Describe("mailroom_sender_budget_exhausted", T::kGauge,
             "1 while the collector says the group's monthly budget is spent.");
  m.Describe("mailroom_sender_transport_active", T::kGauge,
             "1 for the transport in use (transport=primary, or secondary while failing over); "
             "all 0 while no provider is usable.");
  m.Describe("mailroom_sender_transport_sent_total", T::kCounter,
             "Emails sent, by transport (primary or secondary); only with a secondary transport.");
  m.Describe("mailroom_sender_failover_resends_total", T::kCounter,
             "Jobs the secondary sent at once after the primary failed them with an outage.");
  m.Describe("mailroom_sender_failover_breaker_open", T::kGauge,
             "1 while the secondary transport is considered unavailable.");
}

void PublishSenderGauges(const SenderGauges& g, Metrics& m) {
  m.Set("mailroom_sender_budget_spent_micros", g.spent_micros);
  m.Set("mailroom_sender_budget_remaining_micros", g.remaining_micros);
  m.Set("mailroom_sender_budget_pace_per_second",
        std::isinf(g.pace_per_second) ? -1 : g.pace_per_second);
  m.Set("mailroom_sender_sent_this_month", g.sent_this_month);
  m.Set("mailroom_sender_pending_acks", g.pending_acks);
  m.Set("mailroom_sender_connected", g.connected ? 1 : 0);
  m.Set("mailroom_sender_budget_held_emails", g.held_emails);
  m.Set("mailroom_sender_budget_exhausted", g.exhausted ? 1 : 0);
}

}  // namespace mailroom
