// Simulates whole months of sending against the budget pacer with a fake clock and prints, per
// scenario, what was spent against the budget, the error, and the busiest hour against the pace.
// Usage: budget_sim
#include <cmath>
#include <cstdio>
#include <deque>
#include "absl/synchronization/mutex.h"

#include "absl/time/civil_time.h"
#include "common/testing/fake_clock.h"
#include "sender/pacing/budget.h"

namespace mailroom {
namespace {

const absl::Time kStart = absl::FromCivil(absl::CivilSecond(2026, 11, 1, 0, 0, 0),
                                          absl::UTCTimeZone());
const absl::Time kEnd = absl::FromCivil(absl::CivilSecond(2026, 12, 1, 0, 0, 0),
                                        absl::UTCTimeZone());

struct Scenario {
  const char* name;
  double budget;
  double price;
  int burst;
  std::optional<double> cap;
  absl::Duration idle;  // no demand before kStart + idle
};

void Run(const Scenario& s) {
  FakeClock clock(kStart);
  Budget b({s.budget, s.price, s.burst, s.cap}, &clock);
  clock.Set(kStart + s.idle);
  std::deque<absl::Time> last_hour;
  size_t max_hour = 0, sent = 0;
  while (true) {
    absl::Time next = b.NextSendTime(SendClass::kStandard);
    if (next >= kEnd) break;
    if (next > clock.Now()) clock.Set(next);
    if (b.TryAcquire(SendClass::kStandard) < 0) continue;
    ++sent;
    last_hour.push_back(clock.Now());
    while (clock.Now() - last_hour.front() >= absl::Hours(1)) last_hour.pop_front();
    max_hour = std::max(max_hour, last_hour.size());
  }
  const double spent = b.spent_micros() / 1e6;
  const double expected = std::floor(s.budget / s.price * 1000 + 1e-6);
  const double month_s = absl::ToDoubleSeconds(kEnd - kStart);
  const double active_s = absl::ToDoubleSeconds(kEnd - kStart - s.idle);
  const double pace_hour = expected / active_s * 3600;
  std::printf("%-34s budget $%9.2f  spent $%10.4f  sent %9zu of %9.0f  error %+7.4f%%  "
              "busiest hour %7zu (pace %9.1f + burst %d)%s\n",
              s.name, s.budget, spent, sent, expected, (sent - expected) / expected * 100, max_hour,
              pace_hour, s.burst, spent > s.budget + 1e-9 ? "  OVER BUDGET" : "");
  (void)month_s;
}

}  // namespace
}  // namespace mailroom

int main() {
  // Debian builds abseil with mutex deadlock detection on: a graph update on every unlock.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  using mailroom::Scenario;
  const Scenario scenarios[] = {
      {"$5/month, greedy", 5, 0.10, 10, std::nullopt, absl::ZeroDuration()},
      {"$100/month (seed: ~0.38/s), greedy", 100, 0.10, 10, std::nullopt, absl::ZeroDuration()},
      {"$1000/month, greedy", 1000, 0.10, 10, std::nullopt, absl::ZeroDuration()},
      {"$1000/month, SES cap 14/s", 1000, 0.10, 10, 14.0, absl::ZeroDuration()},
      {"$100/month, idle half the month", 100, 0.10, 10, std::nullopt, absl::Hours(24 * 15)},
      {"$0.37/month at $0.123 per 1000", 0.37, 0.123, 3, std::nullopt, absl::ZeroDuration()},
  };
  std::printf("budget pacer over November 2026 (30 days), greedy sender, fake clock:\n");
  for (const auto& s : scenarios) mailroom::Run(s);
  return 0;
}
