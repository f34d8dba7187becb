// The BudgetStore and migration 0011's SQL (mailroom_budget_grant / _return / _state) against
// a throwaway PostgreSQL; one fresh database per test.
#include "collector/budget_store.h"

#include <pqxx/pqxx>

#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collector/migrate.h"
#include "gtest/gtest.h"
#include "collector/testing/migrated_database.h"

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
  // Budget for 4 emails/s over the rest of the month: grants of at most 4 (one second of pace),
  // the bucket holds 6 (burst), then the next email is a quarter second away.
  auto b0 = store_->Get("g");
  ASSERT_TRUE(b0.ok());
  pqxx::nontransaction tx(*conn_);
  const double seconds_left = tx.exec1(
      "SELECT EXTRACT(EPOCH FROM (date_trunc('month', now() AT TIME ZONE 'UTC') + "
      "INTERVAL '1 month') AT TIME ZONE 'UTC' - now())")[0].as<double>();
  SetBudget(static_cast<int64_t>(4 * seconds_left), 0, 6);
  Grant a = Acquire(100);
  EXPECT_EQ(a.emails, 4);
  EXPECT_NEAR(a.pace_per_second, 4.0, 0.01);
  Grant b = Acquire(100);
  EXPECT_EQ(b.emails, 2);
  Grant c = Acquire(100);
  EXPECT_EQ(c.emails, 0);
  EXPECT_FALSE(c.exhausted);
  EXPECT_GT(c.retry_after, absl::ZeroDuration());
  EXPECT_LE(c.retry_after, absl::Milliseconds(251));
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
  std::ifstream in(testing::Runfile("mailroom/README.md"));
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

}  // namespace
}  // namespace mailroom
