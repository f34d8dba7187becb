// DecideOutcome as a table: one row per way an attempt can end, with what it is reported as,
// why, after how long, and whether the budget slot is spent.
#include "sender/delivery/outcome.h"

#include <vector>

#include "gtest/gtest.h"
#include "sender/transport/transport.h"

namespace mailroom {
namespace {

// Retries after 10 s per failure, up to the third failure; never a permanent error.
std::optional<absl::Duration> TenSecondsTimesFailures(const absl::Status& e, int failures) {
  if (failures >= 3 || e.code() == absl::StatusCode::kInvalidArgument) return std::nullopt;
  return absl::Seconds(10) * failures;
}

struct Row {
  const char* name;
  AttemptFacts facts;
  Verdict verdict;
  v1::Outcome outcome;  // OUTCOME_UNSPECIFIED: none, the job stays held
  std::string reason;
  absl::Duration after;
  bool charged;
  int64_t cost_micros;
  bool suppress;
};

AttemptFacts Facts() {
  AttemptFacts f;
  f.job_id = 42;
  f.charge = 700;
  f.hold_delay = absl::Seconds(4);
  return f;
}

std::vector<Row> Rows() {
  const absl::Duration z = absl::ZeroDuration();
  std::vector<Row> rows;
  auto add = [&](const char* name, auto edit, Verdict v, v1::Outcome o, std::string reason,
                 absl::Duration after, bool charged, int64_t cost, bool suppress) {
    AttemptFacts f = Facts();
    edit(f);
    rows.push_back(Row{name, f, v, o, std::move(reason), after, charged, cost, suppress});
  };
  add(
      "expiring", [](AttemptFacts& f) { f.expiring = true; }, Verdict::kExpired,
      v1::OUTCOME_EXPIRED, "token expires before it can be delivered", z, false, 0, false);
  add(
      "unrenderable",
      [](AttemptFacts& f) { f.rendered = absl::InvalidArgumentError("no address"); },
      Verdict::kUnrenderable, v1::OUTCOME_FAILED, "no address", z, false, 0, false);
  add(
      "held", [](AttemptFacts& f) { f.held = "auth refused"; }, Verdict::kHeld, v1::OUTCOME_DEFER,
      "held: provider unavailable: auth refused", absl::Seconds(4), false, 0, false);
  add(
      "slot too cheap for the secondary", [](AttemptFacts& f) { f.slot_short = true; },
      Verdict::kRequeued, v1::OUTCOME_UNSPECIFIED, "", z, false, 0, false);
  add(
      "sent", [](AttemptFacts& f) { f.provider_message_id = "ses-1"; }, Verdict::kSent,
      v1::OUTCOME_SENT, "", z, true, 700, false);
  add(
      "maybe sent, first failure",
      [](AttemptFacts& f) { f.sent = MaybeSent(absl::DeadlineExceededError("timeout")); },
      Verdict::kMaybeSentRetry, v1::OUTCOME_RETRY, "timeout", absl::Seconds(10), true, 0, false);
  add(
      "maybe sent, first failure, breaker probes later",
      [](AttemptFacts& f) {
        f.sent = MaybeSent(absl::DeadlineExceededError("timeout"));
        f.probe_wait = absl::Seconds(30);
      },
      Verdict::kMaybeSentRetry, v1::OUTCOME_RETRY, "timeout", absl::Seconds(30), true, 0, false);
  add(
      "maybe sent, second failure",
      [](AttemptFacts& f) {
        f.sent = MaybeSent(absl::DeadlineExceededError("timeout"));
        f.failures = 2;
      },
      Verdict::kUnconfirmed, v1::OUTCOME_SENT, "", z, true, 700, false);
  add(
      "provider error, secondary takes it",
      [](AttemptFacts& f) {
        f.sent = ProviderError("535 auth");
        f.breaker = true;
        f.failover_now = true;
      },
      Verdict::kFailingOver, v1::OUTCOME_UNSPECIFIED, "", z, false, 0, false);
  add(
      "provider error",
      [](AttemptFacts& f) {
        f.sent = ProviderError("535 auth");
        f.breaker = true;
      },
      Verdict::kProviderDown, v1::OUTCOME_DEFER, "held: provider unavailable: 535 auth",
      absl::Seconds(4), false, 0, false);
  add(
      "provider error without a breaker: retried",
      [](AttemptFacts& f) { f.sent = ProviderError("535 auth"); }, Verdict::kRetry,
      v1::OUTCOME_RETRY, "535 auth", absl::Seconds(10), false, 0, false);
  add(
      "transient, second failure",
      [](AttemptFacts& f) {
        f.sent = absl::UnavailableError("421 busy");
        f.failures = 2;
      },
      Verdict::kRetry, v1::OUTCOME_RETRY, "421 busy", absl::Seconds(20), false, 0, false);
  add(
      "transient, retries exhausted",
      [](AttemptFacts& f) {
        f.sent = absl::UnavailableError("421 busy");
        f.failures = 3;
      },
      Verdict::kGaveUp, v1::OUTCOME_FAILED, "gave up after 3 attempts: 421 busy", z, false, 0,
      false);
  add(
      "permanent", [](AttemptFacts& f) { f.sent = absl::InvalidArgumentError("554 spam"); },
      Verdict::kRejected, v1::OUTCOME_FAILED, "554 spam", z, false, 0, false);
  add(
      "recipient refused",
      [](AttemptFacts& f) { f.sent = RecipientRejected("550 5.1.1 no such user"); },
      Verdict::kRejected, v1::OUTCOME_FAILED, "550 5.1.1 no such user", z, false, 0, true);
  return rows;
}

TEST(DecideOutcomeTest, EveryWayAnAttemptEnds) {
  for (const Row& row : Rows()) {
    SCOPED_TRACE(row.name);
    const Decision d = DecideOutcome(row.facts, TenSecondsTimesFailures);
    EXPECT_EQ(VerdictName(d.verdict), std::string(VerdictName(row.verdict)));
    EXPECT_EQ(d.charged, row.charged);
    if (row.outcome == v1::OUTCOME_UNSPECIFIED) {
      EXPECT_FALSE(d.report.has_value());
      continue;
    }
    ASSERT_TRUE(d.report.has_value());
    EXPECT_EQ(d.report->job_id, 42u);
    EXPECT_EQ(d.report->outcome, row.outcome);
    EXPECT_EQ(d.report->reason, row.reason);
    EXPECT_EQ(d.report->retry_after, row.after);
    EXPECT_EQ(d.report->cost_micros, row.cost_micros);
    EXPECT_EQ(d.report->suppress_recipient, row.suppress);
  }
}

TEST(DecideOutcomeTest, EarlierStagesWinAndTheRetryPolicyIsAskedOnlyWhenItDecides) {
  int asked = 0;
  RetryDecider counting = [&](const absl::Status& e, int failures) {
    ++asked;
    return TenSecondsTimesFailures(e, failures);
  };
  AttemptFacts f = Facts();
  f.expiring = true;
  f.held = "down";
  f.sent = absl::UnavailableError("421");
  EXPECT_EQ(DecideOutcome(f, counting).verdict, Verdict::kExpired);
  f = Facts();
  f.sent = MaybeSent(absl::DeadlineExceededError("timeout"));
  f.failures = 2;  // an ambiguous send is retried only after the job's first failure
  EXPECT_EQ(DecideOutcome(f, counting).verdict, Verdict::kUnconfirmed);
  f.sent = absl::InvalidArgumentError("554");  // permanent: no retry to ask about
  EXPECT_EQ(DecideOutcome(f, counting).verdict, Verdict::kRejected);
  EXPECT_EQ(asked, 0);
  f.sent = absl::UnavailableError("421");
  EXPECT_EQ(DecideOutcome(f, counting).verdict, Verdict::kRetry);
  EXPECT_EQ(asked, 1);
}

}  // namespace
}  // namespace mailroom
