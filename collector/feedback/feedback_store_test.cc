// The feedback and reputation SQL (migration 0012) through FeedbackStore and Store::Ack,
// against a throwaway PostgreSQL; one fresh database per test.
#include "collector/feedback/feedback_store.h"

#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "collector/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/migrated_database.h"

namespace mailroom {
namespace {

class FeedbackStoreTest : public testing::MigratedDatabaseTest {
 protected:
  void SetUp() override {
    MigratedDatabaseTest::SetUp();
    if (HasFatalFailure()) return;
    store_ = NewPgStore(url_, 2);
    feedback_ = NewPgFeedbackStore(url_);
    ASSERT_TRUE(store_->EnsureGroup("mailroom", true).ok());
  }
  // Accounts a1..an, their activation jobs leased to "s" and acknowledged SENT with SES ids
  // "ses-<job id>" (an empty id for the last one when `last_without_id`).
  std::vector<StoredJob> SendTo(int n, bool last_without_id = false) {
    Exec(
        absl::StrCat("INSERT INTO accounts (email, login) SELECT 'a' || i || '@example.test',"
                     " 'a' || i FROM generate_series(1, ",
                     n, ") i"));
    CollectSignups();
    auto jobs = store_->Dequeue("mailroom", n, "s", absl::Seconds(60));
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    std::vector<JobResult> results;
    for (const StoredJob& j : *jobs) {
      JobResult r;
      r.id = j.id;
      r.attempt = j.attempt;
      r.kind = JobResult::Kind::kSent;
      r.provider_message_id = absl::StrCat("ses-", j.id);
      results.push_back(r);
    }
    if (last_without_id && !results.empty()) results.back().provider_message_id.clear();
    auto recorded = store_->Ack("mailroom", "s", results);
    EXPECT_TRUE(recorded.ok()) << recorded.status();
    return *jobs;
  }
  static FeedbackEvent Bounce(const std::string& ses_id, const std::string& to,
                              const std::string& type = "Permanent") {
    FeedbackEvent e;
    e.type = "Bounce";
    e.ses_message_id = ses_id;
    e.recipients = {to};
    e.bounce_type = type;
    e.detail = "General";
    return e;
  }
  ReputationRow Reputation() {
    auto rows = feedback_->Reputation(absl::Hours(24 * 7));
    EXPECT_TRUE(rows.ok()) << rows.status();
    EXPECT_EQ(rows->size(), 1u);
    return rows->empty() ? ReputationRow{} : (*rows)[0];
  }

  std::unique_ptr<Store> store_;
  std::unique_ptr<FeedbackStore> feedback_;
};

TEST_F(FeedbackStoreTest, AckStoresTheMessageIdOfRecordedSentOutcomesAndCountsThem) {
  std::vector<StoredJob> jobs = SendTo(3, /*last_without_id=*/true);
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(Text(absl::StrCat("SELECT provider_message_id FROM delivery_states WHERE token_id = ",
                              jobs[0].id)),
            absl::StrCat("ses-", jobs[0].id));
  EXPECT_EQ(Text(absl::StrCat("SELECT provider_message_id FROM delivery_states WHERE token_id = ",
                              jobs[2].id)),
            "NULL");
  // A stale report (another owner) stores nothing and counts nothing.
  JobResult stale;
  stale.id = jobs[0].id;
  stale.attempt = 1;
  stale.provider_message_id = "forged";
  ASSERT_TRUE(store_->Ack("mailroom", "someone-else", {stale}).ok());
  EXPECT_EQ(Text("SELECT count(*) FROM delivery_states WHERE provider_message_id = 'forged'"), "0");
  ReputationRow r = Reputation();
  EXPECT_EQ(r.group, "mailroom");
  EXPECT_EQ(r.sent, 3u);
  EXPECT_EQ(r.delivered, 0u);
}

TEST_F(FeedbackStoreTest, PermanentBounceSuppressesOnceAndCounts) {
  std::vector<StoredJob> jobs = SendTo(2);
  const std::string ses_id = absl::StrCat("ses-", jobs[0].id);
  auto r = feedback_->Record("sns-1", Bounce(ses_id, "A1@example.test"), 3);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, FeedbackResult::kRecorded);
  EXPECT_EQ(
      Text("SELECT reason || ' ' || source FROM suppressions WHERE address = 'a1@example.test'"),
      "hard_bounce ses bounce: Permanent General");
  EXPECT_EQ(Text(absl::StrCat("SELECT bounce_type FROM delivery_states WHERE token_id = ",
                              jobs[0].id)),
            "Permanent");
  // The same SNS message again (SNS delivers at least once): nothing changes.
  auto again = feedback_->Record("sns-1", Bounce(ses_id, "A1@example.test"), 3);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, FeedbackResult::kDuplicate);
  // Another SNS message about the same bounce counts once per delivery.
  ASSERT_TRUE(feedback_->Record("sns-2", Bounce(ses_id, "a1@example.test"), 3).ok());
  ReputationRow rep = Reputation();
  EXPECT_EQ(rep.sent, 2u);
  EXPECT_EQ(rep.bounced, 1u);
  EXPECT_EQ(Text("SELECT count(*) FROM suppressions"), "1");
  // The next token for that address is never handed out.
  Exec("UPDATE accounts SET status = 'active'");
  Exec(
      "INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts"
      " WHERE email = 'a1@example.test'");
  auto next = store_->Dequeue("mailroom", 10, "s", absl::Seconds(60));
  ASSERT_TRUE(next.ok());
  EXPECT_TRUE(next->empty());
  EXPECT_EQ(
      Text("SELECT state::TEXT FROM delivery_states WHERE token_id = (SELECT max(id) FROM tokens)"),
      "suppressed");
}

TEST_F(FeedbackStoreTest, ComplaintDeliveryAndTagFallback) {
  std::vector<StoredJob> jobs = SendTo(2);
  FeedbackEvent complaint;
  complaint.type = "Complaint";
  complaint.ses_message_id = absl::StrCat("ses-", jobs[1].id);
  complaint.recipients = {"a2@example.test"};
  complaint.detail = "abuse";
  ASSERT_EQ(*feedback_->Record("sns-c", complaint, 3), FeedbackResult::kRecorded);
  EXPECT_EQ(Text("SELECT reason FROM suppressions WHERE address = 'a2@example.test'"), "complaint");
  // A delivery found by its tags (no message id known): delivered_at set once.
  FeedbackEvent delivery;
  delivery.type = "Delivery";
  delivery.ses_message_id = "unknown-to-us";
  delivery.group = "mailroom";
  delivery.job_id = jobs[0].id;
  ASSERT_EQ(*feedback_->Record("sns-d1", delivery, 3), FeedbackResult::kRecorded);
  ASSERT_EQ(*feedback_->Record("sns-d2", delivery, 3), FeedbackResult::kRecorded);
  EXPECT_EQ(Text(absl::StrCat("SELECT delivered_at IS NOT NULL FROM delivery_states"
                              " WHERE token_id = ", jobs[0].id)),
            "t");
  ReputationRow rep = Reputation();
  EXPECT_EQ(rep.delivered, 1u);
  EXPECT_EQ(rep.complained, 1u);
  // An event for no known delivery still suppresses; counters do not move.
  FeedbackEvent stray = Bounce("nobody-knows", "stray@example.test");
  ASSERT_EQ(*feedback_->Record("sns-s", stray, 3), FeedbackResult::kUnmatched);
  EXPECT_EQ(Text("SELECT reason FROM suppressions WHERE address = 'stray@example.test'"),
            "hard_bounce");
  EXPECT_EQ(Reputation().bounced, 0u);
  // A bounce does not turn a complaint into a bounce.
  ASSERT_TRUE(feedback_->Record("sns-b2", Bounce("x", "a2@example.test"), 3).ok());
  EXPECT_EQ(Text("SELECT reason FROM suppressions WHERE address = 'a2@example.test'"), "complaint");
}

// A job acknowledged SENT without a provider message id is found by its tags alone: a
// complaint about it sets complained_at, counts and suppresses as a message-id match does.
TEST_F(FeedbackStoreTest, AComplaintAboutAJobSentWithoutAMessageIdIsMatchedByItsTags) {
  std::vector<StoredJob> jobs = SendTo(2, /*last_without_id=*/true);
  ASSERT_EQ(jobs.size(), 2u);
  FeedbackEvent complaint;
  complaint.type = "Complaint";
  complaint.group = "mailroom";
  complaint.job_id = jobs[1].id;
  complaint.recipients = {"a2@example.test"};
  complaint.detail = "abuse";
  EXPECT_EQ(*feedback_->Record("sns-tags-c", complaint, 3), FeedbackResult::kRecorded);
  EXPECT_EQ(Text(absl::StrCat("SELECT complained_at IS NOT NULL FROM delivery_states"
                              " WHERE token_id = ", jobs[1].id)),
            "t");
  EXPECT_EQ(Text("SELECT reason FROM suppressions WHERE address = 'a2@example.test'"), "complaint");
  EXPECT_EQ(Reputation().complained, 1u);
  // The same job's bounce, by tags too: bounced_at set and counted once.
  FeedbackEvent bounce = Bounce("", "a2@example.test");
  bounce.group = "mailroom";
  bounce.job_id = jobs[1].id;
  EXPECT_EQ(*feedback_->Record("sns-tags-b", bounce, 3), FeedbackResult::kRecorded);
  EXPECT_EQ(Text(absl::StrCat("SELECT bounce_type FROM delivery_states WHERE token_id = ",
                              jobs[1].id)),
            "Permanent");
  EXPECT_EQ(Reputation().bounced, 1u);
  // Both jobs stay counted once as sent.
  EXPECT_EQ(Text("SELECT sum(n) FROM delivery_counts WHERE state = 'sent'"), "2");
  EXPECT_EQ(Text("SELECT count(*) FROM delivery_states WHERE state = 'sent'"), "2");
  EXPECT_EQ(Reputation().sent, 2u);
}

// An SES event may arrive before the sender's acknowledgement is recorded (SNS is fast, the
// acknowledgement waits for others to share its call): the job is found by its tags (group, job id) while it
// is still leased, and each kind of event still counts once per delivery afterwards.
TEST_F(FeedbackStoreTest, AnEventBeforeTheAcknowledgementIsMatchedByTheJobsTags) {
  Exec("INSERT INTO accounts (email, login) VALUES ('early@example.test', 'early')");
  CollectSignups();
  auto jobs = store_->Dequeue("mailroom", 10, "s", absl::Seconds(60));
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  FeedbackEvent delivery;
  delivery.type = "Delivery";
  delivery.ses_message_id = "ses-early";
  delivery.group = "mailroom";
  delivery.job_id = (*jobs)[0].id;
  EXPECT_EQ(*feedback_->Record("sns-early-1", delivery, 3), FeedbackResult::kRecorded);
  EXPECT_EQ(Reputation().delivered, 1u);
  // The acknowledgement, with that message id, comes afterwards; SES reports the delivery
  // again: not counted twice.
  JobResult sent;
  sent.id = (*jobs)[0].id;
  sent.attempt = (*jobs)[0].attempt;
  sent.kind = JobResult::Kind::kSent;
  sent.provider_message_id = "ses-early";
  auto recorded = store_->Ack("mailroom", "s", {sent});
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_EQ(recorded->size(), 1u);
  EXPECT_EQ(*feedback_->Record("sns-early-2", delivery, 3), FeedbackResult::kRecorded);
  EXPECT_EQ(Reputation().delivered, 1u);
  EXPECT_EQ(Text(absl::StrCat("SELECT (delivered_at IS NOT NULL) || ' ' || state"
                              " FROM delivery_states WHERE token_id = ", (*jobs)[0].id)),
            "true sent");
}

TEST_F(FeedbackStoreTest, TransientBouncesSuppressAtTheLimitWithinSevenDays) {
  SendTo(1);
  FeedbackEvent soft = Bounce("x", "soft@example.test", "Transient");
  ASSERT_TRUE(feedback_->Record("t1", soft, 3).ok());
  ASSERT_TRUE(feedback_->Record("t2", soft, 3).ok());
  EXPECT_EQ(Text("SELECT count(*) FROM suppressions"), "0");
  // An old one does not count.
  Exec(
      "UPDATE soft_bounces SET bounced_at = now() - interval '8 days'"
      " WHERE bounced_at = (SELECT min(bounced_at) FROM soft_bounces)");
  ASSERT_TRUE(feedback_->Record("t3", soft, 3).ok());
  EXPECT_EQ(Text("SELECT count(*) FROM suppressions"), "0");
  ASSERT_TRUE(feedback_->Record("t4", soft, 3).ok());
  EXPECT_EQ(Text("SELECT reason || ' ' || source FROM suppressions"),
            "hard_bounce ses bounce: 3 transient bounces within 7 days General");
  EXPECT_EQ(Reputation().bounced, 0u);  // only permanent bounces count in the rate
}

TEST_F(FeedbackStoreTest, TheWindowLeavesOldHoursOut) {
  SendTo(2);
  Exec("UPDATE reputation_hourly SET hour = hour - interval '3 hours'");
  SendTo(0);
  auto wide = feedback_->Reputation(absl::Hours(4));
  ASSERT_TRUE(wide.ok());
  EXPECT_EQ((*wide)[0].sent, 2u);
  auto narrow = feedback_->Reputation(absl::Hours(2));
  ASSERT_TRUE(narrow.ok());
  EXPECT_EQ((*narrow)[0].sent, 0u);
}

}  // namespace
}  // namespace mailroom
