// The failover decision as a table: for each state of the two breakers, each class of email and
// each setting of MAILROOM_FAILOVER_CLASSES, where the email goes, whether the secondary's
// breaker was asked, what it is charged and which budget slots cover it.
#include "sender/delivery/failover.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mailroom {
namespace {

using D = Breaker::Decision;

constexpr int64_t kPrimary = 100;  // 0.10 per 1000
constexpr int64_t kDearer = 800;   // 0.80 per 1000
constexpr int64_t kCheaper = 50;   // 0.05 per 1000

FailoverPolicy Policy(FailoverClasses classes, int64_t secondary_price = kDearer) {
  FailoverPolicy p;
  p.configured = true;
  p.classes = classes;
  p.primary_price_micros = kPrimary;
  p.secondary_price_micros = secondary_price;
  return p;
}

struct RouteCase {
  std::string name;
  bool configured;
  FailoverClasses classes;
  SendClass send_class;
  D primary;
  D secondary;
  Route want;
  bool asks_secondary;  // whether the secondary's breaker is consulted
};

TEST(FailoverTest, RouteTable) {
  const auto R = FailoverClasses::kRecovery;
  const auto A = FailoverClasses::kAll;
  const auto rec = SendClass::kRecovery;
  const auto act = SendClass::kStandard;
  const std::vector<RouteCase> cases = {
      // The primary is used whenever its breaker lets the email through.
      {"closed primary, recovery", true, R, rec, D::kSend, D::kSend, Route::kPrimary, false},
      {"closed primary, activation", true, A, act, D::kSend, D::kSend, Route::kPrimary, false},
      {"primary probe goes to the primary", true, A, rec, D::kProbe, D::kSend, Route::kPrimary,
       false},
      // The primary is down: recoveries fail over.
      {"open primary, recovery", true, R, rec, D::kHold, D::kSend, Route::kSecondary, true},
      {"open primary, recovery, secondary probe", true, R, rec, D::kHold, D::kProbe,
       Route::kSecondary, true},
      // Activations fail over only with "all".
      {"open primary, activation, recovery only", true, R, act, D::kHold, D::kSend, Route::kHold,
       false},
      {"open primary, activation, all", true, A, act, D::kHold, D::kSend, Route::kSecondary, true},
      // Both down: held, as without failover.
      {"both open, recovery", true, R, rec, D::kHold, D::kHold, Route::kHold, true},
      {"both open, activation, all", true, A, act, D::kHold, D::kHold, Route::kHold, true},
      // No secondary configured: today's behaviour.
      {"no secondary, open primary", false, A, rec, D::kHold, D::kSend, Route::kHold, false},
      {"no secondary, closed primary", false, A, rec, D::kSend, D::kSend, Route::kPrimary, false},
  };
  for (const RouteCase& c : cases) {
    FailoverPolicy p = Policy(c.classes);
    p.configured = c.configured;
    int asked = 0;
    Route got = ChooseRoute(p, c.send_class, c.primary, [&] {
      ++asked;
      return c.secondary;
    });
    EXPECT_EQ(got, c.want) << c.name;
    EXPECT_EQ(asked, c.asks_secondary ? 1 : 0) << c.name;
  }
}

struct PriceCase {
  std::string name;
  int64_t secondary_price;
  bool primary_open;
  Route route;
  int64_t slot_cost;    // the price of the grant the email's slot came from
  int64_t grant_price;  // what new grants are asked at in this state
  int64_t charged;      // JobOutcome.cost_micros
  bool covered;         // the slot may be used for this route
};

TEST(FailoverTest, PriceTable) {
  const std::vector<PriceCase> cases = {
      // Primary up: grants at its price, emails charged at its price.
      {"primary up", kDearer, false, Route::kPrimary, kPrimary, kPrimary, kPrimary, true},
      // Failing over to a dearer secondary: grants at the higher price; a slot bought at the
      // primary's price before the switch does not cover the secondary.
      {"dearer secondary, slot at failover price", kDearer, true, Route::kSecondary, kDearer,
       kDearer, kDearer, true},
      {"dearer secondary, old slot at primary price", kDearer, true, Route::kSecondary, kPrimary,
       kDearer, kDearer, false},
      // The primary's probe with a failover-priced slot is charged the primary's price.
      {"probe with a failover-priced slot", kDearer, true, Route::kPrimary, kDearer, kDearer,
       kPrimary, true},
      // A cheaper secondary: grants stay at the primary's price, the email is charged its own.
      {"cheaper secondary", kCheaper, true, Route::kSecondary, kPrimary, kPrimary, kCheaper, true},
      {"same price", kPrimary, true, Route::kSecondary, kPrimary, kPrimary, kPrimary, true},
  };
  for (const PriceCase& c : cases) {
    FailoverPolicy p = Policy(FailoverClasses::kAll, c.secondary_price);
    EXPECT_EQ(p.GrantPrice(c.primary_open), c.grant_price) << c.name;
    EXPECT_EQ(ChargeFor(p, c.route, c.slot_cost), c.charged) << c.name;
    EXPECT_EQ(SlotCovers(p, c.route, c.slot_cost), c.covered) << c.name;
    // Never more charged than the slot's grant paid for, whenever the slot is used.
    if (SlotCovers(p, c.route, c.slot_cost)) {
      EXPECT_LE(ChargeFor(p, c.route, c.slot_cost), c.slot_cost) << c.name;
    }
  }
}

TEST(FailoverTest, WithoutFailoverTheSlotsPriceIsCharged) {
  FailoverPolicy none;
  none.primary_price_micros = kPrimary;
  EXPECT_EQ(none.GrantPrice(true), kPrimary);
  EXPECT_EQ(ChargeFor(none, Route::kPrimary, 123), 123);
  EXPECT_TRUE(SlotCovers(none, Route::kPrimary, 123));
  EXPECT_FALSE(none.FailsOver(SendClass::kRecovery));
}

TEST(FailoverTest, ActiveTransportTable) {
  const FailoverPolicy with = Policy(FailoverClasses::kRecovery);
  FailoverPolicy without = with;
  without.configured = false;
  struct Case {
    const FailoverPolicy* policy;
    bool primary_open, secondary_open;
    Route want;
  } cases[] = {
      {&with, false, false, Route::kPrimary},    {&with, false, true, Route::kPrimary},
      {&with, true, false, Route::kSecondary},   {&with, true, true, Route::kHold},
      {&without, false, false, Route::kPrimary}, {&without, true, false, Route::kHold},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ActiveRoute(*c.policy, c.primary_open, c.secondary_open), c.want)
        << c.primary_open << c.secondary_open << c.policy->configured;
  }
  EXPECT_STREQ(RouteName(Route::kSecondary), "secondary");
}

}  // namespace
}  // namespace mailroom
