#include "sender/delivery/failover.h"

namespace mailroom {

Route ChooseRoute(const FailoverPolicy& policy, SendClass c, Breaker::Decision primary,
                  const std::function<Breaker::Decision()>& admit_secondary) {
  if (primary != Breaker::Decision::kHold) return Route::kPrimary;
  if (!policy.FailsOver(c)) return Route::kHold;
  return admit_secondary() == Breaker::Decision::kHold ? Route::kHold : Route::kSecondary;
}

int64_t ChargeFor(const FailoverPolicy& policy, Route route, int64_t slot_cost) {
  if (!policy.configured || slot_cost < 0) return slot_cost;
  return route == Route::kSecondary ? policy.secondary_price_micros : policy.primary_price_micros;
}

bool SlotCovers(const FailoverPolicy& policy, Route route, int64_t slot_cost) {
  if (!policy.configured || slot_cost < 0) return true;
  return slot_cost >= ChargeFor(policy, route, slot_cost);
}

Route ActiveRoute(const FailoverPolicy& policy, bool primary_open, bool secondary_open) {
  if (!primary_open) return Route::kPrimary;
  return policy.configured && !secondary_open ? Route::kSecondary : Route::kHold;
}

const char* RouteName(Route route) {
  switch (route) {
    case Route::kPrimary: return "primary";
    case Route::kSecondary: return "secondary";
    case Route::kHold: return "none";
  }
  return "none";
}

}  // namespace mailroom
