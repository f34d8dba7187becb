#include "sender/pacing/budget.h"

#include <deque>

#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

// 2026-11-01T00:00:00Z: a 30-day month.
const absl::Time kNov = absl::FromCivil(absl::CivilSecond(2026, 11, 1, 0, 0, 0),
                                        absl::UTCTimeZone());
const absl::Time kDec = absl::FromCivil(absl::CivilSecond(2026, 12, 1, 0, 0, 0),
                                        absl::UTCTimeZone());

// Sends whenever allowed, as fast as allowed, until `until`; returns send times.
std::vector<absl::Time> Greedy(Budget& b, FakeClock& clock, absl::Time until) {
  std::vector<absl::Time> sent;
  while (clock.Now() < until) {
    absl::Time next = b.NextSendTime(SendClass::kStandard);
    if (next >= until) break;
    if (next > clock.Now()) clock.Set(next);
    if (b.TryAcquire(SendClass::kStandard) >= 0) sent.push_back(clock.Now());
  }
  return sent;
}

TEST(BudgetTest, SeedPaceIsAboutPoint38EmailsASecond) {
  FakeClock clock(kNov);
  Budget b({100.0, 0.10, 10, std::nullopt}, &clock);
  EXPECT_EQ(b.cost_micros(), 100);
  // $100 at $0.10 per 1,000 = 1,000,000 emails over 30 days.
  EXPECT_NEAR(b.pace_per_second(), 1e6 / (30 * 86400.0), 1e-6);
  EXPECT_NEAR(b.pace_per_second(), 0.3858, 0.001);
}

TEST(BudgetTest, NeverFasterThanThePaceOverAnyWindowAndBurstIsBounded) {
  FakeClock clock(kNov);
  const int burst = 5;
  Budget b({1.0, 0.10, burst, std::nullopt}, &clock);  // 10,000 emails in the month
  std::vector<absl::Time> sent = Greedy(b, clock, kNov + absl::Hours(24));
  const double pace = 10000.0 / (30 * 86400.0);
  // The first `burst` go at once, never more.
  int at_start = 0;
  for (absl::Time t : sent) at_start += t == kNov;
  EXPECT_EQ(at_start, burst);
  // Any window of length w holds at most pace * w + burst sends.
  for (absl::Duration w : {absl::Minutes(1), absl::Hours(1), absl::Hours(6)}) {
    size_t j = 0;
    for (size_t i = 0; i < sent.size(); ++i) {
      while (sent[i] - sent[j] >= w) ++j;
      ASSERT_LE(static_cast<double>(i - j + 1), pace * absl::ToDoubleSeconds(w) + burst + 1e-9)
          << "window " << w;
    }
  }
}

TEST(BudgetTest, UnderspendEarlyAllowsAFasterPaceLater) {
  FakeClock clock(kNov);
  Budget b({1.0, 0.10, 1, std::nullopt}, &clock);
  double early = b.pace_per_second();
  clock.Set(kNov + absl::Hours(24 * 15));  // idle for half the month
  EXPECT_NEAR(b.pace_per_second(), 2 * early, 1e-9);
}

TEST(BudgetTest, HardStopWhenSpentThenNextMonth) {
  FakeClock clock(kNov);
  Budget b({0.001, 0.10, 100, std::nullopt}, &clock);  // 10 emails
  std::vector<absl::Time> sent = Greedy(b, clock, kDec - absl::Seconds(1));
  EXPECT_EQ(sent.size(), 10u);
  EXPECT_EQ(b.spent_micros(), 1000);
  EXPECT_EQ(b.remaining_micros(), 0);
  EXPECT_EQ(b.TryAcquire(SendClass::kStandard), -1);
  EXPECT_EQ(b.NextSendTime(SendClass::kStandard), kDec);
  EXPECT_EQ(b.pace_per_second(), 0);
  clock.Set(kDec);  // a new month resets the spend
  EXPECT_EQ(b.spent_micros(), 0);
  EXPECT_GE(b.TryAcquire(SendClass::kStandard), 0);
}

TEST(BudgetTest, RefundReturnsTheMoney) {
  FakeClock clock(kNov);
  Budget b({1.0, 0.10, 10, std::nullopt}, &clock);
  ASSERT_EQ(b.TryAcquire(SendClass::kStandard), 100);
  b.Refund(SendClass::kStandard);
  EXPECT_EQ(b.spent_micros(), 0);
  EXPECT_EQ(b.sent_this_month(), 0u);
}

TEST(BudgetTest, ProviderCapAppliesEvenWithoutABudget) {
  FakeClock clock(kNov);
  Budget b({std::nullopt, 0.10, 10, 14.0}, &clock);  // SES's 14/s
  std::vector<absl::Time> sent = Greedy(b, clock, kNov + absl::Seconds(10));
  EXPECT_LE(sent.size(), 14u * 10 + 14);
  EXPECT_GE(sent.size(), 14u * 10);
  EXPECT_EQ(b.remaining_micros(), -1);
}

TEST(BudgetTest, UnlimitedWithoutCapIsAlwaysNow) {
  FakeClock clock(kNov);
  Budget b({std::nullopt, 0.10, 1, std::nullopt}, &clock);
  for (int i = 0; i < 1000; ++i) ASSERT_GE(b.TryAcquire(SendClass::kStandard), 0);
  EXPECT_EQ(b.NextSendTime(SendClass::kStandard), clock.Now());
  EXPECT_EQ(b.spent_micros(), 100000);
}

TEST(BudgetTest, PriceIsRoundedUpNeverUnderCounted) {
  FakeClock clock(kNov);
  Budget b({1.0, 0.1234567, 1, std::nullopt}, &clock);
  EXPECT_EQ(b.cost_micros(), 124);
}

}  // namespace
}  // namespace mailroom
