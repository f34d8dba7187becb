// The BudgetStore and its SQL (mailroom_budget_grant / _return / _state) and
// the refund of dead holders' grants (with the Store counting jobs handed and settled) against a
// throwaway PostgreSQL; one fresh database per test.
#include "collector/store/budget_store.h"

#include <pqxx/pqxx>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "collector/schema/migrate.h"
#include "collector/store/store.h"
#include "gtest/gtest.h"
#include "testing/migrated_database.h"

namespace mailroom {
namespace {

constexpr int64_t kPrice = 100;  // $0.10 per 1,000 emails

class BudgetStoreTest : public testing::MigratedDatabaseTest {
 protected:
  void SetUp() override {
    MigratedDatabaseTest::SetUp();
    if (HasFatalFailure()) return;
    Exec("SELECT mailroom_ensure_group('g', false)");
    store_ = NewPgBudgetStore(url_, {});
  }

  // Refills the pace bucket, so a test about money is not slowed by the pace.
  void FillBucket() { Exec("UPDATE group_budgets SET bucket_at = NULL"); }
  void SetBudget(int64_t emails, int reserve_percent, int burst) {
    BudgetSettings s;
    s.group = "g";
    s.monthly_budget_micros = emails * kPrice;
    s.recovery_reserve_percent = reserve_percent;
    s.burst = burst;
    ASSERT_TRUE(store_->Set(s).ok());
  }
  Grant Acquire(int emails, bool recovery = false, const std::string& holder = "s1") {
    auto g = store_->Acquire({"g", holder, emails, recovery, kPrice});
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? *g : Grant{};
  }

  std::unique_ptr<BudgetStore> store_;
};

TEST_F(BudgetStoreTest, UnlimitedByDefaultGrantsWhatIsAsked) {
  Grant g = Acquire(50);
  EXPECT_EQ(g.emails, 50);
  EXPECT_GT(g.grant_id, 0u);
  EXPECT_GT(g.expires_at, absl::Now());
  EXPECT_LE(g.expires_at, absl::Now() + absl::Seconds(11));
  auto b = store_->Get("g");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE(b->monthly_budget_micros.has_value());
  EXPECT_TRUE(b->budget_is_default);
  EXPECT_EQ(b->recovery_reserve_percent, 10);
  EXPECT_EQ(b->committed_micros, 50 * kPrice);
  EXPECT_EQ(b->outstanding_micros, 50 * kPrice);
}

TEST_F(BudgetStoreTest, TheCollectorsDefaultBudgetApplies) {
  store_ = NewPgBudgetStore(url_, {3 * kPrice, 0, absl::Seconds(10)});
  int total = 0;
  for (int i = 0; i < 10; ++i) {
    FillBucket();
    total += Acquire(10).emails;
  }
  EXPECT_EQ(total, 3);
  EXPECT_TRUE(Acquire(1).exhausted);
}

TEST_F(BudgetStoreTest, GrantsNeverExceedTheBudget) {
  SetBudget(7, 0, 100);
  int total = 0;
  for (int i = 0; i < 20; ++i) {
    FillBucket();
    total += Acquire(3).emails;
  }
  EXPECT_EQ(total, 7);
  Grant refused = Acquire(1);
  EXPECT_EQ(refused.emails, 0);
  EXPECT_TRUE(refused.exhausted);
  EXPECT_EQ(refused.retry_after, absl::Seconds(60));
}

TEST_F(BudgetStoreTest, GrantedIsTheSumOfGrants) {
  Exec("INSERT INTO group_usage (group_id, month, sent, cost_micros) SELECT id, "
       "date_trunc('month', now() AT TIME ZONE 'UTC')::DATE, 2, 200 FROM consumer_groups");
  int total = 0;
  for (int i = 0; i < 5; ++i) total += Acquire(3).emails;
  EXPECT_EQ(total, 15);
  auto b = store_->Get("g");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->granted_micros, 200 + 15 * kPrice);
}

TEST_F(BudgetStoreTest, ConcurrentSendersTogetherNeverExceedTheBudget) {
  // 20 emails of money; the bucket (burst 1000) would allow far more, so only money limits.
  SetBudget(20, 0, 1000);
  std::atomic<int> total{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto store = NewPgBudgetStore(url_, {});
      for (int i = 0; i < 30; ++i) {
        auto g = store->Acquire({"g", absl::StrCat("s", t), 2, false, kPrice});
        ASSERT_TRUE(g.ok()) << g.status();
        total += g->emails;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(total.load(), 20);
  auto b = store_->Get("g");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->committed_micros, 20 * kPrice);
}

TEST_F(BudgetStoreTest, PaceBucketHoldsBurstAndGrantsAreOneSecondOfPace) {
  // Budget for 3.5 emails/s over the rest of the month: grants of at most 4 (one second of pace,
  // rounded up), the bucket holds 6 (burst), then the next email is at most 1/3.5 s away. The pace
  // is not a whole number on purpose: the month's remaining seconds shrink between reading them
  // and the grant, so a pace set to exactly 4 is 4.0000001 at the grant and rounds up to 5.
  pqxx::nontransaction tx(*conn_);
  const double seconds_left =
      tx.exec1("SELECT EXTRACT(EPOCH FROM (date_trunc('month', now() AT TIME ZONE 'UTC') + "
               "INTERVAL '1 month') AT TIME ZONE 'UTC' - now())")[0]
          .as<double>();
  SetBudget(static_cast<int64_t>(3.5 * seconds_left), 0, 6);
  Grant a = Acquire(100);
  EXPECT_EQ(a.emails, 4);
  EXPECT_NEAR(a.pace_per_second, 3.5, 0.01);
  Grant b = Acquire(100);
  EXPECT_EQ(b.emails, 2);
  Grant c = Acquire(100);
  EXPECT_EQ(c.emails, 0);
  EXPECT_FALSE(c.exhausted);
  EXPECT_GT(c.retry_after, absl::ZeroDuration());
  EXPECT_LE(c.retry_after, absl::Milliseconds(286));
}

TEST_F(BudgetStoreTest, TheReserveIsOnlyForRecoveries) {
  SetBudget(10, 20, 100);
  int standard = 0, recovery = 0;
  for (int i = 0; i < 20; ++i) {
    FillBucket();
    standard += Acquire(5).emails;
  }
  EXPECT_EQ(standard, 8);
  for (int i = 0; i < 20; ++i) {
    FillBucket();
    recovery += Acquire(5, /*recovery=*/true).emails;
  }
  EXPECT_EQ(recovery, 2);
}

// Password recoveries first across senders: while a recovery of a group paced by a budget is
// queued or leased to any subscriber that may still send it, no sender of the group gets a slot
// for an activation (only when to ask again), a recovery does. Activations are granted again once
// the recovery is acknowledged, its holder left, or it was handed out a grant lease ago (a holder
// that does not send it holds the group back no longer); an unlimited group is never held back.
TEST_F(BudgetStoreTest, ALeasedRecoveryHoldsBackActivationGrantsOfItsWholeGroup) {
  SetBudget(100000, 0, 100);
  Exec("INSERT INTO accounts (email, login, status) SELECT 'r' || i || '@example.test', 'r' || i,"
       " 'active' FROM generate_series(1, 5) i");
  // Leases account `login`'s new password recovery to subscriber `owner`; returns its job id.
  auto lease_recovery = [&](const std::string& login, const std::string& owner) {
    Exec(absl::StrCat("INSERT INTO tokens (account, action) SELECT id, 'password_recovery'"
                      " FROM accounts WHERE login = '",
                      login, "'"));
    return Int(
        absl::StrCat("SELECT max(job_id) FROM mailroom_dequeue('g', 10, '", owner, "', 60000)"));
  };
  FillBucket();
  ASSERT_GT(Acquire(1).emails, 0);  // nothing leased: activations are granted

  const int64_t r1 = lease_recovery("r1", "sub-a");
  ASSERT_GT(r1, 0);
  FillBucket();
  Grant held = Acquire(5, false, "s2");  // another sender's activations
  EXPECT_EQ(held.emails, 0);
  EXPECT_FALSE(held.exhausted);
  EXPECT_EQ(held.retry_after, absl::Seconds(1));  // one email at this pace is longer than 1 s
  EXPECT_GT(held.pace_per_second, 0);
  EXPECT_EQ(Acquire(5, false, "s1").emails, 0);  // the recovery holder's own activations too
  EXPECT_GT(Acquire(1, /*recovery=*/true, "s1").emails, 0);
  Exec(absl::StrCat("SELECT mailroom_ack('g', 'sub-a', ARRAY[", r1,
                    "]::BIGINT[], ARRAY[1],"
                    " ARRAY['sent'], ARRAY[''], ARRAY[0], ARRAY[100]::BIGINT[])"));
  FillBucket();
  EXPECT_GT(Acquire(1, false, "s2").emails, 0);

  ASSERT_GT(lease_recovery("r2", "sub-b"), 0);
  FillBucket();
  EXPECT_EQ(Acquire(1, false, "s2").emails, 0);
  Exec("SELECT mailroom_holder_left('g', 'sub-b')");  // its sender went away
  EXPECT_GT(Acquire(1, false, "s2").emails, 0);

  ASSERT_GT(lease_recovery("r3", "sub-c"), 0);
  FillBucket();
  EXPECT_EQ(Acquire(1, false, "s2").emails, 0);
  Exec("UPDATE lease_batches SET created_at = now() - INTERVAL '10 seconds' WHERE owner = 'sub-c'");
  EXPECT_GT(Acquire(1, false, "s2").emails, 0);  // held back for one grant lease at most

  // Committed and not handed out yet (on its way to a sender): held back too, for a grant
  // lease after its commit at most.
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts"
       " WHERE login = 'r5'");
  FillBucket();
  EXPECT_EQ(Acquire(1, false, "s2").emails, 0);
  Exec("UPDATE tokens SET created_at = created_at - 10 WHERE action = 'password_recovery'");
  EXPECT_GT(Acquire(1, false, "s2").emails, 0);

  ASSERT_GT(lease_recovery("r4", "sub-d"), 0);
  FillBucket();
  EXPECT_EQ(Acquire(1, false, "s2").emails, 0);
  BudgetSettings unlimited;
  unlimited.group = "g";
  unlimited.default_budget = true;
  ASSERT_TRUE(store_->Set(unlimited).ok());
  EXPECT_EQ(Acquire(7, false, "s2").emails, 7);
}

TEST_F(BudgetStoreTest, ReturnsCreditOnlyTheHoldersUnusedEmails) {
  SetBudget(5, 0, 100);
  FillBucket();
  Grant g = Acquire(1);
  ASSERT_EQ(g.emails, 1);
  FillBucket();
  Grant h = Acquire(1, false, "s2");
  ASSERT_EQ(h.emails, 1);
  EXPECT_EQ(*store_->Return("g", "s2", g.grant_id, 1), 0);  // not s2's grant
  EXPECT_EQ(*store_->Return("g", "s1", g.grant_id, 5), 1);  // at most what it holds
  EXPECT_EQ(*store_->Return("g", "s1", g.grant_id, 1), 0);  // once
  auto b = store_->Get("g");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->committed_micros, 1 * kPrice);
  EXPECT_EQ(b->returned_micros, 1 * kPrice);
  int total = 0;
  for (int i = 0; i < 10; ++i) {
    FillBucket();
    total += Acquire(5).emails;
  }
  EXPECT_EQ(total, 4);  // 5 - the one s2 still holds
}

TEST_F(BudgetStoreTest, AGrantWhoseHolderDiedStaysCharged) {
  SetBudget(5, 0, 100);
  FillBucket();
  Grant g = Acquire(3);
  ASSERT_EQ(g.emails, 1);  // one second of a tiny pace
  Exec("UPDATE budget_grants SET expires_at = now() - INTERVAL '1 second'");
  auto b = store_->Get("g");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->outstanding_micros, 0);
  EXPECT_EQ(b->committed_micros, 1 * kPrice);
}

TEST_F(BudgetStoreTest, AcknowledgedSpendBeyondGrantsCounts) {
  // Spend recorded by acknowledgements without grants (an older sender) is committed too.
  Exec("INSERT INTO group_usage (group_id, month, sent, cost_micros) SELECT id, "
       "date_trunc('month', now() AT TIME ZONE 'UTC')::DATE, 4, 400 FROM consumer_groups");
  SetBudget(5, 0, 100);
  int total = 0;
  for (int i = 0; i < 5; ++i) {
    FillBucket();
    total += Acquire(5).emails;
  }
  EXPECT_EQ(total, 1);
  auto b = store_->Get("g");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->spent_micros, 400);
  EXPECT_EQ(b->sent, 4u);
  EXPECT_EQ(b->granted_micros, 500);  // the earlier spend, once, and the one grant
  EXPECT_EQ(b->committed_micros, 500);
}

// The refund of dead holders' grants. Jobs go through the real Store, so the
// counting in store.cc (dequeue, acknowledgement, release) is what is checked.
class BudgetRefundTest : public BudgetStoreTest {
 protected:
  void SetUp() override {
    BudgetStoreTest::SetUp();
    if (HasFatalFailure()) return;
    jobs_ = NewPgStore(url_, 2);
  }

  // n accounts, hence n activation tokens queued for group g.
  void InsertAccounts(int n) {
    static int batch = 0;
    ++batch;
    Exec(absl::StrCat("INSERT INTO accounts (email, login) SELECT 'u", batch,
                      "-' || i || "
                      "'@example.test', 'u",
                      batch, "-' || i FROM generate_series(1, ", n, ") i"));
  }
  // Subscription `owner` spends `holder`'s grants from now on, as its Subscriber tells each
  // dequeue for it (collector/dispatch/hub.h).
  void LinkHolder(const std::string& owner, const std::string& holder) {
    links_[owner] = {holder, false};
  }
  std::vector<StoredJob> Dequeue(const std::string& owner, int limit) {
    EXPECT_TRUE(jobs_->CollectSignups(1000000).ok());  // as the collector does first
    DequeueRequest q{"g", limit, owner, absl::Seconds(60)};
    auto link = links_.find(owner);
    if (link != links_.end()) {
      q.holder = link->second.first;
      q.holder_registered = link->second.second;
    }
    auto jobs = jobs_->Dequeue(q);
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    if (jobs.ok() && link != links_.end()) link->second.second = true;
    return jobs.ok() ? *jobs : std::vector<StoredJob>{};
  }
  static JobResult Outcome(const StoredJob& j, JobResult::Kind kind) {
    JobResult r;
    r.id = j.id;
    r.attempt = j.attempt;
    r.kind = kind;
    r.reason = kind == JobResult::Kind::kFailed ? "rejected" : "";
    r.retry_after_ms = 0;
    r.cost_micros = kind == JobResult::Kind::kSent ? kPrice : 0;
    return r;
  }
  // Every lease runs out a second ago, without an outcome: the per-job rows' and
  // the leased batches'.
  void RunOutLeases() {
    Exec("UPDATE deliveries SET due_at = now() - INTERVAL '1 second' WHERE state = 'leased';"
         "UPDATE lease_batches SET due_at = now() - INTERVAL '1 second' WHERE state = 'leased'");
  }
  // Every grant expired `seconds` ago (the store's margin is its grant lease, 10 s).
  void ExpireGrants(int seconds) {
    Exec(absl::StrCat("UPDATE budget_grants SET expires_at = now() - make_interval(secs => ",
                      seconds, ")"));
  }
  std::vector<BudgetRefund> Refund() {
    auto r = store_->Refund();
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<BudgetRefund>{};
  }
  int64_t Returned() { return Int("SELECT coalesce(sum(returned_micros), 0) FROM budget_months"); }

  std::unique_ptr<Store> jobs_;
  std::map<std::string, std::pair<std::string, bool>> links_;  // owner -> holder, registered
};

TEST_F(BudgetRefundTest, RefundIsGrantedMinusReturnedMinusPossibleSpend) {
  Grant g = Acquire(10, false, "h1");
  ASSERT_EQ(g.emails, 10);
  ASSERT_EQ(*store_->Return("g", "h1", g.grant_id, 2), 2);  // a live return before the kill
  LinkHolder("sub-1", "h1");
  InsertAccounts(6);
  std::vector<StoredJob> jobs = Dequeue("sub-1", 6);
  ASSERT_EQ(jobs.size(), 6u);
  // 2 sent, 1 failed, 1 handed back for a retry, 1 released unsent: 3 settled unsent. The
  // sixth's lease runs out without an outcome: it may have been sent.
  auto recorded = jobs_->Ack(
      "g", "sub-1",
      {Outcome(jobs[0], JobResult::Kind::kSent), Outcome(jobs[1], JobResult::Kind::kSent),
       Outcome(jobs[2], JobResult::Kind::kFailed), Outcome(jobs[3], JobResult::Kind::kRetry)});
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  ASSERT_EQ(recorded->size(), 4u);
  ASSERT_TRUE(jobs_->Release("g", "sub-1", {jobs[4].id}).ok());
  // A stale outcome (wrong attempt) is not recorded and settles nothing.
  JobResult stale = Outcome(jobs[5], JobResult::Kind::kRetry);
  stale.attempt += 1;
  ASSERT_TRUE(jobs_->Ack("g", "sub-1", {stale})->empty());
  RunOutLeases();
  EXPECT_EQ(Int("SELECT handed FROM budget_subscriptions WHERE owner = 'sub-1'"), 6);
  EXPECT_EQ(Int("SELECT settled_unsent FROM budget_subscriptions WHERE owner = 'sub-1'"), 3);

  ExpireGrants(11);
  std::vector<BudgetRefund> r = Refund();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].group, "g");
  EXPECT_EQ(r[0].holder, "h1");
  EXPECT_EQ(r[0].emails, 10 - 2 - (6 - 3));  // 5
  EXPECT_EQ(Returned(), 7 * kPrice);
  auto b = store_->Get("g");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->committed_micros, 3 * kPrice);  // what may have been spent, no less

  // Idempotent, and a late return of the refunded grant credits nothing.
  EXPECT_TRUE(Refund().empty());
  EXPECT_EQ(*store_->Return("g", "h1", g.grant_id, 5), 0);
  EXPECT_EQ(Returned(), 7 * kPrice);

  // An outcome recorded after the refund (the lease that ran out: not sent after all) makes
  // exactly that one more email safe to give back.
  ASSERT_EQ(jobs_->Ack("g", "sub-1", {Outcome(jobs[5], JobResult::Kind::kExpired)})->size(), 1u);
  r = Refund();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].emails, 1);
  EXPECT_EQ(Returned(), 8 * kPrice);
}

TEST_F(BudgetRefundTest, NothingWhileAGrantIsLiveOrALeaseIsHeld) {
  Grant g = Acquire(10, false, "h1");
  ASSERT_EQ(g.emails, 10);
  LinkHolder("sub-1", "h1");
  InsertAccounts(3);
  ASSERT_EQ(Dequeue("sub-1", 3).size(), 3u);

  EXPECT_TRUE(Refund().empty());  // the grant is live
  ExpireGrants(5);
  EXPECT_TRUE(Refund().empty());  // expired, but less than the margin (a grant lease) ago
  ExpireGrants(11);
  EXPECT_TRUE(Refund().empty());  // its subscription still holds three leases
  // A second grant of the holder that is still live holds everything back too.
  RunOutLeases();
  Grant later = Acquire(4, false, "h1");
  ASSERT_EQ(later.emails, 4);
  EXPECT_TRUE(Refund().empty());

  // Leases that ran out without an outcome stay counted as spent.
  ExpireGrants(11);
  std::vector<BudgetRefund> r = Refund();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].emails, 10 + 4 - 3);
  EXPECT_EQ(Returned(), 11 * kPrice);
  EXPECT_TRUE(Refund().empty());
}

TEST_F(BudgetRefundTest, ALinkedHolderWithoutJobsGetsAllBackAnUnlinkedOneNothing) {
  ASSERT_EQ(Acquire(10, false, "linked").emails, 10);
  ASSERT_EQ(Acquire(7, false, "unlinked").emails, 7);
  // The link is written by the subscription's first dequeue, even one that finds no job.
  LinkHolder("sub-1", "linked");
  EXPECT_TRUE(Dequeue("sub-1", 10).empty());
  // Jobs handed to a subscription without a holder count for nobody.
  InsertAccounts(4);
  ASSERT_EQ(Dequeue("sub-2", 10).size(), 4u);
  EXPECT_EQ(Int("SELECT count(*) FROM budget_subscriptions"), 1);
  EXPECT_EQ(Int("SELECT handed FROM budget_subscriptions"), 0);

  ExpireGrants(11);
  std::vector<BudgetRefund> r = Refund();
  // A holder never linked may be spending through subscriptions nobody can attribute to it.
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].holder, "linked");
  EXPECT_EQ(r[0].emails, 10);
  EXPECT_EQ(Returned(), 10 * kPrice);
}

TEST_F(BudgetRefundTest, AfterHolderLeftOutcomesStillSettleButNewDequeuesAreNotCounted) {
  ASSERT_EQ(Acquire(5, false, "h1").emails, 5);
  LinkHolder("sub-1", "h1");
  InsertAccounts(2);
  std::vector<StoredJob> jobs = Dequeue("sub-1", 2);
  ASSERT_EQ(jobs.size(), 2u);
  ASSERT_TRUE(jobs_->HolderLeft("g", "sub-1").ok());
  // The sender behind it acknowledges after its stream ended (on this or another collector).
  ASSERT_EQ(jobs_->Ack("g", "sub-1", {Outcome(jobs[0], JobResult::Kind::kDefer)})->size(), 1u);
  EXPECT_EQ(Int("SELECT settled_unsent FROM budget_subscriptions WHERE owner = 'sub-1'"), 1);
  RunOutLeases();
  ExpireGrants(11);
  std::vector<BudgetRefund> r = Refund();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].emails, 5 - (2 - 1));
}

TEST_F(BudgetStoreTest, SettingsAreKeptUnlessGivenAndCanGoBackToTheDefault) {
  SetBudget(10, 25, 7);
  BudgetSettings s;
  s.group = "g";
  s.burst = 9;
  auto b = store_->Set(s);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b->monthly_budget_micros, 10 * kPrice);
  EXPECT_FALSE(b->budget_is_default);
  EXPECT_EQ(b->recovery_reserve_percent, 25);
  EXPECT_EQ(b->burst, 9);
  s = {};
  s.group = "g";
  s.default_budget = true;
  s.default_reserve = true;
  b = store_->Set(s);
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->monthly_budget_micros.has_value());
  EXPECT_TRUE(b->budget_is_default);
  EXPECT_EQ(b->recovery_reserve_percent, 10);
}

TEST_F(BudgetStoreTest, TheReadmesSqlSetsTheBudget) {
  std::ifstream in(testing::Runfile("mailroom/docs/configuration.md"));
  std::stringstream readme;
  readme << in.rdbuf();
  const std::string text = readme.str();
  const size_t begin = text.find("<!-- budget-sql: begin -->\n```sql\n");
  const size_t end = text.find("```\n<!-- budget-sql: end -->");
  ASSERT_NE(begin, std::string::npos);
  ASSERT_NE(end, std::string::npos);
  const size_t from = text.find("INSERT", begin);
  std::string sql = text.substr(from, end - from);
  Exec("SELECT mailroom_ensure_group('mailroom', false)");
  Exec(sql);
  Exec(sql);  // again: an update
  auto b = store_->Get("mailroom");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->monthly_budget_micros, 100000000);
  EXPECT_FALSE(b->budget_is_default);
  EXPECT_EQ(b->recovery_reserve_percent, 10);
  EXPECT_FALSE(b->reserve_is_default);
  EXPECT_EQ(b->burst, 20);
}

TEST_F(BudgetStoreTest, BadSettingsAndUnknownGroups) {
  BudgetSettings s;
  s.group = "g";
  s.burst = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(store_->Set(s).status())) << store_->Set(s).status();
  s.burst.reset();
  s.recovery_reserve_percent = 101;
  EXPECT_TRUE(absl::IsInvalidArgument(store_->Set(s).status()));
  s = {};
  s.group = "nope";
  EXPECT_TRUE(absl::IsNotFound(store_->Set(s).status()));
  EXPECT_TRUE(absl::IsNotFound(store_->Get("nope").status()));
  EXPECT_TRUE(absl::IsNotFound(store_->Acquire({"nope", "s", 1, false, kPrice}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(store_->Acquire({"g", "s", 0, false, kPrice}).status()));
}

// A transaction held open on group `audit`'s budget row (an operator's budget update in a
// psql session) with `audit` senders' grants stuck behind it: group `mailroom`'s grant still
// answers at once, and each stuck `audit` call fails with kUnavailable (retryable) after about
// the lock timeout (1 s) instead of waiting for the lock or the statement timeout.
TEST_F(BudgetStoreTest, OneGroupsLockedBudgetRowNeverDelaysAnotherGroup) {
  Exec("SELECT mailroom_ensure_group('audit', false)");
  Exec("SELECT mailroom_ensure_group('mailroom', false)");
  for (const char* group : {"audit", "mailroom"}) {
    ASSERT_TRUE(store_->Acquire({group, "warm", 1, false, kPrice}).ok());
  }
  // The operator's session: the budget row of `audit` stays locked for up to 15 s.
  pqxx::connection op(url_);
  auto held = std::make_unique<pqxx::work>(op);
  held->exec("UPDATE group_budgets SET monthly_budget_micros = 100000000"
             " WHERE group_id = (SELECT id FROM consumer_groups WHERE name = 'audit')");
  absl::Notification done;
  std::thread release([&] {
    done.WaitForNotificationWithTimeout(absl::Seconds(15));
    held->abort();
  });

  // More stuck `audit` calls than the store has connections.
  constexpr int kStuck = 6;
  std::vector<absl::Status> stuck(kStuck);
  std::vector<absl::Duration> stuck_for(kStuck);
  std::vector<std::thread> audit;
  for (int i = 0; i < kStuck; ++i) {
    audit.emplace_back([&, i] {
      const absl::Time start = absl::Now();
      stuck[i] = store_->Acquire({"audit", absl::StrCat("a", i), 1, false, kPrice}).status();
      stuck_for[i] = absl::Now() - start;
    });
  }
  // Until an `audit` grant waits for the row lock.
  pqxx::connection watch(url_);
  for (const absl::Time give_up = absl::Now() + absl::Seconds(10);;) {
    ASSERT_LT(absl::Now(), give_up) << "no audit grant is waiting for the lock";
    pqxx::nontransaction tx(watch);
    if (tx.exec1("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                 "   AND query LIKE '%mailroom_budget_grant%'")[0]
            .as<int>() > 0) {
      break;
    }
  }
  const absl::Time start = absl::Now();
  auto granted = store_->Acquire({"mailroom", "m", 1, false, kPrice});
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(granted.ok()) << granted.status();
  EXPECT_EQ(granted->emails, 1);
  EXPECT_LT(took, absl::Milliseconds(500));
  std::cout << "mailroom AcquireBudget while audit's budget row was locked: " << took << "\n";

  for (auto& t : audit) t.join();
  done.Notify();
  release.join();
  for (int i = 0; i < kStuck; ++i) {
    EXPECT_TRUE(absl::IsUnavailable(stuck[i])) << stuck[i];
    // Its own lock timeout, or the wait for its group's turn behind one such call.
    EXPECT_LT(stuck_for[i], absl::Milliseconds(2500)) << i;
  }
  std::cout << "stuck audit calls failed after "
            << *std::max_element(stuck_for.begin(), stuck_for.end()) << " at most\n";
  // The lock gone, `audit` is granted again.
  EXPECT_EQ(Acquire(1, false, "after").emails, 1);
  auto after = store_->Acquire({"audit", "after", 1, false, kPrice});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->emails, 1);
}

// The refund reads the grants of holders whose grants all expired, not those
// of a sender still at work (one that has run for weeks holds thousands of grants).
TEST_F(BudgetRefundTest, TheRefundDoesNotReadTheGrantsOfALiveHolder) {
  Exec("INSERT INTO budget_grants (group_id, month, holder, recovery, price_micros, emails, "
       "expires_at) SELECT g.id, date_trunc('month', now())::DATE, 'live', false, 100, 1, "
       "now() - make_interval(hours => i) FROM consumer_groups g, generate_series(0, 1999) i "
       "WHERE g.name = 'g'");
  Exec("UPDATE budget_grants SET expires_at = now() + INTERVAL '1 minute' "
       "WHERE id = (SELECT max(id) FROM budget_grants)");
  LinkHolder("sub-live", "live");
  EXPECT_TRUE(Dequeue("sub-live", 1).empty());
  ASSERT_EQ(Acquire(10, false, "dead").emails, 10);
  LinkHolder("sub-dead", "dead");
  EXPECT_TRUE(Dequeue("sub-dead", 1).empty());
  Exec("UPDATE budget_grants SET expires_at = now() - INTERVAL '1 minute' WHERE holder = 'dead'");

  // A fresh session: the view also shows this backend's counts not yet reported.
  pqxx::connection session(url_);
  pqxx::work tx(session);
  pqxx::result r = tx.exec("SELECT holder, emails FROM mailroom_budget_refund(10000)");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0][0].as<std::string>(), "dead");
  EXPECT_EQ(r[0][1].as<int64_t>(), 10);
  // This transaction's reads of budget_grants: no sequential scan, and a handful of rows
  // (the dead holder's grant, read and locked a few times), not the live holder's 2,000.
  pqxx::row reads = tx.exec1(
      "SELECT seq_scan, seq_tup_read, idx_tup_fetch FROM pg_stat_xact_user_tables "
      "WHERE relname = 'budget_grants'");
  EXPECT_EQ(reads[0].as<int64_t>(), 0);
  EXPECT_EQ(reads[1].as<int64_t>(), 0);
  EXPECT_LE(reads[2].as<int64_t>(), 10);
  tx.abort();
}

// A grant no longer deletes grants that expired an hour ago, so a sender that
// lived longer than an hour gets its unused emails back too (the retention pass prunes).
TEST_F(BudgetRefundTest, ASenderThatLivedForHoursGetsItsUnusedEmailsBack) {
  ASSERT_EQ(Acquire(10, false, "h1").emails, 10);
  LinkHolder("sub-1", "h1");
  InsertAccounts(3);
  ASSERT_EQ(Dequeue("sub-1", 3).size(), 3u);
  RunOutLeases();
  ExpireGrants(2 * 3600);
  ASSERT_EQ(Acquire(5, false, "h1").emails, 5);  // an hour later, still at work
  EXPECT_EQ(Int("SELECT count(*) FROM budget_grants"), 2);
  ExpireGrants(11);
  std::vector<BudgetRefund> r = Refund();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].emails, 10 + 5 - 3);
}

}  // namespace
}  // namespace mailroom
