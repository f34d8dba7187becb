#pragma once

#include <cstdint>

#include "common/metrics.h"

namespace mailroom {

// Declares every metric the sender exports (names, types, help texts).
void DescribeSenderMetrics(Metrics& metrics);

// The sender's state read at scrape time: the budget (Budget) and the subscription
// (Subscription).
struct SenderGauges {
  int64_t spent_micros = 0;
  int64_t remaining_micros = -1;  // -1: unlimited
  double pace_per_second = 0;     // infinity: unlimited
  uint64_t sent_this_month = 0;
  uint64_t pending_acks = 0;
  bool connected = false;
};

// Sets the sender's gauges from `gauges` (an unlimited pace is exported as -1).
void PublishSenderGauges(const SenderGauges& gauges, Metrics& metrics);

}  // namespace mailroom
