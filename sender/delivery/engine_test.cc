// The engine on simulated time (FakeClock) with a fake transport: pacing, priorities, expiry,
// the budget running out, retries, the provider breaker and a graceful drain. No test sleeps:
// each waits (bounded, in real time) for what the engine must do, or until every worker is
// parked on a simulated deadline, and only then asserts what must not have happened.
#include "sender/delivery/engine.h"

#include <deque>
#include <functional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"
#include "sender/delivery/breaker.h"
#include "sender/pacing/budget.h"

namespace mailroom {
namespace {

// 2026-01-15 12:00:00 UTC: mid-month, so the budget's month does not turn during a test.
const absl::Time kStart = absl::FromUnixSeconds(1768478400);

// Records what it is asked to send; answers with the scripted statuses, then OK.
class FakeTransport : public Transport {
 public:
  explicit FakeTransport(std::string name = "fake") : name_(std::move(name)) {}
  absl::StatusOr<SendResult> Send(const OutgoingEmail& email) override {
    absl::MutexLock lock(&mu_);
    sent_to_.push_back(email.to_address);
    tags_.push_back(email.tags);
    timeouts_.push_back(email.timeout);
    if (!script_.empty()) {
      absl::Status st = script_.front();
      script_.pop_front();
      if (!st.ok()) return st;
    }
    return SendResult{"ok", "msg-" + email.to_address};
  }
  int Concurrency() const override { return 1; }
  std::string Name() const override { return name_; }

  void Script(std::vector<absl::Status> statuses) {
    absl::MutexLock lock(&mu_);
    script_.assign(statuses.begin(), statuses.end());
  }
  std::vector<std::string> sent_to() {
    absl::MutexLock lock(&mu_);
    return sent_to_;
  }
  size_t sends() {
    absl::MutexLock lock(&mu_);
    return sent_to_.size();
  }
  std::vector<std::vector<std::pair<std::string, std::string>>> tags() {
    absl::MutexLock lock(&mu_);
    return tags_;
  }
  std::vector<absl::Duration> timeouts() {
    absl::MutexLock lock(&mu_);
    return timeouts_;
  }

 private:
  absl::Mutex mu_;
  std::deque<absl::Status> script_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> sent_to_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<std::pair<std::string, std::string>>> tags_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Duration> timeouts_ ABSL_GUARDED_BY(mu_);
  const std::string name_;
};

// A pacer shared with other senders (as a group's central budget is): it cannot tell which
// of its users gets the next slot, so it says "now" to everyone and grants only the slots the
// test opens, to whoever asks first.
class GatePacer : public Pacer {
 public:
  explicit GatePacer(Clock* clock) : clock_(clock) {}
  absl::Time NextSendTime(SendClass) override { return clock_->Now(); }
  int64_t TryAcquire(SendClass c) override {
    absl::MutexLock lock(&mu_);
    if (open_ == 0) return -1;
    --open_;
    classes_.push_back(c);
    return 100;
  }
  void Refund(SendClass) override {}
  void Open(int n) {
    absl::MutexLock lock(&mu_);
    open_ += n;
  }
  std::vector<SendClass> classes() {
    absl::MutexLock lock(&mu_);
    return classes_;
  }

 private:
  Clock* const clock_;
  absl::Mutex mu_;
  int open_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<SendClass> classes_ ABSL_GUARDED_BY(mu_);
};

// Holds every lease the engine asks about (unless `check` says otherwise) and records the
// outcomes it reports, in their wire form.
class RecordingLeaseHolder : public LeaseHolder {
 public:
  LeaseState Check(const LeasedJob& job, absl::Duration* send_window) override {
    return check ? check(job.job.job_id(), send_window) : LeaseState::kOwned;
  }
  void Report(OutcomeReport outcome) override {
    absl::MutexLock lock(&mu_);
    outcomes_.push_back(outcome.ToProto());
  }
  std::vector<v1::JobOutcome> outcomes() {
    absl::MutexLock lock(&mu_);
    return outcomes_;
  }

  // Set before the engine starts; unset: every lease owned, no send window.
  std::function<LeaseState(uint64_t job_id, absl::Duration* send_window)> check;

 private:
  absl::Mutex mu_;
  std::vector<v1::JobOutcome> outcomes_ ABSL_GUARDED_BY(mu_);
};

class EngineTest : public ::testing::Test {
 protected:
  EngineTest() : clock_(kStart) {}
  ~EngineTest() override {
    if (engine_ != nullptr) engine_->Drain();
  }

  // Builds and starts the engine (one worker unless told otherwise), paced by a Budget of
  // `budget`, or by `pacer` when given.
  void Start(BudgetConfig budget, EngineOptions options = {}, Pacer* pacer = nullptr) {
    budget_ = std::make_unique<Budget>(budget, &clock_);
    engine_ = std::make_unique<Engine>(
        options,
        [](const v1::Job& job) -> absl::StatusOr<OutgoingEmail> {
          if (job.email() == "unrenderable") return absl::InvalidArgumentError("bad address");
          return OutgoingEmail{"from@example.test", job.email(), "mime", "id"};
        },
        &transport_, pacer != nullptr ? pacer : budget_.get(),
        [this](const absl::Status&, int failures) -> std::optional<absl::Duration> {
          if (failures >= 3) return std::nullopt;
          return absl::Seconds(10) * failures;
        },
        &leases_, &metrics_, &clock_);
    workers_ = std::max(1, options.workers);
    engine_->Start();
  }

  v1::Job Job(uint64_t id, v1::Action action = v1::ACTION_ACTIVATION,
              absl::Duration expires_in = absl::Hours(1)) {
    v1::Job j;
    j.set_job_id(id);
    j.set_action(action);
    j.set_email(absl::StrCat("user", id, "@example.test"));
    j.set_login(absl::StrCat("user", id));
    j.set_expires_at(absl::ToUnixSeconds(clock_.Now() + expires_in));
    return j;
  }

  // Waits (in real time, bounded) until `pred` holds.
  bool Eventually(const std::function<bool()>& pred) {
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    while (!pred()) {
      if (absl::Now() > give_up) return false;
      absl::SleepFor(absl::Microseconds(200));
    }
    return true;
  }
  // Waits until every worker is parked on a simulated deadline: nothing more happens until
  // time moves.
  void Settle() {
    ASSERT_TRUE(Eventually([&] { return clock_.waiting() >= workers_; }));
  }
  bool SendsReach(size_t n) {
    return Eventually([&] { return transport_.sends() >= n; });
  }
  // Hands `jobs` to the engine, each under a lease of its own.
  void Submit(std::vector<v1::Job> jobs) {
    std::vector<LeasedJob> leased;
    for (v1::Job& j : jobs) leased.push_back(LeasedJob{std::move(j), LeaseRef{"sub-1", 1}});
    engine_->Submit(std::move(leased));
  }
  size_t OutcomeCount() { return leases_.outcomes().size(); }
  std::vector<v1::JobOutcome> Outcomes() { return leases_.outcomes(); }
  bool OutcomesReach(size_t n) {
    return Eventually([&] { return OutcomeCount() >= n; });
  }

  FakeClock clock_;
  Metrics metrics_;
  FakeTransport transport_;
  std::unique_ptr<Budget> budget_;
  RecordingLeaseHolder leases_;
  std::unique_ptr<Engine> engine_;
  int workers_ = 1;
};

BudgetConfig OnePerSecond() {
  BudgetConfig b;
  b.provider_rate = 1.0;
  return b;
}

// The collector reported jobs 2 and 3 lost, but job 3 came back on a new lease before the
// drop reached the engine (Submit skipped it: still queued): only what is still lost is
// dropped, and job 3 is sent under its new lease instead of being held forever.
TEST_F(EngineTest, ADropKeepsAJobReceivedAgainSinceItsLeaseWasLost) {
  leases_.check = [](uint64_t id, absl::Duration*) {
    return id == 2 ? LeaseState::kLost : LeaseState::kOwned;
  };
  Start(OnePerSecond());
  Submit({Job(1), Job(2), Job(3)});
  ASSERT_TRUE(SendsReach(1));  // job 1 at once; 2 and 3 wait for the pace
  Settle();
  engine_->Drop({2, 3});
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Milliseconds(1200));
    Settle();
  }
  EXPECT_EQ(transport_.sends(), 2u);  // jobs 1 and 3
}

TEST_F(EngineTest, SendsAtThePaceOnSimulatedTime) {
  Start(OnePerSecond());
  Submit({Job(1), Job(2), Job(3)});
  ASSERT_TRUE(SendsReach(1));  // the bucket starts full: one goes at once
  Settle();
  EXPECT_EQ(transport_.sends(), 1u);
  clock_.Advance(absl::Milliseconds(600));
  Settle();
  EXPECT_EQ(transport_.sends(), 1u) << "sent faster than 1/s";
  clock_.Advance(absl::Milliseconds(600));  // 1.2 s: the next slot is open
  ASSERT_TRUE(SendsReach(2));
  Settle();
  EXPECT_EQ(transport_.sends(), 2u);
  clock_.Advance(absl::Milliseconds(1100));
  ASSERT_TRUE(SendsReach(3));
  ASSERT_TRUE(OutcomesReach(3));
  for (const auto& o : Outcomes()) EXPECT_EQ(o.outcome(), v1::OUTCOME_SENT);
  EXPECT_GT(metrics_.Value("mailroom_sender_rate_limit_wait_seconds_total"), 0);
}

// Every email carries its job in the provider's tags, and the transport's feedback id (SES
// MessageId) goes back with the SENT outcome only.
TEST_F(EngineTest, TagsTheEmailAndReportsTheProvidersMessageId) {
  Start(BudgetConfig{});
  transport_.Script({absl::InvalidArgumentError("ses 400 MessageRejected")});
  Submit({Job(7, v1::ACTION_PASSWORD_RECOVERY)});
  ASSERT_TRUE(OutcomesReach(1));
  Submit({Job(8)});
  ASSERT_TRUE(OutcomesReach(2));
  const std::vector<v1::JobOutcome> o = Outcomes();
  EXPECT_EQ(o[0].outcome(), v1::OUTCOME_FAILED);
  EXPECT_EQ(o[0].provider_message_id(), "");
  EXPECT_EQ(o[1].outcome(), v1::OUTCOME_SENT);
  EXPECT_EQ(o[1].provider_message_id(), "msg-user8@example.test");
  // The transport that sent it goes with SENT only: only its feedback reaches the delivery.
  EXPECT_EQ(o[0].provider(), "");
  EXPECT_EQ(o[1].provider(), "fake");
  using Tags = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(transport_.tags()[0],
            (Tags{{"mailroom_job", "7"}, {"mailroom_action", "password_recovery"}}));
  EXPECT_EQ(transport_.tags()[1], (Tags{{"mailroom_job", "8"}, {"mailroom_action", "activation"}}));
}

TEST_F(EngineTest, RecoveryFirstThenEarliestExpiry) {
  Start(OnePerSecond());
  // The first job takes the only slot; the rest queue up and are taken in priority order.
  Submit({Job(1)});
  ASSERT_TRUE(SendsReach(1));
  Settle();
  Submit({Job(2, v1::ACTION_ACTIVATION, absl::Hours(2)),
          Job(3, v1::ACTION_ACTIVATION, absl::Hours(1)),
          Job(4, v1::ACTION_PASSWORD_RECOVERY, absl::Hours(3))});
  for (size_t n = 2; n <= 4; ++n) {
    // No Settle(): the clock may move between a worker's reading of the next slot and its
    // pause, which must then end at once (Engine::TakeNext's wake_at).
    clock_.Advance(absl::Milliseconds(1100));
    ASSERT_TRUE(SendsReach(n));
  }
  EXPECT_EQ(transport_.sent_to(),
            (std::vector<std::string>{"user1@example.test", "user4@example.test",
                                      "user3@example.test", "user2@example.test"}));
}

// Job.priority orders the other actions: a critical sign-in code before activations, a notice
// after them whatever its expiry.
TEST_F(EngineTest, CriticalThenNormalThenNoticeByJobPriority) {
  Start(OnePerSecond());
  Submit({Job(1)});
  ASSERT_TRUE(SendsReach(1));
  Settle();
  auto other = [&](uint64_t id, v1::Priority priority, absl::Duration expires_in) {
    v1::Job j = Job(id, v1::ACTION_OTHER, expires_in);
    j.set_action_name(priority == v1::PRIORITY_NOTICE ? "password_changed" : "login_code");
    j.set_priority(priority);
    return j;
  };
  Submit({other(2, v1::PRIORITY_NOTICE, absl::Minutes(1)),
          Job(3, v1::ACTION_ACTIVATION, absl::Hours(2)),
          other(4, v1::PRIORITY_CRITICAL, absl::Hours(3))});
  for (size_t n = 2; n <= 4; ++n) {
    // No Settle(): the clock may move between a worker's reading of the next slot and its
    // pause, which must then end at once (Engine::TakeNext's wake_at).
    clock_.Advance(absl::Milliseconds(1100));
    ASSERT_TRUE(SendsReach(n));
  }
  EXPECT_EQ(transport_.sent_to(),
            (std::vector<std::string>{"user1@example.test", "user4@example.test",
                                      "user3@example.test", "user2@example.test"}));
}

// Several workers share one pacer that says "now" to all of them: a worker takes a job only
// with its slot, so no worker sits on a job while another gets the slot, and each slot goes to
// the head of the queue at that moment. Recoveries that arrive while every worker waits leave
// at the next slots, before the activations queued earlier.
TEST_F(EngineTest, SeveralWorkersSendInPriorityOrderOneJobPerSlot) {
  GatePacer pacer(&clock_);
  EngineOptions o;
  o.workers = 4;
  Start(BudgetConfig{}, o, &pacer);
  Submit({Job(1), Job(2), Job(3), Job(4), Job(5)});
  Settle();
  EXPECT_EQ(engine_->queued(), 5u) << "a worker holds a job without a slot";
  Submit({Job(10, v1::ACTION_PASSWORD_RECOVERY), Job(11, v1::ACTION_PASSWORD_RECOVERY)});
  for (size_t n = 1; n <= 7; ++n) {
    pacer.Open(1);
    clock_.Advance(absl::Milliseconds(2));
    ASSERT_TRUE(SendsReach(n));
    Settle();
    EXPECT_EQ(transport_.sends(), n) << "more than one job for one slot";
  }
  EXPECT_EQ(transport_.sent_to(),
            (std::vector<std::string>{"user10@example.test", "user11@example.test",
                                      "user1@example.test", "user2@example.test",
                                      "user3@example.test", "user4@example.test",
                                      "user5@example.test"}));
  // Each slot was asked for in the class of the job it sent.
  EXPECT_EQ(pacer.classes(), (std::vector<SendClass>{SendClass::kRecovery, SendClass::kRecovery,
                                                     SendClass::kStandard, SendClass::kStandard,
                                                     SendClass::kStandard, SendClass::kStandard,
                                                     SendClass::kStandard}));
  ASSERT_TRUE(OutcomesReach(7));
  for (const auto& x : Outcomes()) EXPECT_EQ(x.outcome(), v1::OUTCOME_SENT);
}

// A recovery submitted between two slots, with many activations held, is the next job sent,
// whichever of the eight workers gets the slot; and so on for every one.
TEST_F(EngineTest, EachRecoveryIsTheNextSendWithEightWorkers) {
  EngineOptions o;
  o.workers = 8;
  Start(OnePerSecond(), o);
  std::vector<v1::Job> backlog;
  for (uint64_t id = 1; id <= 100; ++id) backlog.push_back(Job(id));
  Submit(std::move(backlog));
  ASSERT_TRUE(SendsReach(1));
  for (uint64_t r = 1000; r < 1005; ++r) {
    Settle();
    const size_t before = transport_.sends();
    Submit({Job(r, v1::ACTION_PASSWORD_RECOVERY)});
    clock_.Advance(absl::Milliseconds(1100));
    ASSERT_TRUE(SendsReach(before + 1));
    Settle();
    ASSERT_EQ(transport_.sends(), before + 1);
    EXPECT_EQ(transport_.sent_to().back(), absl::StrCat("user", r, "@example.test"));
    clock_.Advance(absl::Milliseconds(1100));  // an activation in between
    ASSERT_TRUE(SendsReach(before + 2));
  }
  EXPECT_EQ(engine_->queued(), 100u - 1 - 5);
}

// A job too close to expiry is reported at once: it takes no slot and waits for none.
TEST_F(EngineTest, AnExpiringJobNeitherWaitsForNorTakesASlot) {
  EngineOptions o;
  o.expiry_margin = absl::Seconds(30);
  Start(OnePerSecond(), o);
  Submit({Job(1)});
  ASSERT_TRUE(SendsReach(1));
  Settle();
  Submit({Job(2, v1::ACTION_ACTIVATION, absl::Seconds(20)), Job(3)});
  ASSERT_TRUE(OutcomesReach(2));  // no simulated time has passed
  Settle();
  EXPECT_EQ(Outcomes()[1].job_id(), 2u);
  EXPECT_EQ(Outcomes()[1].outcome(), v1::OUTCOME_EXPIRED);
  clock_.Advance(absl::Milliseconds(1100));
  ASSERT_TRUE(SendsReach(2));
  EXPECT_EQ(transport_.sent_to().back(), "user3@example.test");
}

TEST_F(EngineTest, AJobTooCloseToExpiryIsExpiredNotSent) {
  EngineOptions o;
  o.expiry_margin = absl::Seconds(30);
  Start(BudgetConfig{}, o);
  Submit({Job(1, v1::ACTION_ACTIVATION, absl::Seconds(20)), Job(2)});
  ASSERT_TRUE(OutcomesReach(2));
  auto out = Outcomes();
  std::map<uint64_t, v1::Outcome> by_id;
  for (const auto& x : out) by_id[x.job_id()] = x.outcome();
  EXPECT_EQ(by_id[1], v1::OUTCOME_EXPIRED);
  EXPECT_EQ(by_id[2], v1::OUTCOME_SENT);
  EXPECT_EQ(transport_.sent_to(), std::vector<std::string>{"user2@example.test"});
}

TEST_F(EngineTest, SpentBudgetHandsJobsBackUntilTheMoneyComesBack) {
  BudgetConfig b;
  b.monthly_budget = 0.0002;  // two emails at 0.10 per 1000
  b.price_per_1000 = 0.10;
  b.burst = 2;
  Start(b);
  Submit({Job(1), Job(2), Job(3)});
  ASSERT_TRUE(OutcomesReach(3));
  Settle();
  auto out = Outcomes();
  int sent = 0, deferred = 0;
  for (const auto& o : out) {
    if (o.outcome() == v1::OUTCOME_SENT) {
      ++sent;
      EXPECT_EQ(o.cost_micros(), 100);
    }
    if (o.outcome() == v1::OUTCOME_DEFER) {
      ++deferred;
      EXPECT_EQ(o.reason(), "sending budget exhausted for now");
      EXPECT_EQ(o.retry_after_ms(), 3600 * 1000);  // capped at an hour
    }
  }
  EXPECT_EQ(sent, 2);
  EXPECT_EQ(deferred, 1);
  EXPECT_EQ(engine_->queued(), 0u);
  EXPECT_EQ(metrics_.Value("mailroom_sender_budget_deferrals_total"), 1);
}

TEST_F(EngineTest, RetryableFailuresRetryPermanentOnesFail) {
  Start(BudgetConfig{});
  transport_.Script({absl::UnavailableError("smtp RCPT: 451 try later"),
                     absl::InvalidArgumentError("smtp RCPT: 550 user unknown")});
  Submit({Job(1)});
  ASSERT_TRUE(OutcomesReach(1));
  Submit({Job(2)});
  ASSERT_TRUE(OutcomesReach(2));
  auto out = Outcomes();
  EXPECT_EQ(out[0].outcome(), v1::OUTCOME_RETRY);
  EXPECT_EQ(out[0].retry_after_ms(), 10000u);
  EXPECT_EQ(out[0].reason(), "smtp RCPT: 451 try later");
  EXPECT_EQ(out[1].outcome(), v1::OUTCOME_FAILED);
  EXPECT_EQ(out[1].reason(), "smtp RCPT: 550 user unknown");
  // A failed send is not charged.
  EXPECT_EQ(budget_->spent_micros(), 0);
}

TEST_F(EngineTest, APermanentlyRejectedAddressIsFailedWithSuppressRecipient) {
  Start(BudgetConfig{});
  transport_.Script({RecipientRejected("smtp RCPT: 550 5.1.1 <x@example.test>: user unknown"),
                     absl::InvalidArgumentError("smtp DATA: 554 5.7.1 spam")});
  Submit({Job(1)});
  ASSERT_TRUE(OutcomesReach(1));
  Submit({Job(2)});
  ASSERT_TRUE(OutcomesReach(2));
  auto out = Outcomes();
  EXPECT_EQ(out[0].outcome(), v1::OUTCOME_FAILED);
  EXPECT_EQ(out[0].reason(), "smtp RCPT: 550 5.1.1 <x@example.test>: user unknown");
  EXPECT_TRUE(out[0].suppress_recipient());
  EXPECT_EQ(out[1].outcome(), v1::OUTCOME_FAILED);
  EXPECT_FALSE(out[1].suppress_recipient());
  EXPECT_EQ(budget_->spent_micros(), 0);
}

TEST_F(EngineTest, GivesUpWhenTheRetryPolicySaysSo) {
  Start(BudgetConfig{});
  transport_.Script({absl::UnavailableError("451 busy")});
  v1::Job j = Job(1);
  j.set_failures(2);  // this is the third failure
  Submit({j});
  ASSERT_TRUE(OutcomesReach(1));
  EXPECT_EQ(Outcomes()[0].outcome(), v1::OUTCOME_FAILED);
  EXPECT_EQ(Outcomes()[0].reason(), "gave up after 3 attempts: 451 busy");
}

// A timeout after the request left: the provider may have accepted (and billed) it.
absl::Status Ambiguous() {
  return MaybeSent(ProviderError("Operation timed out after 1000 milliseconds (curl 28)"));
}

TEST_F(EngineTest, AnAmbiguousSendIsChargedAndRetriedOnceThenCountedAsSent) {
  BudgetConfig b;
  b.price_per_1000 = 0.10;
  Start(b);
  transport_.Script({Ambiguous(), Ambiguous()});
  Submit({Job(1)});  // first failure: one retry, the slot stays charged
  ASSERT_TRUE(OutcomesReach(1));
  v1::Job again = Job(2);
  again.set_failures(1);  // it failed before: a second ambiguous send is not retried
  Submit({again});
  ASSERT_TRUE(OutcomesReach(2));
  auto out = Outcomes();
  EXPECT_EQ(out[0].outcome(), v1::OUTCOME_RETRY);
  EXPECT_EQ(out[0].retry_after_ms(), 10000u);
  EXPECT_EQ(out[0].cost_micros(), 0);
  EXPECT_EQ(out[1].outcome(), v1::OUTCOME_SENT);
  EXPECT_EQ(out[1].cost_micros(), 100);
  EXPECT_EQ(out[1].provider_message_id(), "");
  EXPECT_EQ(transport_.sends(), 2u);
  EXPECT_EQ(budget_->spent_micros(), 200);  // both sends charged, neither refunded
  EXPECT_EQ(metrics_.Value("mailroom_sender_maybe_sent_total"), 2);
  EXPECT_EQ(metrics_.Value("mailroom_sender_unconfirmed_total"), 1);
}

TEST_F(EngineTest, AnAmbiguousTimeoutIsChargedEvenWhileTheProviderLooksDown) {
  Breaker breaker({absl::Seconds(1), absl::Seconds(60)}, &clock_, &metrics_);
  EngineOptions o;
  o.breaker = &breaker;
  BudgetConfig b;
  b.price_per_1000 = 0.10;
  Start(b, o);
  transport_.Script({Ambiguous()});
  Submit({Job(1)});
  ASSERT_TRUE(OutcomesReach(1));
  EXPECT_TRUE(breaker.open());
  // Not handed back uncounted and refunded like an outage's failure: counted and charged.
  EXPECT_EQ(Outcomes()[0].outcome(), v1::OUTCOME_RETRY);
  EXPECT_EQ(Outcomes()[0].retry_after_ms(), 10000u);
  EXPECT_EQ(budget_->spent_micros(), 100);
}

TEST_F(EngineTest, AnAttemptNeverOutlastsTheLease) {
  leases_.check = [](uint64_t id, absl::Duration* window) {
    *window = absl::Seconds(id);  // job N's lease leaves N s for the send
    return LeaseState::kOwned;
  };
  Start(BudgetConfig{});
  Submit({Job(7)});
  ASSERT_TRUE(OutcomesReach(1));
  Submit({Job(40)});
  ASSERT_TRUE(OutcomesReach(2));
  EXPECT_EQ(transport_.timeouts(),
            (std::vector<absl::Duration>{absl::Seconds(7), absl::Seconds(40)}));
}

TEST_F(EngineTest, UnrenderableJobFailsUnpaid) {
  Start(BudgetConfig{});
  v1::Job j = Job(1);
  j.set_email("unrenderable");
  Submit({j});
  ASSERT_TRUE(OutcomesReach(1));
  EXPECT_EQ(Outcomes()[0].outcome(), v1::OUTCOME_FAILED);
  EXPECT_EQ(transport_.sends(), 0u);
  EXPECT_EQ(budget_->spent_micros(), 0);
}

TEST_F(EngineTest, ProviderOutageHoldsJobsAndProbesOnSimulatedTime) {
  Breaker breaker({absl::Seconds(1), absl::Seconds(60)}, &clock_, &metrics_);
  EngineOptions o;
  o.breaker = &breaker;
  Start(BudgetConfig{}, o);
  transport_.Script({ProviderError("smtp AUTH: 535 credentials invalid")});
  Submit({Job(1)});
  ASSERT_TRUE(OutcomesReach(1));
  EXPECT_TRUE(breaker.open());
  EXPECT_EQ(Outcomes()[0].outcome(), v1::OUTCOME_DEFER);
  EXPECT_TRUE(absl::StartsWith(Outcomes()[0].reason(), "held: provider unavailable: "));
  // While open, queued jobs go back to PostgreSQL until the probe is due.
  Submit({Job(2)});
  ASSERT_TRUE(OutcomesReach(2));
  EXPECT_EQ(Outcomes()[1].outcome(), v1::OUTCOME_DEFER);
  EXPECT_EQ(Outcomes()[1].retry_after_ms(), 1000u);
  Settle();
  EXPECT_EQ(transport_.sends(), 1u);
  // One simulated second later a job is the probe; it gets through and closes the breaker.
  clock_.Advance(absl::Seconds(1));
  Submit({Job(3)});
  ASSERT_TRUE(OutcomesReach(3));
  EXPECT_EQ(Outcomes()[2].outcome(), v1::OUTCOME_SENT);
  EXPECT_FALSE(breaker.open());
}

TEST_F(EngineTest, LostLeaseIsNeitherSentNorReported) {
  leases_.check = [](uint64_t id, absl::Duration*) {
    return id == 1 ? LeaseState::kLost : LeaseState::kOwned;
  };
  Start(BudgetConfig{});
  Submit({Job(1), Job(2)});
  ASSERT_TRUE(OutcomesReach(1));
  Settle();
  EXPECT_EQ(Outcomes().size(), 1u);
  EXPECT_EQ(Outcomes()[0].job_id(), 2u);
  EXPECT_EQ(transport_.sent_to(), std::vector<std::string>{"user2@example.test"});
  EXPECT_TRUE(engine_->Held().empty());
}

TEST_F(EngineTest, DrainHandsQueuedJobsBackAtOnce) {
  BudgetConfig b;
  b.provider_rate = 0.05;  // one now, the next in 20 s
  Start(b);
  Submit({Job(1), Job(2), Job(3)});
  ASSERT_TRUE(SendsReach(1));
  Settle();
  engine_->Drain();  // no simulated time passes: the pace wait must not hold it up
  auto out = Outcomes();
  ASSERT_EQ(out.size(), 3u);
  int deferred = 0;
  for (const auto& x : out) {
    if (x.outcome() == v1::OUTCOME_DEFER) {
      ++deferred;
      EXPECT_EQ(x.reason(), "sender shutting down");
      EXPECT_EQ(x.retry_after_ms(), 0u);
    }
  }
  EXPECT_EQ(deferred, 2);
  // A job arriving after the drain goes straight back.
  Submit({Job(4)});
  EXPECT_EQ(Outcomes().size(), 4u);
  EXPECT_EQ(Outcomes().back().outcome(), v1::OUTCOME_DEFER);
}

// A pacer whose slots cost what the test sets (as the group budget's grants do, bought at the
// failover price while a dearer secondary takes over); it records the refunds' prices.
class PricedPacer : public Pacer {
 public:
  explicit PricedPacer(Clock* clock) : clock_(clock) {}
  absl::Time NextSendTime(SendClass) override { return clock_->Now(); }
  int64_t TryAcquire(SendClass) override {
    absl::MutexLock lock(&mu_);
    return price_;
  }
  void Refund(SendClass) override {}
  void Refund(SendClass, int64_t cost) override {
    absl::MutexLock lock(&mu_);
    refunds_.push_back(cost);
  }
  void SetPrice(int64_t price) {
    absl::MutexLock lock(&mu_);
    price_ = price;
  }
  size_t refunds() {
    absl::MutexLock lock(&mu_);
    return refunds_.size();
  }
  std::vector<int64_t> refund_prices() {
    absl::MutexLock lock(&mu_);
    return refunds_;
  }

 private:
  Clock* const clock_;
  absl::Mutex mu_;
  int64_t price_ ABSL_GUARDED_BY(mu_) = 100;
  std::vector<int64_t> refunds_ ABSL_GUARDED_BY(mu_);
};

class FailoverEngineTest : public EngineTest {
 protected:
  FailoverEngineTest()
      : primary_breaker_({absl::Seconds(1), absl::Seconds(60), "primary"}, &clock_, &metrics_),
        secondary_breaker_({absl::Seconds(1), absl::Seconds(60), "secondary"}, &clock_) {}

  EngineOptions Options(int64_t secondary_price) {
    EngineOptions o;
    o.breaker = &primary_breaker_;
    o.secondary = &secondary_;
    o.secondary_breaker = &secondary_breaker_;
    o.failover.configured = true;
    o.failover.classes = FailoverClasses::kRecovery;
    o.failover.primary_price_micros = 100;
    o.failover.secondary_price_micros = secondary_price;
    return o;
  }
  const v1::JobOutcome* OutcomeOf(const std::vector<v1::JobOutcome>& all, uint64_t id) {
    for (const auto& o : all) {
      if (o.job_id() == id) return &o;
    }
    return nullptr;
  }

  Breaker primary_breaker_;
  Breaker secondary_breaker_;
  FakeTransport secondary_{"fake-secondary"};
};

TEST_F(FailoverEngineTest, RecoveriesGoToTheSecondaryWhileThePrimaryIsDownActivationsWait) {
  BudgetConfig b;
  b.price_per_1000 = 0.10;  // slots at 100 micros
  Start(b, Options(/*secondary_price=*/80));
  transport_.Script({ProviderError("connect: timed out")});
  // The primary fails the recovery with an outage: the secondary sends it at once, charged at
  // the secondary's price; nothing is handed back.
  Submit({Job(1, v1::ACTION_PASSWORD_RECOVERY)});
  ASSERT_TRUE(OutcomesReach(1));
  EXPECT_TRUE(primary_breaker_.open());
  EXPECT_EQ(Outcomes()[0].outcome(), v1::OUTCOME_SENT);
  EXPECT_EQ(Outcomes()[0].cost_micros(), 80);
  EXPECT_EQ(Outcomes()[0].provider(), "fake-secondary");
  EXPECT_EQ(transport_.sends(), 1u);
  EXPECT_EQ(secondary_.sends(), 1u);
  // While the primary is down: an activation is held (not failed, not charged), a recovery
  // goes straight to the secondary without touching the primary.
  Submit({Job(2, v1::ACTION_ACTIVATION), Job(3, v1::ACTION_PASSWORD_RECOVERY)});
  ASSERT_TRUE(OutcomesReach(3));
  auto out = Outcomes();
  ASSERT_NE(OutcomeOf(out, 2), nullptr);
  EXPECT_EQ(OutcomeOf(out, 2)->outcome(), v1::OUTCOME_DEFER);
  EXPECT_TRUE(absl::StartsWith(OutcomeOf(out, 2)->reason(), "held: provider unavailable: "));
  ASSERT_NE(OutcomeOf(out, 3), nullptr);
  EXPECT_EQ(OutcomeOf(out, 3)->outcome(), v1::OUTCOME_SENT);
  EXPECT_EQ(OutcomeOf(out, 3)->cost_micros(), 80);
  EXPECT_EQ(transport_.sends(), 1u);
  EXPECT_EQ(secondary_.sends(), 2u);
  Settle();
  // The primary's probe is due after a simulated second: the next job is the probe, gets
  // through, and the primary takes over again at its own price.
  clock_.Advance(absl::Seconds(1));
  Submit({Job(4, v1::ACTION_PASSWORD_RECOVERY)});
  ASSERT_TRUE(OutcomesReach(4));
  EXPECT_EQ(Outcomes()[3].outcome(), v1::OUTCOME_SENT);
  EXPECT_EQ(Outcomes()[3].cost_micros(), 100);
  EXPECT_EQ(Outcomes()[3].provider(), "fake");
  EXPECT_FALSE(primary_breaker_.open());
  EXPECT_EQ(transport_.sends(), 2u);
  EXPECT_EQ(secondary_.sends(), 2u);
  EXPECT_EQ(metrics_.Value("mailroom_sender_transport_sent_total", {{"transport", "secondary"}}),
            2);
}

TEST_F(FailoverEngineTest, BothDownHoldsEveryJobUncharged) {
  Start(BudgetConfig{}, Options(80));
  transport_.Script({ProviderError("primary down")});
  secondary_.Script({ProviderError("secondary down")});
  Submit({Job(1, v1::ACTION_PASSWORD_RECOVERY)});
  ASSERT_TRUE(OutcomesReach(1));
  EXPECT_TRUE(primary_breaker_.open());
  EXPECT_TRUE(secondary_breaker_.open());
  EXPECT_EQ(Outcomes()[0].outcome(), v1::OUTCOME_DEFER);
  EXPECT_EQ(Outcomes()[0].cost_micros(), 0);
  EXPECT_EQ(budget_->spent_micros(), 0);
  Submit({Job(2, v1::ACTION_PASSWORD_RECOVERY)});
  ASSERT_TRUE(OutcomesReach(2));
  EXPECT_EQ(Outcomes()[1].outcome(), v1::OUTCOME_DEFER);
  Settle();
  EXPECT_EQ(transport_.sends(), 1u);
  EXPECT_EQ(secondary_.sends(), 1u);
}

TEST_F(FailoverEngineTest, ADearerSecondaryWaitsForASlotAtItsPrice) {
  PricedPacer pacer(&clock_);
  Start(BudgetConfig{}, Options(/*secondary_price=*/800), &pacer);
  // The primary is down before the job arrives.
  primary_breaker_.Record(primary_breaker_.Admit(), ProviderError("primary down"));
  ASSERT_TRUE(primary_breaker_.open());
  Submit({Job(1, v1::ACTION_PASSWORD_RECOVERY)});
  // Slots at the primary's price do not cover the secondary: given back, nothing sent.
  ASSERT_TRUE(Eventually([&] { return pacer.refunds() >= 3; }));
  EXPECT_EQ(secondary_.sends(), 0u);
  EXPECT_EQ(OutcomeCount(), 0u);
  for (int64_t p : pacer.refund_prices()) EXPECT_EQ(p, 100);
  pacer.SetPrice(800);
  ASSERT_TRUE(OutcomesReach(1));
  EXPECT_EQ(Outcomes()[0].outcome(), v1::OUTCOME_SENT);
  EXPECT_EQ(Outcomes()[0].cost_micros(), 800);
  EXPECT_EQ(transport_.sends(), 0u);
  EXPECT_EQ(secondary_.sends(), 1u);
}

}  // namespace
}  // namespace mailroom
