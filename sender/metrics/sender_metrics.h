#pragma once

#include <cstdint>

#include "common/metrics.h"

namespace mailroom {

// Every metric the sender exports: its name, type, help text and label names, declared once
// here and recorded through these constants (common/metrics.h), so that a misspelt metric or a
// missing label value does not compile. The names and labels are the sender's public interface
// on /metrics (docs/operations.md): change them only with a CHANGELOG entry.
namespace sender_metrics {

// Jobs and their outcomes (the engine).
inline constexpr auto kJobs = CounterMetric("mailroom_sender_jobs_total",
                                            "Jobs finished, by action and outcome.", "action",
                                            "outcome");
inline constexpr auto kFailures = CounterMetric("mailroom_sender_failures_total",
                                                "Permanent failures, by reason.", "reason");
inline constexpr auto kRetries = CounterMetric("mailroom_sender_retries_total",
                                               "Deliveries handed back for a retry.");
inline constexpr auto kMaybeSent = CounterMetric(
    "mailroom_sender_maybe_sent_total",
    "Failed sends that may have reached the provider (charged, never refunded).");
inline constexpr auto kUnconfirmed = CounterMetric(
    "mailroom_sender_unconfirmed_total",
    "Jobs counted as sent after a send that may have reached the provider, not retried.");
inline constexpr auto kHeld = CounterMetric(
    "mailroom_sender_held_total",
    "Deliveries handed back uncounted because the provider was unavailable.");
inline constexpr auto kLostLeases = CounterMetric("mailroom_sender_lost_leases_total",
                                                  "Jobs not sent because their lease was lost.");
inline constexpr auto kAckStallWaits = CounterMetric(
    "mailroom_sender_ack_stall_waits_total",
    "Times the engine kept a job back because its outcome could not be reported yet.");
inline constexpr auto kQueuedJobs = GaugeMetric("mailroom_sender_queued_jobs",
                                                "Jobs held and not yet being sent.");
inline constexpr auto kCommitToSent = HistogramMetric(
    "mailroom_sender_commit_to_sent_seconds",
    "From the token's commit (whole seconds) to SENT, by action.", &kDeliveryLatencyBuckets,
    "action");

// Sending: time, money and pace.
inline constexpr auto kSendSeconds = CounterMetric("mailroom_sender_send_seconds_total",
                                                   "Time spent in transport sends.");
inline constexpr auto kSendDuration = HistogramMetric("mailroom_sender_send_duration_seconds",
                                                      "Transport sends (any result), by transport.",
                                                      &kCallDurationBuckets, "transport");
inline constexpr auto kRateLimitWaitSeconds = CounterMetric(
    "mailroom_sender_rate_limit_wait_seconds_total",
    "Time spent waiting for the budget or provider pace.");
inline constexpr auto kBudgetDeferrals = CounterMetric(
    "mailroom_sender_budget_deferrals_total",
    "Times queued jobs were handed back because the budget was spent for now.");
inline constexpr auto kSpentMicros = CounterMetric("mailroom_sender_spent_micros_total",
                                                   "Money spent by this process, in millionths.");
inline constexpr auto kBudgetSpentMicros = GaugeMetric(
    "mailroom_sender_budget_spent_micros",
    "Spent this month by this sender under its own cap, MAILROOM_BUDGET (millionths).");
inline constexpr auto kBudgetRemainingMicros = GaugeMetric(
    "mailroom_sender_budget_remaining_micros",
    "Left this month under this sender's own cap, MAILROOM_BUDGET (millionths; -1 unlimited).");
inline constexpr auto kBudgetPacePerSecond = GaugeMetric(
    "mailroom_sender_budget_pace_per_second",
    "The group budget's pace, as the collector last said (emails/s; -1 unlimited).");
inline constexpr auto kSentThisMonth = GaugeMetric("mailroom_sender_sent_this_month",
                                                   "Emails paid for this month.");
inline constexpr auto kBudgetHeldEmails = GaugeMetric(
    "mailroom_sender_budget_held_emails",
    "Unused emails of the group budget's grants this sender holds.");
inline constexpr auto kBudgetExhausted = GaugeMetric(
    "mailroom_sender_budget_exhausted",
    "1 while the collector says the group's monthly budget is spent.");

// The collector connection.
inline constexpr auto kPendingAcks = GaugeMetric("mailroom_sender_pending_acks",
                                                 "Outcomes not yet recorded.");
inline constexpr auto kConnected = GaugeMetric("mailroom_sender_connected",
                                               "1 while subscribed to a collector.");

// Providers: the circuit breaker, failover and the SES account.
inline constexpr auto kBreakerOpen = GaugeMetric(
    "mailroom_sender_breaker_open",
    "1 while the provider is considered unavailable (jobs are held).");
inline constexpr auto kBreakerTrips = CounterMetric(
    "mailroom_sender_breaker_trips_total",
    "Times the circuit breaker opened on a provider-wide failure.");
inline constexpr auto kTransportActive = GaugeMetric(
    "mailroom_sender_transport_active",
    "1 for the transport in use (transport=primary, or secondary while failing over); all 0 "
    "while no provider is usable.",
    "transport");
inline constexpr auto kTransportSent = CounterMetric(
    "mailroom_sender_transport_sent_total",
    "Emails sent, by transport (primary or secondary); only with a secondary transport.",
    "transport");
inline constexpr auto kFailoverResends = CounterMetric(
    "mailroom_sender_failover_resends_total",
    "Jobs the secondary sent at once after the primary failed them with an outage.");
inline constexpr auto kFailoverBreakerOpen = GaugeMetric(
    "mailroom_sender_failover_breaker_open",
    "1 while the secondary transport is considered unavailable.");
inline constexpr auto kSesAccountWarning = GaugeMetric(
    "mailroom_sender_ses_account_warning",
    "1 while SES GetAccount reports the account in PROBATION or in the sandbox (kind).", "kind");
inline constexpr auto kSesSendingPaused = GaugeMetric(
    "mailroom_sender_ses_sending_paused",
    "1 while SES GetAccount says sending is disabled or SHUTDOWN.");
inline constexpr auto kSesMaxSendRate = GaugeMetric("mailroom_sender_ses_max_send_rate",
                                                    "SES MaxSendRate (emails/s) as last read.");
inline constexpr auto kSesQuotaRemaining = GaugeMetric(
    "mailroom_sender_ses_quota_remaining",
    "SES Max24HourSend - SentLast24Hours as last read (-1: unlimited).");

}  // namespace sender_metrics

// The sender's state read at scrape time: its own cap (Budget), the group budget's grants
// (GrantPacer) and the subscription (Subscription).
struct SenderGauges {
  int64_t spent_micros = 0;
  int64_t remaining_micros = -1;  // -1: unlimited
  double pace_per_second = 0;     // infinity: unlimited
  uint64_t sent_this_month = 0;
  uint64_t pending_acks = 0;
  bool connected = false;
  int64_t held_emails = 0;  // unused emails of the grants held
  bool exhausted = false;   // the collector says the group's monthly budget is spent
};

// Sets the sender's gauges from `gauges` (an unlimited pace is exported as -1).
void PublishSenderGauges(const SenderGauges& gauges, Metrics& metrics);

}  // namespace mailroom
