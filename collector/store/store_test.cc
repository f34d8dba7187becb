// The Store (PgStore) and the SQL functions it calls (mailroom_dequeue, mailroom_ack,
// mailroom_renew, mailroom_holder_left, mailroom_stats), against a throwaway PostgreSQL with
// the embedded migrations applied; one fresh database per test.
#include "collector/store/store.h"

#include <algorithm>
#include <map>
#include <pqxx/pqxx>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "collector/db/conninfo.h"
#include "collector/schema/migrate.h"
#include "collector/store/operator_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/migrated_database.h"
#include "testing/pgbouncer.h"

namespace mailroom {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;
using ::testing::UnorderedElementsAreArray;

class StoreTest : public testing::MigratedDatabaseTest {
 protected:
  void SetUp() override {
    MigratedDatabaseTest::SetUp();
    if (HasFatalFailure()) return;
    store_ = NewPgStore(url_, 2);
    operators_ = NewPgOperatorStore(url_, 1);
  }

  void InsertAccounts(int n, const std::string& prefix) {
    Exec(absl::StrCat("INSERT INTO accounts (email, login) SELECT '", prefix,
                      "' || i || '@example.test', '", prefix, "' || i FROM generate_series(1, ", n,
                      ") i"));
  }
  std::vector<StoredJob> Dequeue(const std::string& owner, int limit = 100,
                                 absl::Duration lease = absl::Seconds(60)) {
    // As the collector does before its dequeues.
    EXPECT_TRUE(store_->CollectSignups(1000000).ok());
    auto jobs = store_->Dequeue("mailroom", limit, owner, lease);
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    return jobs.ok() ? *jobs : std::vector<StoredJob>{};
  }
  static JobResult Sent(const StoredJob& j, uint32_t attempt = 0) {
    JobResult r;
    r.id = j.id;
    r.attempt = attempt ? attempt : j.attempt;
    r.kind = JobResult::Kind::kSent;
    r.cost_micros = 100;
    return r;
  }
  // Makes every lease run out `ago` ago (an SQL interval): the per-job rows' and
  // the leased batches' (all the jobs of a batch share its lease end).
  void RunOut(const std::string& ago) {
    Exec(absl::StrCat("UPDATE deliveries SET due_at = now() - interval '", ago,
                      "';"
                      "UPDATE lease_batches SET due_at = now() - interval '",
                      ago, "' WHERE state = 'leased'"));
  }
  // The job's state in the per-job picture (delivery_states: its row or its batch's bit).
  std::string State(uint64_t id) {
    return Text(absl::StrCat("SELECT state::TEXT FROM delivery_states WHERE token_id = ", id));
  }
  // The recorded ids of an Ack by `owner`, sorted ({} and a test failure if it failed).
  std::vector<uint64_t> Ack(const std::string& owner, const std::vector<JobResult>& results) {
    auto r = store_->Ack("mailroom", owner, results);
    EXPECT_TRUE(r.ok()) << r.status();
    std::vector<uint64_t> ids = r.ok() ? *r : std::vector<uint64_t>{};
    std::sort(ids.begin(), ids.end());
    return ids;
  }
  // The statistics row of group mailroom.
  GroupStatsRow Stats() {
    auto rows = store_->Stats("mailroom");
    EXPECT_TRUE(rows.ok()) << rows.status();
    EXPECT_EQ(rows.ok() ? rows->size() : 0u, 1u);
    return rows.ok() && rows->size() == 1 ? (*rows)[0] : GroupStatsRow{};
  }
  // `sql`'s one value of the only lease_batches row, as text.
  std::string Batch(const std::string& sql) {
    EXPECT_EQ(Int("SELECT count(*) FROM lease_batches"), 1);
    return Text(absl::StrCat("SELECT ", sql, " FROM lease_batches"));
  }
  // Lets the leases run out and dequeues for `owner`: the only batch's `n` jobs without an
  // outcome come back as their second attempt, each in a deliveries row leased to `owner`
  // with `lost_leases`, and the batch is over.
  void ExpectBatchHandedOutAgain(const std::string& owner, int64_t n, int lost_leases) {
    RunOut("1 second");
    std::vector<StoredJob> again = Dequeue(owner);
    ASSERT_EQ(static_cast<int64_t>(again.size()), n);
    for (const StoredJob& k : again) EXPECT_EQ(k.attempt, 2u) << k.id;
    EXPECT_EQ(Batch("state"), "expired");
    EXPECT_EQ(Int(absl::StrCat("SELECT count(*) FROM deliveries WHERE state = 'leased'"
                               " AND owner = '",
                               owner, "' AND attempts = 2 AND lost_leases = ", lost_leases,
                               " AND NOT holder_left")),
              n);
  }
  static std::vector<uint64_t> Ids(const std::vector<StoredJob>& jobs) {
    std::vector<uint64_t> ids;
    for (const StoredJob& j : jobs) ids.push_back(j.id);
    return ids;
  }

  std::unique_ptr<Store> store_;
  std::unique_ptr<OperatorStore> operators_;  // failures, requeue, the suppression list
};

TEST_F(StoreTest, ChannelAndPing) {
  auto channel = store_->Channel();
  ASSERT_TRUE(channel.ok()) << channel.status();
  EXPECT_EQ(*channel, Text("SELECT channel FROM mailroom_settings"));
  EXPECT_TRUE(store_->Ping().ok());
}

TEST_F(StoreTest, DequeueLeasesEveryFieldOnceAndRecordsTheLease) {
  Exec("INSERT INTO accounts (email, login) VALUES ('alice@example.test', 'alice')");
  std::vector<StoredJob> jobs = Dequeue("sub-a");
  ASSERT_EQ(jobs.size(), 1u);
  const StoredJob& j = jobs[0];
  EXPECT_EQ(j.id, static_cast<uint64_t>(Int("SELECT id FROM tokens")));
  EXPECT_EQ(j.action, "activation");
  EXPECT_FALSE(j.critical);
  EXPECT_EQ(j.email, "alice@example.test");
  EXPECT_EQ(j.login, "alice");
  EXPECT_EQ(j.secret.size(), 32u);
  EXPECT_EQ(j.code.size(), 5u);
  EXPECT_EQ(j.expires_at, Int("SELECT expires_at FROM tokens"));
  EXPECT_EQ(j.account_id, static_cast<uint64_t>(Int("SELECT id FROM accounts")));
  EXPECT_EQ(j.attempt, 1u);
  EXPECT_EQ(j.failures, 0u);
  EXPECT_EQ(j.created_at, Int("SELECT created_at FROM tokens"));
  EXPECT_EQ(j.locale, "");
  // The lease: its holder, its attempt, due when the lease runs out.
  EXPECT_EQ(Text("SELECT state || ' ' || owner || ' ' || attempts FROM delivery_states"),
            "leased sub-a 1");
  EXPECT_NEAR(Int("SELECT EXTRACT(EPOCH FROM due_at - now())::BIGINT FROM delivery_states"), 60, 2);
  // Leased: nobody else gets it.
  EXPECT_THAT(Dequeue("sub-b"), IsEmpty());
}

TEST_F(StoreTest, DequeueHonoursTheLimitAndTheCursor) {
  InsertAccounts(7, "lim");
  EXPECT_EQ(Dequeue("a", 3).size(), 3u);
  EXPECT_EQ(Dequeue("a", 3).size(), 3u);
  EXPECT_EQ(Dequeue("a", 3).size(), 1u);
  EXPECT_THAT(Dequeue("a", 3), IsEmpty());
  EXPECT_EQ(Int("SELECT count(DISTINCT token_id) FROM delivery_states"), 7);
}

TEST_F(StoreTest, TheLocaleTravelsWithTheJob) {
  Exec("INSERT INTO accounts (email, login, locale) VALUES ('a@example.test', 'a', 'pt-BR'),"
       " ('b@example.test', 'b', NULL), ('c@example.test', 'c', 'zh-Hant-TW')");
  std::map<std::string, std::string> locales;
  for (const StoredJob& j : Dequeue("sub")) locales[j.login] = j.locale;
  EXPECT_EQ(locales,
            (std::map<std::string, std::string>{{"a", "pt-BR"}, {"b", ""}, {"c", "zh-Hant-TW"}}));
  // Jobs due again (the second path of mailroom_dequeue) carry it too.
  RunOut("1 second");
  std::vector<StoredJob> again = Dequeue("other");
  ASSERT_EQ(again.size(), 3u);
  for (const StoredJob& j : again) {
    EXPECT_EQ(j.attempt, 2u);
    EXPECT_EQ(j.locale, locales[j.login]) << j.login;
  }
}

TEST_F(StoreTest, TheLocaleMustLookLikeABcp47Tag) {
  for (const std::string ok : {"en", "de-AT", "pt-BR", "zh-Hant-TW", "gsw", "es-419"}) {
    EXPECT_NO_THROW(Exec(absl::StrCat("INSERT INTO accounts (email, login, locale) VALUES ('", ok,
                                      "@example.test', '", ok, "', '", ok, "')")))
        << ok;
  }
  for (const std::string bad : {"", "e", "english", "en_US", "en-", "de AT", "x-", "en-abcdefghi",
                                "en-aaaaaaaa-bbbbbbbb-cccccccc-dddddddd"}) {
    EXPECT_THROW(Exec(absl::StrCat("INSERT INTO accounts (email, login, locale) VALUES ("
                                   "'bad@example.test', 'bad', '",
                                   bad, "')")),
                 pqxx::check_violation)
        << bad;
  }
}

TEST_F(StoreTest, AckIsFencedByOwnerAndAttempt) {
  InsertAccounts(3, "fence");
  std::vector<StoredJob> jobs = Dequeue("holder");
  ASSERT_EQ(jobs.size(), 3u);
  // Another subscriber naming the holder's leases changes nothing.
  auto r = store_->Ack("mailroom", "intruder", {Sent(jobs[0])});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, IsEmpty());
  // The holder with a stale attempt neither.
  r = store_->Ack("mailroom", "holder", {Sent(jobs[0], 2)});
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(*r, IsEmpty());
  EXPECT_EQ(State(jobs[0].id), "leased");
  // The holder with the attempt it was handed: recorded, with every outcome kind at once.
  JobResult failed = Sent(jobs[1]);
  failed.kind = JobResult::Kind::kFailed;
  failed.reason = "550 no such user";
  failed.cost_micros = 0;
  JobResult retry = Sent(jobs[2]);
  retry.kind = JobResult::Kind::kRetry;
  retry.retry_after_ms = 60000;
  retry.cost_micros = 0;
  r = store_->Ack("mailroom", "holder", {Sent(jobs[0]), failed, retry});
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(*r, UnorderedElementsAre(jobs[0].id, jobs[1].id, jobs[2].id));
  EXPECT_EQ(State(jobs[0].id), "sent");
  EXPECT_EQ(State(jobs[1].id), "failed");
  EXPECT_EQ(Text(absl::StrCat("SELECT reason FROM delivery_states WHERE token_id = ", jobs[1].id)),
            "550 no such user");
  EXPECT_EQ(State(jobs[2].id), "retry");
  EXPECT_EQ(Int("SELECT sent FROM group_usage"), 1);
  EXPECT_EQ(Int("SELECT cost_micros FROM group_usage"), 100);
  // A finished job cannot be acknowledged again.
  r = store_->Ack("mailroom", "holder", {Sent(jobs[0])});
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(*r, IsEmpty());
  EXPECT_EQ(Int("SELECT sent FROM group_usage"), 1);
}

TEST_F(StoreTest, MailroomAckDirectlyIgnoresALeaseHandedOutAgain) {
  InsertAccounts(1, "late");
  std::vector<StoredJob> first = Dequeue("a", 10, absl::Milliseconds(1));
  ASSERT_EQ(first.size(), 1u);
  RunOut("1 second");
  std::vector<StoredJob> second = Dequeue("b");
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].attempt, 2u);
  auto ack = [&](const std::string& owner, int attempt) {
    pqxx::work tx(*conn_);
    auto r = tx.exec(absl::StrCat("SELECT * FROM mailroom_ack('mailroom', '", owner, "', ARRAY[",
                                  first[0].id, "]::BIGINT[], ARRAY[", attempt,
                                  "], ARRAY['sent'], ARRAY[''], ARRAY[0], ARRAY[0]::BIGINT[])"));
    tx.commit();
    return r.size();
  };
  EXPECT_EQ(ack("a", 1), 0u);  // the former holder, late
  EXPECT_EQ(ack("b", 1), 0u);  // the new holder with the old attempt
  EXPECT_EQ(ack("a", 2), 0u);  // the old holder with the new attempt
  EXPECT_EQ(Text("SELECT state || ' ' || owner FROM delivery_states"), "leased b");
  EXPECT_EQ(ack("b", 2), 1u);
  EXPECT_EQ(Text("SELECT state::TEXT FROM delivery_states"), "sent");
}

TEST_F(StoreTest, RenewExtendsOnlyTheHoldersLeases) {
  InsertAccounts(2, "renew");
  std::vector<StoredJob> jobs = Dequeue("holder", 10, absl::Seconds(5));
  ASSERT_EQ(jobs.size(), 2u);
  const std::vector<uint64_t> ids = {jobs[0].id, jobs[1].id};
  auto r = store_->Renew("mailroom", "intruder", ids, {}, absl::Seconds(600));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, IsEmpty());
  EXPECT_EQ(Int("SELECT max(EXTRACT(EPOCH FROM due_at - now()))::BIGINT FROM delivery_states"), 5);
  // With attempts: only those that match.
  r = store_->Renew("mailroom", "holder", ids, {1, 7}, absl::Seconds(600));
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(*r, ElementsAre(jobs[0].id));
  // Without: any attempt.
  r = store_->Renew("mailroom", "holder", ids, {}, absl::Seconds(600));
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(*r, UnorderedElementsAreArray(ids));
  EXPECT_EQ(Int("SELECT min(EXTRACT(EPOCH FROM due_at - now()))::BIGINT FROM delivery_states"),
            600);
  // The SQL function directly, as the Store calls it.
  pqxx::work tx(*conn_);
  EXPECT_EQ(tx.exec(absl::StrCat("SELECT * FROM mailroom_renew('mailroom', 'holder', ARRAY[",
                                 jobs[1].id, "]::BIGINT[], NULL, 1000)"))
                .size(),
            1u);
  tx.commit();
  // RenewAll: every lease of the owner, expired or not.
  RunOut("1 hour");
  ASSERT_TRUE(store_->RenewAll("mailroom", "holder", absl::Seconds(60)).ok());
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE due_at > now()"), 2);
}

TEST_F(StoreTest, LeasesOfAHolderThatLeftDoNotCountAsLost) {
  Exec("UPDATE consumer_groups SET max_lost_leases = 1 WHERE name = 'mailroom'");
  InsertAccounts(2, "left");
  std::vector<StoredJob> jobs = Dequeue("gone");
  ASSERT_EQ(jobs.size(), 2u);
  // One job's holder left (mailroom_holder_left, directly) ...
  ASSERT_TRUE(store_->HolderLeft("mailroom", "gone").ok());
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE holder_left"), 2);
  // (The two jobs are one batch; the batch records that its holder left.)
  EXPECT_EQ(Batch("state || ' ' || holder_left || ' ' || owner"), "leased true gone");
  ExpectBatchHandedOutAgain("next", 2, /*lost_leases=*/0);
  EXPECT_EQ(Int("SELECT max(lost_leases) FROM delivery_states"), 0);
  // ... while a live holder whose lease runs out loses it, and with max_lost_leases = 1 the
  // job fails at the next hand-out.
  RunOut("1 second");
  EXPECT_THAT(Dequeue("third"), IsEmpty());
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE state = 'failed'"), 2);
  EXPECT_EQ(Text("SELECT min(reason) FROM delivery_states"),
            "lease ran out 1 times without an outcome");
}

TEST_F(StoreTest, ReleaseHandsJobsOnAtOnceWithoutCountingThemLost) {
  InsertAccounts(3, "release");
  std::vector<StoredJob> jobs = Dequeue("a");
  ASSERT_EQ(jobs.size(), 3u);
  ASSERT_TRUE(store_->Release("mailroom", "someone-else", {jobs[0].id}).ok());
  EXPECT_THAT(Dequeue("b"), IsEmpty());
  ASSERT_TRUE(store_->Release("mailroom", "a", {jobs[0].id, jobs[1].id}).ok());
  std::vector<StoredJob> again = Dequeue("b");
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(Int("SELECT max(lost_leases) FROM delivery_states"), 0);
}

TEST_F(StoreTest, SupersededAndRateLimitedRecoveriesAreCountedNotHandedOutNorFailures) {
  Exec("INSERT INTO accounts (email, login, status) VALUES ('v@example.com', 'v', 'active')");
  // Seven requests: the first four are superseded, the fifth is the one pending, two are over
  // the default limit of five a day.
  for (int i = 0; i < 7; ++i) {
    Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts");
  }
  std::vector<StoredJob> jobs = Dequeue("a");
  ASSERT_EQ(jobs.size(), 1u);
  auto stats = store_->Stats("mailroom");
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 1u);
  EXPECT_EQ((*stats)[0].superseded, 4u);
  EXPECT_EQ((*stats)[0].rate_limited, 2u);
  EXPECT_EQ((*stats)[0].in_flight, 1u);
  auto failures = operators_->Failures("mailroom", 10);
  ASSERT_TRUE(failures.ok());
  EXPECT_TRUE(failures->empty());
}

TEST_F(StoreTest, ARejectedRecipientIsSuppressedAndItsNextTokensEndSuppressed) {
  InsertAccounts(3, "sup");
  std::vector<StoredJob> jobs = Dequeue("a", 3);
  ASSERT_EQ(jobs.size(), 3u);
  JobResult rejected = Sent(jobs[0]);
  rejected.kind = JobResult::Kind::kFailed;
  rejected.cost_micros = 0;
  rejected.reason = "smtp RCPT: 550 5.1.1 <sup1@example.test>: user unknown";
  rejected.suppress_recipient = true;
  // A stale lease's report (another owner) suppresses nothing: it is fenced like the outcome.
  JobResult stale = rejected;
  stale.id = jobs[1].id;
  ASSERT_TRUE(store_->Ack("mailroom", "someone-else", {stale}).ok());
  EXPECT_EQ(Int("SELECT count(*) FROM suppressions"), 0);
  auto recorded = store_->Ack("mailroom", "a", {rejected});
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_THAT(*recorded, ElementsAre(jobs[0].id));
  const std::string address = Text(
      absl::StrCat("SELECT lower(email) FROM accounts a JOIN tokens t ON t.account = a.id"
                   " WHERE t.id = ",
                   jobs[0].id));
  EXPECT_EQ(Text(absl::StrCat("SELECT reason || ' ' || source FROM suppressions"
                              " WHERE address = '",
                              address, "'")),
            "smtp_rejected smtp RCPT: 550 5.1.1 <sup1@example.test>: user unknown");

  // A new token for that address (a password recovery of the active account) is never handed
  // out: it ends suppressed with the entry's reason, in every group.
  Exec(absl::StrCat("UPDATE accounts SET status = 'active' WHERE lower(email) = '", address, "'"));
  Exec(absl::StrCat("INSERT INTO tokens (account, action) SELECT id, 'password_recovery'"
                    " FROM accounts WHERE lower(email) = '",
                    address, "'"));
  EXPECT_THAT(Dequeue("a"), IsEmpty());
  const int64_t token = Int("SELECT max(id) FROM tokens");
  EXPECT_EQ(State(token), "suppressed");
  EXPECT_EQ(Text(absl::StrCat("SELECT reason FROM delivery_states WHERE token_id = ", token)),
            "address suppressed: smtp_rejected (smtp RCPT: 550 5.1.1 <sup1@example.test>: user"
            " unknown)");
  auto stats = store_->Stats("mailroom");
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ((*stats)[0].suppressed, 1u);
  EXPECT_EQ((*stats)[0].failed, 1u);
  EXPECT_EQ((*stats)[0].in_flight, 2u);
}

TEST_F(StoreTest, AJobComingDueAgainForASuppressedAddressEndsSuppressed) {
  InsertAccounts(2, "due");
  std::vector<StoredJob> jobs = Dequeue("a", 2, absl::Milliseconds(1));
  ASSERT_EQ(jobs.size(), 2u);
  SuppressionRow row;
  row.address = absl::AsciiStrToLower(jobs[0].email);
  row.reason = "complaint";
  row.source = "feedback loop";
  ASSERT_TRUE(operators_->AddSuppression(row).ok());
  // The leases ran out: the suppressed one is finished, the other handed out again.
  RunOut("1 second");
  std::vector<StoredJob> again = Dequeue("b");
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].id, jobs[1].id);
  EXPECT_EQ(State(jobs[0].id), "suppressed");
  EXPECT_EQ(Text(absl::StrCat("SELECT reason FROM delivery_states WHERE token_id = ", jobs[0].id)),
            "address suppressed: complaint (feedback loop)");
}

TEST_F(StoreTest, ManualSuppressionsStopDeliveryUntilRemovedOrExpired) {
  SuppressionRow row;
  row.address = "man1@example.test";
  row.reason = "manual";
  row.source = "operator";
  auto added = operators_->AddSuppression(row);
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(added->address, "man1@example.test");
  EXPECT_GT(added->first_seen, 0);
  EXPECT_EQ(added->expires_at, 0);
  // An expired entry no longer counts.
  row.address = "man2@example.test";
  row.expires_at = absl::ToUnixSeconds(absl::Now()) + 3600;
  ASSERT_TRUE(operators_->AddSuppression(row).ok());
  Exec("UPDATE suppressions SET expires_at = now() - interval '1 second'"
       " WHERE address = 'man2@example.test'");
  InsertAccounts(3, "MAN");  // MAN1@example.test: the address is compared normalised
  std::vector<StoredJob> jobs = Dequeue("a");
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE state = 'suppressed'"), 1);

  auto removed = operators_->RemoveSuppression("man1@example.test");
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(removed->reason, "manual");
  EXPECT_EQ(operators_->RemoveSuppression("man1@example.test").status().code(),
            absl::StatusCode::kNotFound);
  Exec("INSERT INTO tokens (account, action) SELECT id, 'activation' FROM accounts"
       " WHERE email = 'MAN1@example.test'");
  std::vector<StoredJob> after = Dequeue("a");
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].email, "MAN1@example.test");
}

TEST_F(StoreTest, ListSuppressionsPagesByAddressWithFilters) {
  for (const char* a : {"c@x.test", "a@x.test", "b@y.test", "d@x.test"}) {
    SuppressionRow row;
    row.address = a;
    row.reason = a[0] == 'b' ? "hard_bounce" : "manual";
    ASSERT_TRUE(operators_->AddSuppression(row).ok());
  }
  auto list = [&](std::string after, std::string reason, std::string prefix, int limit) {
    SuppressionQuery q{std::move(after), std::move(reason), std::move(prefix), limit};
    auto rows = operators_->ListSuppressions(q);
    EXPECT_TRUE(rows.ok()) << rows.status();
    std::vector<std::string> out;
    if (rows.ok())
      for (const auto& r : *rows) out.push_back(r.address);
    return out;
  };
  EXPECT_THAT(list("", "", "", 2), ElementsAre("a@x.test", "b@y.test"));
  EXPECT_THAT(list("b@y.test", "", "", 2), ElementsAre("c@x.test", "d@x.test"));
  EXPECT_THAT(list("d@x.test", "", "", 2), IsEmpty());
  EXPECT_THAT(list("", "manual", "", 10), ElementsAre("a@x.test", "c@x.test", "d@x.test"));
  EXPECT_THAT(list("", "", "c", 10), ElementsAre("c@x.test"));
  EXPECT_THAT(list("", "hard_bounce", "b@", 10), ElementsAre("b@y.test"));
  // The table's CHECK keeps the reasons to the known four.
  SuppressionRow bad;
  bad.address = "e@x.test";
  bad.reason = "whatever";
  EXPECT_EQ(operators_->AddSuppression(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(StoreTest, StatsFailuresRequeueAndUsage) {
  ASSERT_TRUE(store_->EnsureGroup("audit", /*from_earliest=*/false).ok());
  InsertAccounts(5, "stats");
  std::vector<StoredJob> jobs = Dequeue("a", 3);
  ASSERT_EQ(jobs.size(), 3u);
  JobResult failed = Sent(jobs[1]);
  failed.kind = JobResult::Kind::kFailed;
  failed.reason = "550 no such user";
  failed.cost_micros = 0;
  ASSERT_TRUE(store_->Ack("mailroom", "a", {Sent(jobs[0]), failed}).ok());

  auto stats = store_->Stats("mailroom");
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 1u);
  const GroupStatsRow& s = (*stats)[0];
  EXPECT_EQ(s.group, "mailroom");
  EXPECT_EQ(s.depth, 2u);
  EXPECT_EQ(s.in_flight, 1u);
  EXPECT_EQ(s.sent, 1u);
  EXPECT_EQ(s.failed, 1u);
  EXPECT_GE(s.lag_seconds, 0);
  auto all = store_->Stats("");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 2u);

  auto failures = operators_->Failures("mailroom", 10);
  ASSERT_TRUE(failures.ok());
  ASSERT_EQ(failures->size(), 1u);
  EXPECT_EQ((*failures)[0].id, jobs[1].id);
  EXPECT_EQ((*failures)[0].reason, "550 no such user");
  EXPECT_EQ((*failures)[0].email, jobs[1].email);

  auto usage = store_->Usage("mailroom");
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->sent, 1u);
  EXPECT_EQ(usage->cost_micros, 100);
  auto none = store_->Usage("no-such-group");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->sent, 0u);

  auto requeued = operators_->Requeue("mailroom", {});
  ASSERT_TRUE(requeued.ok());
  EXPECT_EQ(*requeued, 1);
  EXPECT_EQ(State(jobs[1].id), "retry");
}

// Batch leases. A fresh dequeue leases its jobs as one lease_batches row;
// per-job deliveries rows appear only for what needs one (see the migration's header).

TEST_F(StoreTest, AFreshDequeueIsOneBatchRowAndAFullSentAckFinishesIt) {
  InsertAccounts(5, "batch");
  std::vector<StoredJob> jobs = Dequeue("a");
  ASSERT_EQ(jobs.size(), 5u);
  // The tables themselves: one batch row, no per-job row.
  EXPECT_EQ(Int("SELECT count(*) FROM lease_batches"), 1);
  EXPECT_EQ(Int("SELECT count(*) FROM deliveries"), 0);
  // The batch: its holder, its jobs in hand-out order, nothing recorded yet, one lease end.
  std::string ids;
  for (const StoredJob& j : jobs) absl::StrAppend(&ids, ids.empty() ? "" : ",", j.id);
  EXPECT_EQ(Batch("state || ' ' || owner || ' ' || recovery || ' ' || holder_left || ' ' || "
                  "acked || ' ' || done::TEXT || ' ' || ids::TEXT"),
            absl::StrCat("leased a false false 0 00000 {", ids, "}"));
  const std::vector<uint64_t> sorted = [&] {
    std::vector<uint64_t> v = Ids(jobs);
    std::sort(v.begin(), v.end());
    return v;
  }();
  EXPECT_EQ(Batch("lo_id || ' ' || hi_id"), absl::StrCat(sorted.front(), " ", sorted.back()));
  EXPECT_NEAR(Int("SELECT EXTRACT(EPOCH FROM due_at - now())::BIGINT FROM lease_batches"), 60, 2);
  // The per-job picture: five jobs leased to a, attempt 1, sharing the batch's lease end.
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states d JOIN lease_batches b USING (due_at)"
                " WHERE d.state = 'leased' AND d.owner = 'a' AND d.attempts = 1"
                " AND d.failures = 0 AND d.lost_leases = 0 AND NOT d.holder_left"),
            5);
  EXPECT_EQ(Stats().in_flight, 5u);

  std::vector<JobResult> all;
  for (const StoredJob& j : jobs) all.push_back(Sent(j));
  EXPECT_EQ(Ack("a", all), sorted);
  EXPECT_EQ(Batch("state || ' ' || acked || ' ' || done::TEXT"), "done 5 11111");
  const GroupStatsRow s = Stats();
  EXPECT_EQ(s.sent, 5u);
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(Int("SELECT count(*) FROM deliveries"), 0);  // the table itself: no per-job row
  EXPECT_EQ(Text("SELECT sent || ' ' || cost_micros FROM group_usage"), "5 500");
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE state = 'sent' AND owner IS NULL"
                " AND due_at IS NULL AND NOT holder_left AND attempts = 1"),
            5);
}

TEST_F(StoreTest, ADequeueLeasesOneBatchPerClassAndTheRecoveryLaneTouchesOnlyItsOwn) {
  // One password recovery (an active account) and two activations.
  Exec("INSERT INTO accounts (email, login, status) VALUES ('r@example.test', 'r', 'active')");
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts");
  InsertAccounts(2, "cls");
  std::vector<StoredJob> jobs = Dequeue("a");
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].action, "password_recovery");  // recoveries first
  EXPECT_TRUE(jobs[0].critical);
  EXPECT_EQ(Text("SELECT string_agg(recovery || ':' || cardinality(ids) || ':' || owner, ' '"
                 " ORDER BY batch_id) FROM lease_batches"),
            "true:1:a false:2:a");
  EXPECT_EQ(Int("SELECT count(*) FROM deliveries"), 0);  // the table itself: no per-job row
  EXPECT_EQ(Int(absl::StrCat("SELECT count(*) FROM delivery_states WHERE recovery AND token_id = ",
                             jobs[0].id)),
            1);
  // Both leases run out; the recovery lane takes the recovery batch over only (attempt 2, in a
  // per-job row that keeps the class) and leaves the activations' batch as it is.
  RunOut("1 second");
  auto lane = store_->DequeueRecoveries("mailroom", 10, "lane", absl::Seconds(60));
  ASSERT_TRUE(lane.ok()) << lane.status();
  ASSERT_EQ(lane->size(), 1u);
  EXPECT_EQ((*lane)[0].id, jobs[0].id);
  EXPECT_EQ((*lane)[0].attempt, 2u);
  EXPECT_EQ(Text("SELECT string_agg(recovery || ':' || state, ' ' ORDER BY batch_id)"
                 " FROM lease_batches"),
            "true:expired false:leased");
  EXPECT_EQ(Text("SELECT token_id || ' ' || recovery || ' ' || owner || ' ' || lost_leases"
                 " FROM deliveries"),
            absl::StrCat(jobs[0].id, " true lane 1"));
}

TEST_F(StoreTest, PartialAcksOfABatchRecordEachJobOnce) {
  InsertAccounts(6, "part");
  std::vector<StoredJob> j = Dequeue("a");
  ASSERT_EQ(j.size(), 6u);
  auto sorted = [](std::vector<uint64_t> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_EQ(Ack("a", {Sent(j[0]), Sent(j[1])}), sorted({j[0].id, j[1].id}));
  // j[1] again: already recorded, it comes back not recorded.
  EXPECT_EQ(Ack("a", {Sent(j[1]), Sent(j[2])}), sorted({j[2].id}));
  EXPECT_EQ(Ack("a", {Sent(j[4])}), sorted({j[4].id}));
  EXPECT_EQ(Batch("state || ' ' || acked || ' ' || done::TEXT"), "leased 4 111010");
  GroupStatsRow s = Stats();
  EXPECT_EQ(s.sent, 4u);
  EXPECT_EQ(s.in_flight, 2u);
  EXPECT_EQ(Text("SELECT sent || ' ' || cost_micros FROM group_usage"), "4 400");
  EXPECT_EQ(State(j[3].id), "leased");
  EXPECT_EQ(State(j[5].id), "leased");
  // The rest, one of them twice in the same call: each recorded once.
  EXPECT_EQ(Ack("a", {Sent(j[3]), Sent(j[5]), Sent(j[5])}), sorted({j[3].id, j[5].id}));
  EXPECT_EQ(Batch("state || ' ' || acked || ' ' || done::TEXT"), "done 6 111111");
  s = Stats();
  EXPECT_EQ(s.sent, 6u);
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(Text("SELECT sent || ' ' || cost_micros FROM group_usage"), "6 600");
  EXPECT_EQ(Int("SELECT count(*) FROM deliveries"), 0);  // the table itself: still no per-job row
}

TEST_F(StoreTest, AMixedAckWritesPerJobRowsOnlyForWhatIsNotAPlainSent) {
  InsertAccounts(4, "mixed");
  std::vector<StoredJob> j = Dequeue("a");
  ASSERT_EQ(j.size(), 4u);
  JobResult retry = Sent(j[1]);
  retry.kind = JobResult::Kind::kRetry;
  retry.reason = "421 try again later";
  retry.retry_after_ms = 0;  // due again at once
  retry.cost_micros = 0;
  JobResult failed = Sent(j[2]);
  failed.kind = JobResult::Kind::kFailed;
  failed.reason = "550 no such user";
  failed.cost_micros = 0;
  JobResult ses = Sent(j[3]);
  ses.provider_message_id = "ses-0001";
  std::vector<uint64_t> all = Ids(j);
  std::sort(all.begin(), all.end());
  EXPECT_EQ(Ack("a", {Sent(j[0]), retry, failed, ses}), all);
  // The table itself: rows for the retry, the failure and the SENT with a message id only.
  EXPECT_EQ(Text("SELECT string_agg(token_id || ' ' || state || ' ' || failures || ' ' || "
                 "coalesce(reason, '-') || ' ' || coalesce(provider_message_id, '-') || ' ' || "
                 "coalesce(owner, '-'), ', ' ORDER BY token_id) FROM deliveries"),
            absl::StrCat(j[1].id, " retry 1 421 try again later - -, ", j[2].id,
                         " failed 0 550 no such user - -, ", j[3].id, " sent 0 - ses-0001 -"));
  EXPECT_EQ(State(j[0].id), "sent");
  EXPECT_EQ(Batch("state || ' ' || acked || ' ' || done::TEXT"), "done 4 1111");
  GroupStatsRow s = Stats();
  EXPECT_EQ(s.sent, 2u);
  EXPECT_EQ(s.failed, 1u);
  EXPECT_EQ(s.waiting_retry, 1u);
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(Text("SELECT sent || ' ' || cost_micros FROM group_usage"), "2 200");
  // The retry is handed out again, as its second attempt, to whoever dequeues next.
  std::vector<StoredJob> again = Dequeue("b");
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].id, j[1].id);
  EXPECT_EQ(again[0].attempt, 2u);
  EXPECT_EQ(again[0].failures, 1u);
  EXPECT_EQ(Text(absl::StrCat("SELECT state || ' ' || owner || ' ' || attempts || ' ' || "
                              "lost_leases FROM deliveries WHERE token_id = ",
                              j[1].id)),
            "leased b 2 0");                                // a second attempt is a per-job row
  EXPECT_EQ(Int("SELECT count(*) FROM lease_batches"), 1);  // no batch for a second attempt
}

TEST_F(StoreTest, ABatchIsFencedByOwnerAndAttemptAndHandedOutAgainWhenItsLeaseRunsOut) {
  InsertAccounts(3, "bfence");
  std::vector<StoredJob> j = Dequeue("a");
  ASSERT_EQ(j.size(), 3u);
  // Another owner naming a's batch jobs, and a with an attempt it was not handed: nothing.
  EXPECT_THAT(Ack("intruder", {Sent(j[0]), Sent(j[1])}), IsEmpty());
  EXPECT_THAT(Ack("a", {Sent(j[0], 2)}), IsEmpty());
  EXPECT_EQ(Batch("state || ' ' || acked || ' ' || done::TEXT"), "leased 0 000");
  EXPECT_EQ(Int("SELECT count(*) FROM group_usage"), 0);
  // The lease runs out: the next dequeue hands the jobs to b as their second attempt, each
  // with a lost lease, and the batch is over.
  ExpectBatchHandedOutAgain("b", 3, /*lost_leases=*/1);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states"), 3);
  // a's late outcome (attempt 1) records nothing, nor does b naming the old attempt.
  EXPECT_THAT(Ack("a", {Sent(j[0]), Sent(j[1]), Sent(j[2])}), IsEmpty());
  EXPECT_THAT(Ack("b", {Sent(j[0], 1)}), IsEmpty());
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE state = 'leased' AND owner = 'b'"), 3);
  EXPECT_EQ(Int("SELECT count(*) FROM group_usage"), 0);
  // b, with the attempt it was handed: recorded.
  EXPECT_EQ(Ack("b", {Sent(j[0], 2)}), std::vector<uint64_t>{j[0].id});
  EXPECT_EQ(State(j[0].id), "sent");
  const GroupStatsRow s = Stats();
  EXPECT_EQ(s.sent, 1u);
  EXPECT_EQ(s.in_flight, 2u);
}

TEST_F(StoreTest, ReleasedJobsOfABatchAreDueNowTheOthersStayInIt) {
  InsertAccounts(3, "brel");
  std::vector<StoredJob> j = Dequeue("a");
  ASSERT_EQ(j.size(), 3u);
  ASSERT_TRUE(store_->Release("mailroom", "someone-else", {j[0].id}).ok());
  EXPECT_THAT(Dequeue("b"), IsEmpty());
  ASSERT_TRUE(store_->Release("mailroom", "a", {j[0].id, j[1].id}).ok());
  // The released ones: per-job rows, still a's lease, holder gone, due now.
  EXPECT_EQ(Text("SELECT string_agg(token_id || ' ' || state || ' ' || owner || ' ' || "
                 "attempts || ' ' || holder_left || ' ' || (due_at <= now()), ', '"
                 " ORDER BY token_id) FROM deliveries"),
            absl::StrCat(std::min(j[0].id, j[1].id), " leased a 1 true true, ",
                         std::max(j[0].id, j[1].id), " leased a 1 true true"));
  // The third stays in the batch, leased to a until the batch's lease end.
  EXPECT_EQ(Batch("state"), "leased");
  EXPECT_EQ(Text(absl::StrCat("SELECT d.state || ' ' || d.owner || ' ' || (d.due_at = b.due_at)"
                              " FROM delivery_states d, lease_batches b WHERE d.token_id = ",
                              j[2].id)),
            "leased a true");
  EXPECT_EQ(Stats().in_flight, 3u);
  // Handed out again at once, without a lost lease.
  std::vector<StoredJob> again = Dequeue("b");
  ASSERT_EQ(again.size(), 2u);
  std::vector<uint64_t> released = {j[0].id, j[1].id};
  EXPECT_THAT(Ids(again), UnorderedElementsAreArray(released));
  for (const StoredJob& k : again) EXPECT_EQ(k.attempt, 2u) << k.id;
  EXPECT_EQ(Int("SELECT max(lost_leases) FROM delivery_states"), 0);
  // a's outcome for a released job records nothing; for the one it kept, it does.
  EXPECT_THAT(Ack("a", {Sent(j[0])}), IsEmpty());
  EXPECT_EQ(Ack("a", {Sent(j[2])}), std::vector<uint64_t>{j[2].id});
  EXPECT_EQ(State(j[2].id), "sent");
  const GroupStatsRow s = Stats();
  EXPECT_EQ(s.sent, 1u);
  EXPECT_EQ(s.in_flight, 2u);
}

TEST_F(StoreTest, RenewingOneJobOfABatchExtendsTheBatchARecordedJobIsLost) {
  InsertAccounts(3, "bren");
  std::vector<StoredJob> j = Dequeue("a", 100, absl::Seconds(5));
  ASSERT_EQ(j.size(), 3u);
  auto renew = [&](const std::string& owner, const std::vector<uint64_t>& ids,
                   const std::vector<uint32_t>& attempts, absl::Duration lease) {
    auto r = store_->Renew("mailroom", owner, ids, attempts, lease);
    EXPECT_TRUE(r.ok()) << r.status();
    std::vector<uint64_t> out = r.ok() ? *r : std::vector<uint64_t>{};
    std::sort(out.begin(), out.end());
    return out;
  };
  const std::string lease_end = "EXTRACT(EPOCH FROM due_at - now())::BIGINT";
  EXPECT_THAT(renew("intruder", {j[1].id}, {}, absl::Seconds(600)), IsEmpty());
  EXPECT_NEAR(Int("SELECT " + lease_end + " FROM lease_batches"), 5, 1);
  // One job renewed: the whole batch's lease end moves, so every job's does.
  EXPECT_EQ(renew("a", {j[1].id}, {1}, absl::Seconds(600)), std::vector<uint64_t>{j[1].id});
  EXPECT_NEAR(Int("SELECT " + lease_end + " FROM lease_batches"), 600, 2);
  EXPECT_NEAR(Int("SELECT min(" + lease_end + ") FROM delivery_states"), 600, 2);
  EXPECT_NEAR(Int("SELECT max(" + lease_end + ") FROM delivery_states"), 600, 2);
  // A recorded job is no longer leased: it comes back as not renewed (lost).
  ASSERT_EQ(Ack("a", {Sent(j[0])}), std::vector<uint64_t>{j[0].id});
  EXPECT_EQ(renew("a", {j[0].id, j[2].id}, {1, 1}, absl::Seconds(900)),
            std::vector<uint64_t>{j[2].id});
  EXPECT_NEAR(Int("SELECT " + lease_end + " FROM lease_batches"), 900, 2);
  EXPECT_EQ(Int("SELECT count(*) FROM deliveries"), 0);  // the table: renewals write no row
}

// A collector paused (SIGSTOP, a frozen VM) or cut off inside a dequeue's transaction holds
// the group's row lock, which every dequeue of the group needs. Its transactions carry
// idle_in_transaction_session_timeout (SET LOCAL at BEGIN: collector/db/pg_tx.h), so PostgreSQL
// ends that transaction and the other collectors go on; without it they would wait for the lock
// until their statement timeout, again and again, for as long as the frozen one stays frozen.
TEST_F(StoreTest, ACollectorFrozenInsideADequeueDoesNotHoldItsGroup) {
  InsertAccounts(3, "f");
  ASSERT_EQ(Dequeue("a", 1).size(), 1u);  // creates the group
  const TxTimeouts timeouts{absl::Seconds(20), absl::Milliseconds(300)};
  pqxx::connection frozen(url_);
  pqxx::nontransaction tx(frozen);
  tx.exec(BeginCommand(timeouts));  // as a transaction of the store's (collector/db/pool.h)
  tx.exec("SELECT 1 FROM consumer_groups WHERE name = 'mailroom' FOR NO KEY UPDATE");
  // ... and it stops here. Another collector dequeues: it gets the lock once PostgreSQL has
  // ended the idle transaction (a statement timeout of 20 s would fail the call instead).
  std::unique_ptr<Store> other = NewPgStore(url_, 1, timeouts);
  auto jobs = other->Dequeue("mailroom", 10, "b", absl::Seconds(60));
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 2u);
  // The frozen collector finds its session gone when it resumes: nothing it did counts.
  EXPECT_ANY_THROW(tx.exec("COMMIT"));
}

// Through pgbouncer in transaction pooling libpq's `options` (session settings at connect) is
// refused; the store, whose transactions set their timeouts themselves (collector/db/pool.h),
// works through it.
TEST_F(StoreTest, TheStoreWorksThroughPgbouncerInTransactionPooling) {
  auto bouncer = testing::PgBouncer::Start(pg_->port(), /*pool_size=*/1);
  ASSERT_TRUE(bouncer.ok()) << bouncer.status();
  const std::string url = (*bouncer)->Url(url_.substr(url_.rfind('/') + 1));
  // Session settings at connect: refused by pgbouncer.
  EXPECT_ANY_THROW(
      pqxx::connection(WithConnectionDefaults(url, absl::Seconds(30), absl::Seconds(5))));
  // The store works through it: a dequeue and an acknowledgement.
  InsertAccounts(3, "pb");
  std::unique_ptr<Store> pooled = NewPgStore(WithKeepaliveDefaults(url), 2,
                                             {absl::Seconds(30), absl::Seconds(5)});
  absl::StatusOr<int> collected = pooled->CollectSignups(10);
  ASSERT_TRUE(collected.ok()) << collected.status();
  EXPECT_EQ(*collected, 3);
  auto jobs = pooled->Dequeue("mailroom", 10, "p", absl::Seconds(60));
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 3u);
  std::vector<JobResult> sent;
  for (const StoredJob& j : *jobs) sent.push_back(Sent(j));
  auto recorded = pooled->Ack("mailroom", "p", sent);
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_EQ(recorded->size(), 3u);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE state = 'sent'"), 3);
}

// A dequeue is one statement in autocommit (one round trip: no transaction, nor the group's
// row lock, stays open between round trips), for a subscription linked to a grant holder too
// (its count is written in that statement, even by a first dequeue without a job). A
// statement-pooling pgbouncer refuses any transaction that spans two queries.
TEST_F(StoreTest, ADequeueIsOneStatement) {
  auto bouncer = testing::PgBouncer::Start(pg_->port(), /*pool_size=*/1, "statement");
  ASSERT_TRUE(bouncer.ok()) << bouncer.status();
  const std::string url = (*bouncer)->Url(url_.substr(url_.rfind('/') + 1));
  std::unique_ptr<Store> pooled = NewPgStore(url, 1, {absl::Seconds(30), absl::Seconds(5)});
  InsertAccounts(3, "one");
  ASSERT_TRUE(pooled->CollectSignups(10).ok());  // one statement too
  auto jobs = pooled->Dequeue("mailroom", 2, "p", absl::Seconds(60));
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 2u);
  DequeueRequest linked{"mailroom", 10, "linked", absl::Seconds(60)};
  linked.holder = "h1";
  jobs = pooled->Dequeue(linked);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 1u);
  DequeueRequest idle{"mailroom", 10, "idle", absl::Seconds(60)};
  idle.holder = "h2";
  jobs = pooled->Dequeue(idle);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_TRUE(jobs->empty());
  EXPECT_EQ(Int("SELECT handed FROM budget_subscriptions WHERE owner = 'linked'"), 1);
  EXPECT_EQ(Int("SELECT handed FROM budget_subscriptions WHERE owner = 'idle'"), 0);
}

// A dequeue that finds nothing new leaves the group's cursor rows as they were (no new row
// version, no WAL for them: the cursor's lower bound stays), and the tokens committed after it
// are handed out from that bound.
TEST_F(StoreTest, ADequeueThatFindsNothingNewDoesNotWriteTheGroupsCursors) {
  InsertAccounts(2, "w");
  ASSERT_EQ(Dequeue("a", 10).size(), 2u);
  const std::string version =
      "SELECT sum(c.xmin::text::bigint)::bigint FROM group_cursors c"
      " JOIN consumer_groups g ON g.id = c.group_id WHERE g.name = 'mailroom'";
  const int64_t before = Int(version);
  ASSERT_TRUE(Dequeue("a", 10).empty());
  ASSERT_TRUE(Dequeue("a", 10).empty());
  EXPECT_EQ(Int(version), before);
  InsertAccounts(3, "x");
  EXPECT_EQ(Dequeue("a", 10).size(), 3u);
  EXPECT_NE(Int(version), before);
  EXPECT_TRUE(Dequeue("a", 10).empty());
}

// The lone statement runs under the store's timeouts: a dequeue that waits for the group's
// row lock (held by a transaction left open elsewhere) fails at the statement timeout.
TEST_F(StoreTest, ADequeueRunsUnderTheStatementTimeout) {
  InsertAccounts(1, "t");
  ASSERT_EQ(Dequeue("a", 1).size(), 1u);  // creates the group
  pqxx::connection holder(url_);
  pqxx::work tx(holder);
  tx.exec("SELECT 1 FROM consumer_groups WHERE name = 'mailroom' FOR NO KEY UPDATE");
  std::unique_ptr<Store> timed = NewPgStore(url_, 1, {absl::Milliseconds(300)});
  const absl::Time start = absl::Now();
  auto jobs = timed->Dequeue("mailroom", 10, "b", absl::Seconds(60));
  EXPECT_EQ(jobs.status().code(), absl::StatusCode::kUnavailable) << jobs.status();
  EXPECT_THAT(std::string(jobs.status().message()), ::testing::HasSubstr("statement timeout"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

// An acknowledgement stores the provider message id of each recorded SENT outcome (for
// feedback to find the job) and counts them in the group's reputation (mailroom_record_sent);
// a stale report stores and counts nothing.
TEST_F(StoreTest, AckStoresTheMessageIdOfRecordedSentOutcomesAndCountsThem) {
  InsertAccounts(3, "m");
  std::vector<StoredJob> jobs = Dequeue("s", 3);
  ASSERT_EQ(jobs.size(), 3u);
  std::vector<JobResult> results;
  for (const StoredJob& j : jobs) {
    results.push_back(Sent(j));
    results.back().provider_message_id = absl::StrCat("ses-", j.id);
  }
  results.back().provider_message_id.clear();
  ASSERT_EQ(Ack("s", results).size(), 3u);
  EXPECT_EQ(Text(absl::StrCat("SELECT provider_message_id FROM delivery_states WHERE token_id = ",
                              jobs[0].id)),
            absl::StrCat("ses-", jobs[0].id));
  EXPECT_EQ(Text(absl::StrCat("SELECT provider_message_id FROM delivery_states WHERE token_id = ",
                              jobs[2].id)),
            "NULL");
  // A stale report (another owner) stores nothing and counts nothing.
  JobResult stale = Sent(jobs[0], 1);
  stale.provider_message_id = "forged";
  EXPECT_THAT(Ack("someone-else", {stale}), IsEmpty());
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE provider_message_id = 'forged'"), 0);
  EXPECT_EQ(Text("SELECT group_name || ' ' || sent || ' ' || delivered"
                 "  FROM mailroom_reputation(7 * 24 * 3600)"),
            "mailroom 3 0");
}

TEST_F(StoreTest, ErrorsAreMappedBySqlstate) {
  // mailroom_dequeue raises no_data_found (P0002) for an unknown group.
  auto unknown = store_->Dequeue("no-such-group", 10, "a", absl::Seconds(1));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound) << unknown.status();
  // A value the schema refuses (a check violation: 23514) is InvalidArgument
  // (collector/db/pg_status.h has the whole mapping).
  absl::Status bad = store_->EnsureGroup("Not A Group", false);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  // An unreachable server is Unavailable, and the message holds no password.
  auto down = NewPgStore("postgresql://u:hunter2-secret@127.0.0.1:1/db", 1);
  absl::Status st = down->Ping();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_EQ(std::string(st.message()).find("hunter2-secret"), std::string::npos);
}

TEST_F(StoreTest, AStoreReconnectsAfterItsConnectionsAreTerminated) {
  ASSERT_TRUE(store_->Ping().ok());
  Exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
       " WHERE datname = current_database() AND pid <> pg_backend_pid()");
  // The first call on a dead pooled connection fails as Unavailable (retryable); a later one
  // reconnects.
  absl::Status first = store_->Ping();
  if (!first.ok()) {
    EXPECT_EQ(first.code(), absl::StatusCode::kUnavailable) << first;
  }
  bool recovered = false;
  for (int i = 0; i < 4 && !recovered; ++i) recovered = store_->Ping().ok();
  EXPECT_TRUE(recovered);
}

}  // namespace
}  // namespace mailroom
