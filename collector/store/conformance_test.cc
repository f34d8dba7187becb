// One conformance suite for every implementation of the collector's stores: the PostgreSQL
// Store and OperatorStore (NewPgStore, NewPgOperatorStore, on a freshly migrated throwaway
// database per test) and the in-memory testing::FakeStore. Each test runs against each
// implementation through a small factory ("make a fresh store pair; make a group"), so the fake
// that the service's, dispatcher's and console's unit tests use answers as the real store does.
// Covered: the groups (a migrated database's `mailroom`, EnsureGroup's, their order), the
// suppression list (upsert, paging, filters, order, removal), Requeue of ids that are not
// failed jobs, Failures and Usage of a fresh group, SetPaused's returned row and its unknown
// group, the audit (ids, outcomes written once, newest first, paging and the limit's bounds).
// Not covered here: what the fake does not model (the queue: dequeue, ack, renew, release and
// leases; statistics; emails, ledgers, hours, trouble), which store_test and
// operator_store_test cover against PostgreSQL.
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collector/store/operator_store.h"
#include "collector/store/store.h"
#include "collector/store/testing/fake_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/migrated_database.h"

namespace mailroom {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// A Store and an OperatorStore over the same data.
struct StorePair {
  std::shared_ptr<Store> store;
  std::shared_ptr<OperatorStore> ops;
};

// Makes the stores under test.
class StoreFactory {
 public:
  virtual ~StoreFactory() = default;
  // A fresh, empty pair; `url` is a freshly migrated database.
  virtual StorePair Make(const std::string& url) = 0;
};

class PgFactory : public StoreFactory {
 public:
  StorePair Make(const std::string& url) override {
    return {std::shared_ptr<Store>(NewPgStore(url, 2)),
            std::shared_ptr<OperatorStore>(NewPgOperatorStore(url))};
  }
};

class FakeFactory : public StoreFactory {
 public:
  StorePair Make(const std::string& /*url*/) override {
    auto fake = std::make_shared<testing::FakeStore>();
    return {fake, fake};
  }
};

struct Impl {
  std::string name;
  StoreFactory* (*make)();
};
void PrintTo(const Impl& impl, std::ostream* os) { *os << impl.name; }

class ConformanceTest : public testing::MigratedDatabaseTest,
                        public ::testing::WithParamInterface<Impl> {
 protected:
  void SetUp() override {
    MigratedDatabaseTest::SetUp();
    if (HasFatalFailure()) return;
    factory_.reset(GetParam().make());
    stores_ = factory_->Make(url_);
  }
  // Creates `group` in the stores under test.
  std::string Group(const std::string& group) {
    EXPECT_TRUE(stores_.store->EnsureGroup(group, false).ok());
    return group;
  }
  SuppressionRow Add(const std::string& address, const std::string& reason) {
    auto row = stores_.ops->AddSuppression({address, reason, "conformance", 0, 0, 0});
    EXPECT_TRUE(row.ok()) << row.status();
    return row.ok() ? *row : SuppressionRow{};
  }
  std::vector<std::string> List(const SuppressionQuery& q) {
    auto rows = stores_.ops->ListSuppressions(q);
    EXPECT_TRUE(rows.ok()) << rows.status();
    std::vector<std::string> out;
    if (rows.ok()) {
      for (const SuppressionRow& r : *rows) out.push_back(r.address);
    }
    return out;
  }

  std::unique_ptr<StoreFactory> factory_;
  StorePair stores_;
};

TEST_P(ConformanceTest, AddSuppressionUpsertsAndReturnsTheRow) {
  const SuppressionRow first = Add("a@example.test", "manual");
  EXPECT_EQ(first.address, "a@example.test");
  EXPECT_EQ(first.reason, "manual");
  EXPECT_EQ(first.source, "conformance");
  EXPECT_EQ(first.expires_at, 0);
  EXPECT_GT(first.first_seen, 0);
  EXPECT_GE(first.last_seen, first.first_seen);
  auto again = stores_.ops->AddSuppression({"a@example.test", "complaint", "feedback", 0, 0, 0});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->reason, "complaint");
  EXPECT_EQ(again->source, "feedback");
  EXPECT_EQ(again->first_seen, first.first_seen);
  EXPECT_GE(again->last_seen, first.last_seen);
  EXPECT_THAT(List({}), ElementsAre("a@example.test"));
}

TEST_P(ConformanceTest, ListSuppressionsPagesFiltersAndOrders) {
  Add("c@example.test", "manual");
  Add("a@example.test", "complaint");
  Add("b@other.test", "manual");
  Add("ab@example.test", "manual");
  EXPECT_THAT(List({}),
              ElementsAre("a@example.test", "ab@example.test", "b@other.test", "c@example.test"));
  SuppressionQuery page;
  page.limit = 2;
  EXPECT_THAT(List(page), ElementsAre("a@example.test", "ab@example.test"));
  page.after = "ab@example.test";
  EXPECT_THAT(List(page), ElementsAre("b@other.test", "c@example.test"));
  page.after = "c@example.test";
  EXPECT_THAT(List(page), IsEmpty());
  SuppressionQuery by_reason;
  by_reason.reason = "manual";
  EXPECT_THAT(List(by_reason), ElementsAre("ab@example.test", "b@other.test", "c@example.test"));
  SuppressionQuery by_prefix;
  by_prefix.prefix = "a";
  EXPECT_THAT(List(by_prefix), ElementsAre("a@example.test", "ab@example.test"));
  by_prefix.reason = "complaint";
  EXPECT_THAT(List(by_prefix), ElementsAre("a@example.test"));
}

TEST_P(ConformanceTest, RemoveSuppressionReturnsTheRowOrNotFound) {
  Add("a@example.test", "manual");
  auto removed = stores_.ops->RemoveSuppression("a@example.test");
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(removed->address, "a@example.test");
  EXPECT_EQ(removed->reason, "manual");
  EXPECT_THAT(List({}), IsEmpty());
  EXPECT_EQ(stores_.ops->RemoveSuppression("a@example.test").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(ConformanceTest, RequeueOfJobsThatAreNotFailedRequeuesNone) {
  const std::string g = Group("conformance");
  auto n = stores_.ops->Requeue(g, {12345, 67890});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0);
  auto all = stores_.ops->Requeue(g, {});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, 0);
}

TEST_P(ConformanceTest, AFreshGroupHasNoFailures) {
  auto failures = stores_.ops->Failures(Group("conformance"), 10);
  ASSERT_TRUE(failures.ok()) << failures.status();
  EXPECT_THAT(*failures, IsEmpty());
}

TEST_P(ConformanceTest, AFreshGroupHasNoUsage) {
  auto usage = stores_.store->Usage(Group("conformance"));
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->sent, 0u);
  EXPECT_EQ(usage->cost_micros, 0);
  EXPECT_EQ(usage->month.size(), 7u);  // YYYY-MM
}

TEST_P(ConformanceTest, SetPausedReturnsThePauseAsItNowIs) {
  const std::string g = Group("conformance");
  auto paused = stores_.ops->SetPaused(g, true, "maintenance");
  ASSERT_TRUE(paused.ok()) << paused.status();
  EXPECT_TRUE(paused->paused);
  EXPECT_GT(paused->paused_at, 0);
  EXPECT_EQ(paused->reason, "maintenance");
  auto resumed = stores_.ops->SetPaused(g, false, "");
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_FALSE(resumed->paused);
  EXPECT_EQ(resumed->paused_at, 0);
  EXPECT_EQ(resumed->reason, "");
}

TEST_P(ConformanceTest, SetPausedOfAnUnknownGroupIsNotFound) {
  auto paused = stores_.ops->SetPaused("no-such-group", true, "x");
  EXPECT_EQ(paused.status().code(), absl::StatusCode::kNotFound) << paused.status();
}

TEST_P(ConformanceTest, PausingAgainKeepsTheFirstTimeAndTakesTheNewReason) {
  const std::string g = Group("conformance");
  auto first = stores_.ops->SetPaused(g, true, "first");
  ASSERT_TRUE(first.ok()) << first.status();
  std::string reason;
  for (int i = 0; i < 1200; ++i) reason += "\xc3\xa9";  // é, two bytes each
  auto again = stores_.ops->SetPaused(g, true, reason);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->paused_at, first->paused_at);
  EXPECT_EQ(again->reason, reason.substr(0, 2000));  // cut to 1000 characters
}

TEST_P(ConformanceTest, GroupsAreTheMigratedOneAndThoseEnsuredInNameOrder) {
  Group("zeta");
  Group("alpha");
  Group("alpha");  // ensuring twice makes one
  auto names = stores_.store->GroupNames();
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names, ElementsAre("alpha", "mailroom", "zeta"));
  auto groups = stores_.ops->Groups();
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_EQ(*groups, *names);
}

TEST_P(ConformanceTest, UsageIsOfTheCurrentUtcMonth) {
  const std::string before = absl::FormatTime("%Y-%m", absl::Now(), absl::UTCTimeZone());
  auto usage = stores_.store->Usage(Group("conformance"));
  const std::string after = absl::FormatTime("%Y-%m", absl::Now(), absl::UTCTimeZone());
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_TRUE(usage->month == before || usage->month == after) << usage->month;
}

TEST_P(ConformanceTest, TheAuditListsNewestFirstPagesAndWritesAnOutcomeOnce) {
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    auto id = stores_.ops->BeginAudit(
        {"token 1", "Requeue", "mailroom",
         absl::StrCat("job ", i, std::string(i == 2 ? 1200 : 0, 'j'))});
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  EXPECT_LT(ids[0], ids[1]);
  EXPECT_LT(ids[1], ids[2]);
  ASSERT_TRUE(stores_.ops->EndAudit(ids[0], "ok").ok());
  ASSERT_TRUE(stores_.ops->EndAudit(ids[0], "NOT_FOUND").ok());  // written once
  ASSERT_TRUE(stores_.ops->EndAudit(ids[1], std::string(1200, 'o')).ok());

  auto all = stores_.ops->ListAudit(0, 10);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].id, ids[2]);
  EXPECT_EQ((*all)[0].outcome, "started");
  EXPECT_EQ((*all)[0].record.credential, "token 1");
  EXPECT_EQ((*all)[0].record.method, "Requeue");
  EXPECT_EQ((*all)[0].record.group, "mailroom");
  EXPECT_EQ((*all)[0].record.target, absl::StrCat("job 2", std::string(995, 'j')));  // 1000
  EXPECT_GT((*all)[0].at_ms, 0);
  EXPECT_EQ((*all)[1].outcome, std::string(1000, 'o'));
  EXPECT_EQ((*all)[2].id, ids[0]);
  EXPECT_EQ((*all)[2].outcome, "ok");

  auto page = stores_.ops->ListAudit(ids[2], 1);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->size(), 1u);
  EXPECT_EQ((*page)[0].id, ids[1]);
  auto at_least_one = stores_.ops->ListAudit(0, 0);  // a limit under 1 reads one
  ASSERT_TRUE(at_least_one.ok()) << at_least_one.status();
  EXPECT_EQ(at_least_one->size(), 1u);
}

StoreFactory* MakePg() { return new PgFactory; }
StoreFactory* MakeFake() { return new FakeFactory; }

INSTANTIATE_TEST_SUITE_P(Stores, ConformanceTest,
                         ::testing::Values(Impl{"Pg", &MakePg}, Impl{"Fake", &MakeFake}),
                         [](const ::testing::TestParamInfo<Impl>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace mailroom
