#include "sender/metrics/sender_metrics.h"

#include <cmath>

namespace mailroom {

void PublishSenderGauges(const SenderGauges& g, Metrics& m) {
  m.Set(sender_metrics::kBudgetSpentMicros, g.spent_micros);
  m.Set(sender_metrics::kBudgetRemainingMicros, g.remaining_micros);
  m.Set(sender_metrics::kBudgetPacePerSecond,
        std::isinf(g.pace_per_second) ? -1 : g.pace_per_second);
  m.Set(sender_metrics::kSentThisMonth, g.sent_this_month);
  m.Set(sender_metrics::kPendingAcks, g.pending_acks);
  m.Set(sender_metrics::kConnected, g.connected ? 1 : 0);
  m.Set(sender_metrics::kBudgetHeldEmails, g.held_emails);
  m.Set(sender_metrics::kBudgetExhausted, g.exhausted ? 1 : 0);
}

}  // namespace mailroom
