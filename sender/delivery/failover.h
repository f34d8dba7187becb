#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>

#include "sender/delivery/breaker.h"
#include "sender/pacing/pacer.h"

namespace mailroom {

// Which emails may go through the secondary transport while the primary is down.
//  * kRecovery (the default): password recoveries only. A user locked out of an account has
//    no other way back in, while an activation can wait for the primary: a secondary is often
//    dearer, and its sending domain has a thinner reputation that a signup spike would spend.
//  * kAll: every email.
enum class FailoverClasses { kRecovery, kAll };

// The failover part of the sender's configuration, as the engine uses it: whether there is a
// secondary, which classes it takes, and the two providers' prices of one email in
// micro-units (rounded up as the budget rounds them).
struct FailoverPolicy {
  bool configured = false;
  FailoverClasses classes = FailoverClasses::kRecovery;
  int64_t primary_price_micros = 0;
  int64_t secondary_price_micros = 0;

  // Whether an email of class `c` may be sent by the secondary.
  bool FailsOver(SendClass c) const {
    return configured && (classes == FailoverClasses::kAll || c == SendClass::kRecovery);
  }
  // The price budget grants are asked at. The group's budget charges a grant when it is given,
  // so a grant's price must cover the provider that will send with it: the primary's price
  // while the primary is up; while it is down and a secondary takes over, the higher of the
  // two (a dearer secondary is never sent with money counted at the primary's price; the
  // primary's probes may still use such a grant).
  int64_t GrantPrice(bool primary_open) const {
    if (!configured || !primary_open) return primary_price_micros;
    return std::max(primary_price_micros, secondary_price_micros);
  }
};

// Where one email goes.
enum class Route {
  kPrimary,    // the primary transport (closed, or this email is its probe)
  kSecondary,  // the secondary transport (the primary is open; closed, or a probe of it)
  kHold,       // neither: hand the job back, not failed, not charged
};

// The routing decision for one email of class `c`. `primary` is the primary breaker's answer
// (Breaker::Admit); `admit_secondary` asks the secondary's breaker and is called only when the
// email would fail over (so a secondary probe slot is taken only by an email that uses it).
// The primary is used whenever its breaker lets the email through, a probe included: that is
// how it is found to be back.
Route ChooseRoute(const FailoverPolicy& policy, SendClass c, Breaker::Decision primary,
                  const std::function<Breaker::Decision()>& admit_secondary);

// What an email sent by `route` is charged (JobOutcome.cost_micros): the price of the provider
// that sent it, or `slot_cost` (the pacer's price) without failover.
int64_t ChargeFor(const FailoverPolicy& policy, Route route, int64_t slot_cost);

// Whether a budget slot bought at `slot_cost` covers an email sent by `route`. A slot taken
// just before the primary went down, at the primary's price, does not cover a dearer
// secondary: the email waits for a slot at the failover price.
bool SlotCovers(const FailoverPolicy& policy, Route route, int64_t slot_cost);

// The transport in use, from the breakers: the primary while its breaker is closed, else the
// secondary (when configured) while its breaker is closed, else none (kHold: jobs are held).
Route ActiveRoute(const FailoverPolicy& policy, bool primary_open, bool secondary_open);

// "primary", "secondary" or "none" (metric labels, logs).
const char* RouteName(Route route);

}  // namespace mailroom
