// The OperatorStore and its SQL (mailroom_find_emails, mailroom_email_ledger, mailroom_audit,
// mailroom_audit_end, mailroom_list_audit) against a throwaway PostgreSQL; one fresh database
// per test.
#include "collector/store/operator_store.h"

#include <pqxx/pqxx>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/migrated_database.h"

namespace mailroom {
namespace {

using ::testing::ElementsAre;

class OperatorStoreTest : public testing::MigratedDatabaseTest {
 protected:
  void SetUp() override {
    MigratedDatabaseTest::SetUp();
    if (HasFatalFailure()) return;
    store_ = NewPgOperatorStore(url_);
  }
  int64_t Account(const std::string& login) {
    const int64_t id = Int(
        absl::StrCat("INSERT INTO mailroom.accounts (email, login, status, activated_at) VALUES ('",
                     login, "@example.test', '", login, "', 'active', 1) RETURNING id"));
    return id;
  }
  int64_t Recovery(int64_t account) {
    return Int(
        absl::StrCat("SELECT token_id FROM mailroom.request(", account, ", 'password_recovery')"));
  }
  void Ack(int64_t id, int attempt, const std::string& outcome, const std::string& mid,
           const std::string& provider, const std::string& reason = "") {
    EXPECT_EQ(Int(absl::StrCat("SELECT count(*) FROM mailroom.mailroom_ack('mailroom', "
                               "'sub-0123456789abcdef', ARRAY[",
                               id, "]::bigint[], ARRAY[", attempt, "], ARRAY['", outcome,
                               "'], ARRAY['", reason, "'], ARRAY[0], ARRAY[30]::bigint[], ARRAY['",
                               mid, "'], ARRAY['", provider, "'])")),
              1);
  }
  int Lease() {
    return static_cast<int>(Int("SELECT count(*) FROM mailroom.mailroom_dequeue('mailroom', 10,"
                                " 'sub-0123456789abcdef', 60000)"));
  }
  static std::string Line(const LedgerEntry& l) {
    return absl::StrCat(l.event_id == 0 ? "staged " : "", l.event, " ", l.handout, " ",
                        l.subscriber, " ", l.provider, " ", l.provider_message_id, " ",
                        l.cost_micros, " ", l.detail);
  }

  std::unique_ptr<OperatorStore> store_;
};

// An address's email with its two tries, the provider's bounce and the suppression it caused:
// found by the address (in any case, with spaces) and by the account, with the group's
// delivery; another group sees the email without this group's ledger.
TEST_F(OperatorStoreTest, FindEmailsShowsTheGroupsDeliveryLedgerAndSuppression) {
  const int64_t ann = Account("ann");
  const int64_t other = Account("bob");
  const int64_t t = Recovery(ann);
  Recovery(other);
  Exec("SELECT mailroom_ensure_group('audit', false)");
  ASSERT_EQ(Lease(), 2);
  Ack(t, 1, "retry", "", "", "451 4.7.1 try later");
  ASSERT_EQ(Lease(), 1);
  Ack(t, 2, "sent", "m-1", "ses");
  Exec("SELECT * FROM mailroom.mailroom_publish_events(1000)");
  ASSERT_EQ(Text("SELECT mailroom.mailroom_record_feedback('k1', 'ses', 'Bounce', ARRAY['m-1'],"
                 " '', 0, ARRAY['ann@example.test'], 'Permanent', 'General', 3)"),
            "recorded");

  auto found = store_->FindEmails("mailroom", "  ANN@example.test ", 0, 20);
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_EQ(found->emails.size(), 1u);
  const FoundEmail& e = found->emails[0];
  EXPECT_EQ(e.job_id, static_cast<uint64_t>(t));
  EXPECT_EQ(e.account_id, static_cast<uint64_t>(ann));
  EXPECT_EQ(e.action, "password_recovery");
  EXPECT_EQ(e.address, "ann@example.test");
  EXPECT_EQ(e.state, "bounced");
  EXPECT_EQ(e.reason, "Permanent");
  EXPECT_EQ(e.handouts, 2);
  EXPECT_EQ(e.failures, 1);
  EXPECT_EQ(e.provider, "ses");
  EXPECT_EQ(e.provider_message_id, "m-1");
  std::vector<std::string> lines;
  for (const LedgerEntry& l : e.ledger) lines.push_back(Line(l));
  EXPECT_THAT(lines, ElementsAre("retried 1 sub-01234567   0 451 4.7.1 try later",
                                 "sent 2 sub-01234567 ses m-1 30 ses",
                                 "staged bounced 0  ses  0 Permanent"));
  ASSERT_TRUE(found->suppression.has_value());
  EXPECT_EQ(found->suppression->address, "ann@example.test");
  EXPECT_EQ(found->suppression->reason, "hard_bounce");

  auto by_account = store_->FindEmails("mailroom", "", ann, 20);
  ASSERT_TRUE(by_account.ok()) << by_account.status();
  ASSERT_EQ(by_account->emails.size(), 1u);
  EXPECT_EQ(by_account->emails[0].ledger.size(), 3u);
  EXPECT_TRUE(by_account->suppression.has_value());

  // Another group: the same email, none of this group's delivery or ledger.
  auto elsewhere = store_->FindEmails("audit", "ann@example.test", 0, 20);
  ASSERT_TRUE(elsewhere.ok()) << elsewhere.status();
  ASSERT_EQ(elsewhere->emails.size(), 1u);
  EXPECT_EQ(elsewhere->emails[0].state, "queued");
  EXPECT_EQ(elsewhere->emails[0].handouts, 0);
  EXPECT_TRUE(elsewhere->emails[0].ledger.empty());

  auto nobody = store_->FindEmails("mailroom", "nobody@example.test", 0, 20);
  ASSERT_TRUE(nobody.ok());
  EXPECT_TRUE(nobody->emails.empty());
  EXPECT_FALSE(nobody->suppression.has_value());
  EXPECT_EQ(store_->FindEmails("no-such-group", "ann@example.test", 0, 20).status().code(),
            absl::StatusCode::kNotFound);
}

// The newest `limit` emails, newest first, each in its state (the older requests superseded
// by the newest).
TEST_F(OperatorStoreTest, FindEmailsGivesTheNewestFirstUpToTheLimit) {
  const int64_t ann = Account("ann");
  std::vector<int64_t> tokens;
  for (int i = 0; i < 4; ++i) tokens.push_back(Recovery(ann));
  auto found = store_->FindEmails("mailroom", "ann@example.test", 0, 3);
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_EQ(found->emails.size(), 3u);
  EXPECT_EQ(found->emails[0].job_id, static_cast<uint64_t>(tokens[3]));
  EXPECT_EQ(found->emails[2].job_id, static_cast<uint64_t>(tokens[1]));
  EXPECT_EQ(found->emails[1].state, "superseded");
}

// A paused group's jobs are handed out by no dequeue (the recovery lane's neither) until it is
// resumed; a second pause keeps the first time; an unknown group is NOT_FOUND.
TEST_F(OperatorStoreTest, APausedGroupHandsOutNothingUntilResumed) {
  const int64_t ann = Account("ann");
  Recovery(ann);
  auto paused = store_->SetPaused("mailroom", true, "provider incident");
  ASSERT_TRUE(paused.ok()) << paused.status();
  EXPECT_TRUE(paused->paused);
  EXPECT_GT(paused->paused_at, 1700000000);
  EXPECT_EQ(paused->reason, "provider incident");
  EXPECT_EQ(Lease(), 0);
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.mailroom_dequeue('mailroom', 10, 'x', 60000,"
                " true)"),
            0);
  Exec("UPDATE mailroom.consumer_groups SET paused_at = paused_at - interval '1 hour'");
  auto again = store_->SetPaused("mailroom", true, "still down");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->paused_at, paused->paused_at - 3600);
  EXPECT_EQ(again->reason, "still down");
  auto resumed = store_->SetPaused("mailroom", false, "");
  ASSERT_TRUE(resumed.ok());
  EXPECT_FALSE(resumed->paused);
  EXPECT_EQ(resumed->paused_at, 0);
  EXPECT_EQ(Lease(), 1);
  EXPECT_EQ(store_->SetPaused("no-such-group", true, "").status().code(),
            absl::StatusCode::kNotFound);
}

// A call's entry is written before it runs ('started') and its outcome once; the audit is
// read newest first, a page at a time; long texts are cut.
TEST_F(OperatorStoreTest, TheAuditRecordsEachCallAndItsOutcomeOnce) {
  auto first = store_->BeginAudit({"token 2", "RemoveSuppression", "", "ann@example.test"});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = store_->BeginAudit({"token 3", "FindEmails", "mailroom", std::string(5000, 'x')});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT(*second, *first);
  ASSERT_TRUE(store_->EndAudit(*first, "OK: removed hard_bounce").ok());
  ASSERT_TRUE(store_->EndAudit(*first, "OK: changed again").ok());  // written once
  auto all = store_->ListAudit(0, 10);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].id, *second);
  EXPECT_EQ((*all)[0].record.method, "FindEmails");
  EXPECT_EQ((*all)[0].record.group, "mailroom");
  EXPECT_EQ((*all)[0].record.target.size(), 1000u);
  EXPECT_EQ((*all)[0].outcome, "started");
  EXPECT_EQ((*all)[1].record.credential, "token 2");
  EXPECT_EQ((*all)[1].record.target, "ann@example.test");
  EXPECT_EQ((*all)[1].outcome, "OK: removed hard_bounce");
  EXPECT_GT((*all)[1].at_ms, 1700000000000);
  auto page = store_->ListAudit(*second, 10);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->size(), 1u);
  EXPECT_EQ((*page)[0].id, *first);
  // Pruned after audit_retention_days.
  Exec("UPDATE mailroom.mailroom_settings SET audit_retention_days = 1");
  Exec(absl::StrCat("UPDATE mailroom.operator_audit SET at = now() - interval '2 days' WHERE id = ",
                    *first));
  EXPECT_EQ(Int("SELECT pruned FROM mailroom.mailroom_prune_operator_audit(1000)"), 1);
  EXPECT_EQ(store_->ListAudit(0, 10)->size(), 1u);
}

}  // namespace
}  // namespace mailroom
