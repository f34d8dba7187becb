// GrantPacer on simulated time, with a scripted BudgetClient standing in for the collector
// (the collector side is budget_store_test's and integration_tests/budget_test's).
#include "sender/pacing/grant_pacer.h"

#include <deque>
#include <limits>
#include <vector>

#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"
#include "sender/pacing/budget.h"

namespace mailroom {
namespace {

const absl::Time kStart = absl::FromCivil(absl::CivilSecond(2026, 11, 10, 12, 0, 0),
                                          absl::UTCTimeZone());

// Answers AcquireBudget from a script (grant `emails`, or pace/exhausted answers) and records
// every call.
class ScriptedClient : public BudgetClient {
 public:
  struct Asked {
    int emails;
    bool recovery;
    int64_t price;
  };
  absl::StatusOr<v1::AcquireBudgetResponse> Acquire(int emails, bool recovery,
                                                    int64_t price) override {
    absl::MutexLock lock(&mu_);
    asked.push_back({emails, recovery, price});
    if (answers.empty()) return absl::UnavailableError("collector down");
    auto a = answers.front();
    answers.pop_front();
    return a;
  }
  absl::StatusOr<int> Return(uint64_t grant_id, int emails) override {
    absl::MutexLock lock(&mu_);
    returned.emplace_back(grant_id, emails);
    return emails;
  }
  void Grant(uint64_t id, int emails, int64_t expires_in_ms = 10000) {
    v1::AcquireBudgetResponse r;
    r.set_grant_id(id);
    r.set_emails(emails);
    r.set_expires_in_ms(expires_in_ms);
    r.set_pace_per_second(4);
    answers.push_back(r);
  }
  // A grant of an unlimited group: the collector reports an infinite pace.
  void GrantUnlimited(uint64_t id, int emails) {
    Grant(id, emails);
    answers.back()->set_pace_per_second(std::numeric_limits<double>::infinity());
  }
  void Paced(int64_t retry_after_ms, bool exhausted = false) {
    v1::AcquireBudgetResponse r;
    r.set_retry_after_ms(retry_after_ms);
    r.set_exhausted(exhausted);
    r.set_pace_per_second(exhausted ? 0 : 4);
    answers.push_back(r);
  }

  absl::Mutex mu_;
  std::deque<absl::StatusOr<v1::AcquireBudgetResponse>> answers;
  std::vector<Asked> asked;
  std::vector<std::pair<uint64_t, int>> returned;
};

class GrantPacerTest : public ::testing::Test {
 protected:
  GrantPacerTest() : clock_(kStart) {}
  std::unique_ptr<GrantPacer> Make(std::vector<Pacer*> caps = {}) {
    GrantPacerOptions o;
    o.price_micros = 100;
    o.max_request = 20;
    o.max_request_unlimited = 500;
    return std::make_unique<GrantPacer>(o, &client_, caps, &clock_);
  }
  FakeClock clock_;
  ScriptedClient client_;
};

TEST_F(GrantPacerTest, NothingIsSentWithoutAGrantAndGrantsAreAskedForOnDemand) {
  auto p = Make();
  p->Tick();
  EXPECT_TRUE(client_.asked.empty());  // no job waiting: nothing asked
  EXPECT_EQ(p->NextSendTime(SendClass::kStandard), kStart + absl::Milliseconds(10));
  EXPECT_EQ(p->TryAcquire(SendClass::kStandard), -1);
  client_.Grant(1, 3);
  p->Tick();
  ASSERT_EQ(client_.asked.size(), 1u);
  EXPECT_EQ(client_.asked[0].emails, 20);
  EXPECT_FALSE(client_.asked[0].recovery);
  EXPECT_EQ(client_.asked[0].price, 100);
  EXPECT_EQ(p->NextSendTime(SendClass::kStandard), kStart);
  EXPECT_EQ(p->TryAcquire(SendClass::kStandard), 100);
  EXPECT_EQ(p->TryAcquire(SendClass::kStandard), 100);
  EXPECT_EQ(p->held_emails(), 1);
  EXPECT_EQ(p->TryAcquire(SendClass::kStandard), 100);
  EXPECT_EQ(p->TryAcquire(SendClass::kStandard), -1);
  EXPECT_EQ(p->granted_emails(), 3);
  // The last email of a grant asks for the next one.
  client_.Grant(2, 1);
  p->Tick();
  EXPECT_EQ(client_.asked.size(), 2u);
  EXPECT_EQ(p->TryAcquire(SendClass::kStandard), 100);
}

TEST_F(GrantPacerTest, TheNextGrantIsAskedForWhenAQuarterIsLeft) {
  auto p = Make();
  p->NextSendTime(SendClass::kStandard);
  client_.Grant(12, 8);
  p->Tick();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(p->TryAcquire(SendClass::kStandard), 100);
  p->Tick();
  EXPECT_EQ(client_.asked.size(), 1u);  // 2 left: not low yet
  EXPECT_EQ(p->TryAcquire(SendClass::kStandard), 100);
  client_.Grant(13, 8);
  p->Tick();  // 1 left of 8: asked before running out
  EXPECT_EQ(client_.asked.size(), 2u);
  EXPECT_EQ(p->held_emails(), 9);
}

TEST_F(GrantPacerTest, AnUnlimitedGroupIsAskedForLargerGrants) {
  auto p = Make();
  p->NextSendTime(SendClass::kStandard);
  client_.GrantUnlimited(1, 20);
  p->Tick();  // the pace is not known yet: max_request
  for (int i = 0; i < 16; ++i) EXPECT_EQ(p->TryAcquire(SendClass::kStandard), 100);
  client_.GrantUnlimited(2, 500);
  p->Tick();  // 4 left of 20: low; the group is unlimited: max_request_unlimited
  ASSERT_EQ(client_.asked.size(), 2u);
  EXPECT_EQ(client_.asked[0].emails, 20);
  EXPECT_EQ(client_.asked[1].emails, 500);
  EXPECT_EQ(p->held_emails(), 504);
  // No further request until a quarter of the last grant (125) is left.
  for (int i = 0; i < 4 + 375; ++i) EXPECT_EQ(p->TryAcquire(SendClass::kStandard), 100);
  p->Tick();
  EXPECT_EQ(client_.asked.size(), 2u);  // 125 left: not low yet
  EXPECT_EQ(p->TryAcquire(SendClass::kStandard), 100);
  client_.Grant(3, 20);  // the group got a budget: paced again
  p->Tick();
  ASSERT_EQ(client_.asked.size(), 3u);
  EXPECT_EQ(client_.asked[2].emails, 500);
  EXPECT_EQ(p->TryAcquire(SendClass::kStandard), 100);
  for (int i = 0; i < 124 + 15; ++i) EXPECT_EQ(p->TryAcquire(SendClass::kStandard), 100);
  client_.Grant(4, 20);
  p->Tick();  // the last answer gave a finite pace: max_request again
  ASSERT_EQ(client_.asked.size(), 4u);
  EXPECT_EQ(client_.asked[3].emails, 20);
}

TEST_F(GrantPacerTest, ThePaceSaysWhenToAskAgain) {
  auto p = Make();
  p->NextSendTime(SendClass::kStandard);
  client_.Paced(250);
  p->Tick();
  EXPECT_EQ(p->NextSendTime(SendClass::kStandard), kStart + absl::Milliseconds(250));
  p->Tick();
  EXPECT_EQ(client_.asked.size(), 1u);  // not before the collector said
  clock_.Advance(absl::Milliseconds(250));
  EXPECT_EQ(p->NextSendTime(SendClass::kStandard), clock_.Now() + absl::Milliseconds(10));
  client_.Grant(3, 1);
  p->Tick();
  EXPECT_EQ(client_.asked.size(), 2u);
  EXPECT_EQ(p->TryAcquire(SendClass::kStandard), 100);
  EXPECT_DOUBLE_EQ(p->pace_per_second(), 4);
}

TEST_F(GrantPacerTest, ASpentBudgetHoldsJobsForAMinute) {
  auto p = Make();
  p->NextSendTime(SendClass::kStandard);
  client_.Paced(60000, /*exhausted=*/true);
  p->Tick();
  EXPECT_TRUE(p->exhausted());
  // More than the engine's max_budget_wait (30 s): it hands the jobs back.
  EXPECT_EQ(p->NextSendTime(SendClass::kStandard), kStart + absl::Seconds(60));
  // A recovery asks on its own (the reserve may still have money).
  EXPECT_EQ(p->NextSendTime(SendClass::kRecovery), kStart + absl::Milliseconds(10));
  client_.Grant(4, 1);
  p->Tick();
  ASSERT_EQ(client_.asked.size(), 2u);
  EXPECT_TRUE(client_.asked[1].recovery);
  // A recovery-only grant is not an activation's.
  EXPECT_EQ(p->TryAcquire(SendClass::kStandard), -1);
  EXPECT_EQ(p->TryAcquire(SendClass::kRecovery), 100);
}

TEST_F(GrantPacerTest, RecoveriesMayUseStandardGrants) {
  auto p = Make();
  p->NextSendTime(SendClass::kStandard);
  client_.Grant(5, 1);
  p->Tick();
  EXPECT_EQ(p->NextSendTime(SendClass::kRecovery), kStart);
  EXPECT_EQ(p->TryAcquire(SendClass::kRecovery), 100);
}

TEST_F(GrantPacerTest, UnusedEmailsGoBackBeforeTheGrantExpires) {
  auto p = Make();
  p->NextSendTime(SendClass::kStandard);
  client_.Grant(6, 4, /*expires_in_ms=*/10000);
  p->Tick();
  EXPECT_EQ(p->TryAcquire(SendClass::kStandard), 100);
  clock_.Advance(absl::Milliseconds(8999));
  p->Tick();
  EXPECT_TRUE(client_.returned.empty());
  EXPECT_EQ(p->held_emails(), 3);
  clock_.Advance(absl::Milliseconds(1));  // 1 s (the margin) before the collector's expiry
  EXPECT_EQ(p->TryAcquire(SendClass::kStandard), -1);
  p->Tick();  // (and asks for a new grant: none scripted, the collector is "down")
  ASSERT_EQ(client_.returned.size(), 1u);
  EXPECT_EQ(client_.returned[0], std::make_pair(uint64_t{6}, 3));
  EXPECT_EQ(p->returned_emails(), 3);
  EXPECT_EQ(p->held_emails(), 0);
}

TEST_F(GrantPacerTest, ARefundGoesBackIntoTheGrant) {
  auto p = Make();
  p->NextSendTime(SendClass::kStandard);
  client_.Grant(7, 1);
  p->Tick();
  EXPECT_EQ(p->TryAcquire(SendClass::kStandard), 100);
  EXPECT_EQ(p->held_emails(), 0);
  p->Refund(SendClass::kStandard);
  EXPECT_EQ(p->held_emails(), 1);
  EXPECT_EQ(p->TryAcquire(SendClass::kStandard), 100);
  p->Refund(SendClass::kStandard);
  p->Refund(SendClass::kStandard);  // nothing more was taken: no email appears
  EXPECT_EQ(p->held_emails(), 1);
}

TEST_F(GrantPacerTest, StopGivesBackEverythingUnused) {
  auto p = Make();
  p->NextSendTime(SendClass::kRecovery);
  client_.Grant(9, 2);
  p->Tick();
  p->NextSendTime(SendClass::kStandard);  // the recovery grant is not for activations
  client_.Grant(8, 5);
  p->Tick();
  EXPECT_EQ(p->TryAcquire(SendClass::kStandard), 100);
  p->Stop();
  ASSERT_EQ(client_.returned.size(), 2u);
  EXPECT_EQ(client_.returned[0], std::make_pair(uint64_t{9}, 2));
  EXPECT_EQ(client_.returned[1], std::make_pair(uint64_t{8}, 4));
  EXPECT_EQ(p->TryAcquire(SendClass::kStandard), -1);
}

TEST_F(GrantPacerTest, FailedRequestsBackOff) {
  auto p = Make();
  p->NextSendTime(SendClass::kStandard);
  p->Tick();  // no answer scripted: UNAVAILABLE
  EXPECT_EQ(p->NextSendTime(SendClass::kStandard), kStart + absl::Milliseconds(200));
  clock_.Advance(absl::Milliseconds(200));
  p->NextSendTime(SendClass::kStandard);
  p->Tick();
  EXPECT_EQ(p->NextSendTime(SendClass::kStandard), clock_.Now() + absl::Milliseconds(400));
  EXPECT_EQ(client_.asked.size(), 2u);
}

TEST_F(GrantPacerTest, ThePerSenderCapAppliesToo) {
  // A cap of 2 emails this month (MAILROOM_BUDGET): the third granted email is not sent.
  Budget cap({0.0002, 0.10, 10, std::nullopt}, &clock_);
  Budget unlimited({std::nullopt, 0.10, 10, std::nullopt}, &clock_);
  auto p = Make({&unlimited, &cap});
  p->NextSendTime(SendClass::kStandard);
  client_.Grant(10, 5);
  p->Tick();
  EXPECT_EQ(p->TryAcquire(SendClass::kStandard), 100);
  EXPECT_EQ(p->TryAcquire(SendClass::kStandard), 100);
  EXPECT_EQ(p->TryAcquire(SendClass::kStandard), -1);
  EXPECT_EQ(p->held_emails(), 3);
  EXPECT_EQ(unlimited.sent_this_month(), 2u);  // all caps or none
  EXPECT_GT(p->NextSendTime(SendClass::kStandard), kStart + absl::Hours(24));
}

TEST_F(GrantPacerTest, TheBackgroundThreadAsksWhenKicked) {
  GrantPacerOptions o;
  auto p = std::make_unique<GrantPacer>(o, &client_, std::vector<Pacer*>{}, RealClock::Get());
  {
    absl::MutexLock lock(&client_.mu_);
    client_.Grant(11, 1);
  }
  p->Start();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (p->TryAcquire(SendClass::kStandard) < 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(p->granted_emails(), 1);
  p->Stop();
}

// While a dearer secondary transport takes over (sender/delivery/failover.h), grants are bought at
// its price and only such grants are used; a refund goes back to a grant of the slot's price.
TEST_F(GrantPacerTest, WhileFailingOverGrantsAreBoughtAndUsedAtTheHigherPrice) {
  int64_t price = 100;
  GrantPacerOptions o;
  o.price_micros = 100;
  o.max_request = 20;
  o.price_now = [&price] { return price; };
  GrantPacer p(o, &client_, {}, &clock_);
  const SendClass r = SendClass::kRecovery;
  p.NextSendTime(r);
  client_.Grant(1, 5);
  p.Tick();
  ASSERT_EQ(client_.asked.size(), 1u);
  EXPECT_EQ(client_.asked[0].price, 100);
  EXPECT_EQ(p.TryAcquire(r), 100);
  // The primary goes down; the secondary costs 800 micros an email.
  price = 800;
  EXPECT_EQ(p.TryAcquire(r), -1);  // the grant bought at 100 does not pay for it
  EXPECT_EQ(p.NextSendTime(r), kStart + absl::Milliseconds(10));
  client_.Grant(2, 3);
  p.Tick();
  ASSERT_EQ(client_.asked.size(), 2u);
  EXPECT_EQ(client_.asked[1].price, 800);
  EXPECT_EQ(p.NextSendTime(r), kStart);
  EXPECT_EQ(p.TryAcquire(r), 800);
  EXPECT_EQ(p.TryAcquire(r), 800);
  // The slot taken at 100 before the switch comes back to grant 1, not to grant 2.
  p.Refund(r, 100);
  EXPECT_EQ(p.TryAcquire(r), 800);
  EXPECT_EQ(p.TryAcquire(r), -1);
  // The primary is back: the grant bought at 100 serves again (5 emails: 4 + the refund).
  price = 100;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(p.TryAcquire(r), 100) << i;
  EXPECT_EQ(p.TryAcquire(r), -1);
  // A priced refund never goes into a grant of another price.
  p.Refund(r, 800);
  EXPECT_EQ(p.TryAcquire(r), 800);
}

}  // namespace
}  // namespace mailroom
