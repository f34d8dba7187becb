#pragma once

// Every metric the collector exports: its name, type, help text and label names, declared once
// here and recorded through these constants (common/metrics.h), so that a misspelt metric or a
// missing label value does not compile. The names and labels are the collector's public
// interface on /metrics (docs/operations.md): change them only with a CHANGELOG entry.

#include "common/metrics.h"

namespace mailroom::collector_metrics {

// The dispatcher.
inline constexpr auto kWakeups = CounterMetric("mailroom_collector_wakeups_total",
                                               "NOTIFY wake-ups received.");
inline constexpr auto kDequeues = CounterMetric("mailroom_collector_dequeues_total",
                                                "Dequeue statements run.", "group");
inline constexpr auto kDequeueDuration = HistogramMetric(
    "mailroom_collector_dequeue_duration_seconds", "Dequeue statements that succeeded, by group.",
    &kCallDurationBuckets, "group");
inline constexpr auto kSignupsCollected = CounterMetric(
    "mailroom_collector_signups_collected_total",
    "Queued signups taken (their activation tokens created).");
inline constexpr auto kBusy = CounterMetric(
    "mailroom_collector_busy_total",
    "Times the collector marked itself busy (commits stop notifying; it polls).");
inline constexpr auto kJobMessages = CounterMetric(
    "mailroom_collector_job_messages_total",
    "Jobs messages (SubscribeResponse, at least one job) streamed.", "group");
inline constexpr auto kJobsDispatched = CounterMetric("mailroom_collector_jobs_dispatched_total",
                                                      "Jobs streamed.", "group");
inline constexpr auto kMalformed = CounterMetric("mailroom_collector_malformed_total",
                                                 "Token rows that could not be signed (failed).",
                                                 "group");
inline constexpr auto kReconnects = CounterMetric("mailroom_collector_reconnects_total",
                                                  "Database reconnect attempts.");
inline constexpr auto kDatabaseUp = GaugeMetric("mailroom_collector_database_up",
                                                "1 while PostgreSQL is reachable.");

// The gRPC service.
inline constexpr auto kSubscribers = GaugeMetric("mailroom_collector_subscribers",
                                                 "Connected subscribers.", "group");
inline constexpr auto kAcknowledged = CounterMetric("mailroom_collector_acknowledged_total",
                                                    "Job outcomes recorded, by outcome.", "group",
                                                    "outcome");
inline constexpr auto kRejectedOutcomes = CounterMetric(
    "mailroom_collector_rejected_outcomes_total",
    "Reported outcomes refused (answered as RejectedOutcome), per group.", "group");
inline constexpr auto kSuppressionsNotScoped = CounterMetric(
    "mailroom_collector_suppressions_not_scoped_total",
    "FAILED outcomes asking to suppress their recipient from a credential not covering every "
    "group: recorded, the address not suppressed.",
    "group");
inline constexpr auto kBudgetGrants = CounterMetric(
    "mailroom_collector_budget_grants_total",
    "AcquireBudget answers per group, by result (granted, paced, exhausted).", "group", "result");
inline constexpr auto kBudgetGrantedEmails = CounterMetric(
    "mailroom_collector_budget_granted_emails_total",
    "Emails granted to senders per group (charged when granted).", "group");
inline constexpr auto kBudgetReturnedEmails = CounterMetric(
    "mailroom_collector_budget_returned_emails_total",
    "Unused granted emails given back by senders per group.", "group");

// Retention.
inline constexpr auto kBudgetRefundedEmails = CounterMetric(
    "mailroom_budget_refunded_emails_total",
    "Unused granted emails of departed senders given back per group (mailroom_budget_refund).",
    "group");
inline constexpr auto kPruned = CounterMetric(
    "mailroom_collector_pruned_total",
    "Rows deleted by retention, by table (deliveries, lease_batches, tokens, budget_grants, "
    "budget_subscriptions, soft_bounces).",
    "table");

// The queue, read from the database at each scrape.
inline constexpr auto kQueueDepth = GaugeMetric(
    "mailroom_queue_depth", "Tokens (and queued signups) not yet handed out, per group.", "group");
inline constexpr auto kQueueLag = GaugeMetric("mailroom_queue_lag_seconds",
                                              "Age of the oldest queued token or signup.", "group");
inline constexpr auto kQueueJobs = GaugeMetric("mailroom_queue_jobs", "Jobs per group and state.",
                                               "group", "state");

// SES feedback and reputation.
inline constexpr auto kFeedback = CounterMetric(
    "mailroom_collector_feedback_total",
    "SNS messages received by the feedback endpoint, by type and result.", "type", "result");
inline constexpr auto kFeedbackEvents = CounterMetric(
    "mailroom_collector_feedback_events_total",
    "SES events recorded from SNS notifications, by event and result.", "event", "result");
inline constexpr auto kFeedbackUnmatched = CounterMetric(
    "mailroom_collector_feedback_unmatched_total",
    "Feedback events attached to no delivery (they suppress nothing unless the provider is in "
    "MAILROOM_FEEDBACK_SUPPRESS_UNMATCHED), by provider and reason (no_delivery, recipient, "
    "provider, other_group).",
    "provider", "reason");
inline constexpr auto kReputationSent = GaugeMetric("mailroom_reputation_sent",
                                                    "Emails sent in the reputation window.",
                                                    "group");
inline constexpr auto kReputationDelivered = GaugeMetric(
    "mailroom_reputation_delivered", "SES Delivery events in the reputation window.", "group");
inline constexpr auto kReputationBounced = GaugeMetric(
    "mailroom_reputation_bounced", "Permanent bounces (SES feedback) in the reputation window.",
    "group");
inline constexpr auto kReputationComplained = GaugeMetric(
    "mailroom_reputation_complained", "Complaints (SES feedback) in the reputation window.",
    "group");
inline constexpr auto kReputationBounceRate = GaugeMetric(
    "mailroom_reputation_bounce_rate",
    "Permanent bounces / emails sent in the reputation window (0..1).", "group");
inline constexpr auto kReputationComplaintRate = GaugeMetric(
    "mailroom_reputation_complaint_rate",
    "Complaints / emails sent in the reputation window (0..1).", "group");
inline constexpr auto kReputationProviderDelivered = GaugeMetric(
    "mailroom_reputation_provider_delivered",
    "Delivery events in the reputation window, by group and provider.", "group", "provider");
inline constexpr auto kReputationProviderBounced = GaugeMetric(
    "mailroom_reputation_provider_bounced",
    "Permanent bounces in the reputation window, by group and provider.", "group", "provider");
inline constexpr auto kReputationProviderComplained = GaugeMetric(
    "mailroom_reputation_provider_complained",
    "Complaints in the reputation window, by group and provider.", "group", "provider");
inline constexpr auto kReputationPaused = GaugeMetric(
    "mailroom_reputation_paused", "1 while the reputation guard pauses the group's sending.",
    "group");

}  // namespace mailroom::collector_metrics
