#pragma once

#include <cstdint>

#include "common/metrics.h"

namespace mailroom {

// Declares every metric the sender exports (names, types, help texts).
void DescribeSenderMetrics(Metrics& metrics);

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
