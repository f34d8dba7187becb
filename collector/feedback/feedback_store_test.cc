// The feedback and reputation SQL (mailroom_record_feedback, reputation_hourly) through
// FeedbackStore, against a throwaway PostgreSQL; one fresh database per test. The jobs it gets
// feedback about are leased and acknowledged through the SQL functions the collector's Store calls.
#include "collector/feedback/feedback_store.h"

#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
    feedback_ = NewPgFeedbackStore(url_);
    Exec("SELECT mailroom_ensure_group('mailroom', true)");
  }
  // Accounts a1..an, their activation jobs leased to "s" and acknowledged SENT with SES ids
  // "ses-<job id>" (an empty id for the last one when `last_without_id`).
  std::vector<testing::Leased> SendTo(int n, bool last_without_id = false) {
    Exec(absl::StrCat("INSERT INTO accounts (email, login) SELECT 'a' || i || '@example.test',"
                      " 'a' || i FROM generate_series(1, ",
                      n, ") i"));
    CollectSignups();
    std::vector<testing::Leased> jobs = Dequeue(n);
    std::vector<std::string> message_ids;
    for (const testing::Leased& j : jobs) message_ids.push_back(absl::StrCat("ses-", j.id));
    if (last_without_id && !message_ids.empty()) message_ids.back().clear();
    EXPECT_EQ(AckSent(jobs, message_ids), static_cast<int64_t>(jobs.size()));
    return jobs;
  }
  static FeedbackEvent Bounce(const std::string& ses_id, const std::string& to,
                              const std::string& type = "Permanent") {
    FeedbackEvent e;
    e.type = "Bounce";
    e.message_ids = {ses_id};
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

  std::unique_ptr<FeedbackStore> feedback_;
};

TEST_F(FeedbackStoreTest, PermanentBounceSuppressesOnceAndCounts) {
  std::vector<testing::Leased> jobs = SendTo(2);
  const std::string ses_id = absl::StrCat("ses-", jobs[0].id);
  auto r = feedback_->Record("sns-1", Bounce(ses_id, "A1@example.test"), 3, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->result, FeedbackResult::kRecorded);
  EXPECT_EQ(
      Text("SELECT reason || ' ' || source FROM suppressions WHERE address = 'a1@example.test'"),
      "hard_bounce ses bounce: Permanent General");
  EXPECT_EQ(Text(absl::StrCat("SELECT bounce_type FROM delivery_states WHERE token_id = ",
                              jobs[0].id)),
            "Permanent");
  // The same SNS message again (SNS delivers at least once): nothing changes.
  auto again = feedback_->Record("sns-1", Bounce(ses_id, "A1@example.test"), 3, {});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->result, FeedbackResult::kDuplicate);
  // Another SNS message about the same bounce counts once per delivery.
  ASSERT_TRUE(feedback_->Record("sns-2", Bounce(ses_id, "a1@example.test"), 3, {}).ok());
  ReputationRow rep = Reputation();
  EXPECT_EQ(rep.sent, 2u);
  EXPECT_EQ(rep.bounced, 1u);
  EXPECT_EQ(Text("SELECT count(*) FROM suppressions"), "1");
  // The next token for that address is never handed out.
  Exec("UPDATE accounts SET status = 'active'");
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts"
       " WHERE email = 'a1@example.test'");
  EXPECT_TRUE(Dequeue(10).empty());
  EXPECT_EQ(
      Text("SELECT state::TEXT FROM delivery_states WHERE token_id = (SELECT max(id) FROM tokens)"),
      "suppressed");
}

TEST_F(FeedbackStoreTest, ComplaintDeliveryAndTagFallback) {
  std::vector<testing::Leased> jobs = SendTo(2);
  FeedbackEvent complaint;
  complaint.type = "Complaint";
  complaint.message_ids = {absl::StrCat("ses-", jobs[1].id)};
  complaint.recipients = {"a2@example.test"};
  complaint.detail = "abuse";
  ASSERT_EQ(feedback_->Record("sns-c", complaint, 3, {})->result, FeedbackResult::kRecorded);
  EXPECT_EQ(Text("SELECT reason FROM suppressions WHERE address = 'a2@example.test'"), "complaint");
  // A delivery found by its tags (no message id known): delivered_at set once.
  FeedbackEvent delivery;
  delivery.type = "Delivery";
  delivery.message_ids = {"unknown-to-us"};
  delivery.group = "mailroom";
  delivery.job_id = jobs[0].id;
  delivery.recipients = {"a1@example.test"};
  ASSERT_EQ(feedback_->Record("sns-d1", delivery, 3, {})->result, FeedbackResult::kRecorded);
  ASSERT_EQ(feedback_->Record("sns-d2", delivery, 3, {})->result, FeedbackResult::kRecorded);
  EXPECT_EQ(Text(absl::StrCat("SELECT delivered_at IS NOT NULL FROM delivery_states"
                              " WHERE token_id = ",
                              jobs[0].id)),
            "t");
  ReputationRow rep = Reputation();
  EXPECT_EQ(rep.delivered, 1u);
  EXPECT_EQ(rep.complained, 1u);
  // A bounce does not turn a complaint into a bounce.
  ASSERT_TRUE(
      feedback_->Record("sns-b2", Bounce(complaint.message_ids[0], "a2@example.test"), 3, {}).ok());
  EXPECT_EQ(Text("SELECT reason FROM suppressions WHERE address = 'a2@example.test'"), "complaint");
}

// A job acknowledged SENT without a provider message id is found by its tags alone: a
// complaint about it sets complained_at, counts and suppresses as a message-id match does.
TEST_F(FeedbackStoreTest, AComplaintAboutAJobSentWithoutAMessageIdIsMatchedByItsTags) {
  std::vector<testing::Leased> jobs = SendTo(2, /*last_without_id=*/true);
  ASSERT_EQ(jobs.size(), 2u);
  FeedbackEvent complaint;
  complaint.type = "Complaint";
  complaint.group = "mailroom";
  complaint.job_id = jobs[1].id;
  complaint.recipients = {"a2@example.test"};
  complaint.detail = "abuse";
  EXPECT_EQ(feedback_->Record("sns-tags-c", complaint, 3, {})->result, FeedbackResult::kRecorded);
  EXPECT_EQ(Text(absl::StrCat("SELECT complained_at IS NOT NULL FROM delivery_states"
                              " WHERE token_id = ",
                              jobs[1].id)),
            "t");
  EXPECT_EQ(Text("SELECT reason FROM suppressions WHERE address = 'a2@example.test'"), "complaint");
  EXPECT_EQ(Reputation().complained, 1u);
  // The same job's bounce, by tags too: bounced_at set and counted once.
  FeedbackEvent bounce = Bounce("", "a2@example.test");
  bounce.group = "mailroom";
  bounce.job_id = jobs[1].id;
  EXPECT_EQ(feedback_->Record("sns-tags-b", bounce, 3, {})->result, FeedbackResult::kRecorded);
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
// acknowledgement waits for others to share its call): the job is found by its tags (group, job id)
// while it is still leased, and each kind of event still counts once per delivery afterwards.
TEST_F(FeedbackStoreTest, AnEventBeforeTheAcknowledgementIsMatchedByTheJobsTags) {
  Exec("INSERT INTO accounts (email, login) VALUES ('early@example.test', 'early')");
  CollectSignups();
  std::vector<testing::Leased> jobs = Dequeue(10);
  ASSERT_EQ(jobs.size(), 1u);
  FeedbackEvent delivery;
  delivery.type = "Delivery";
  delivery.message_ids = {"ses-early"};
  delivery.group = "mailroom";
  delivery.job_id = jobs[0].id;
  delivery.recipients = {"early@example.test"};
  EXPECT_EQ(feedback_->Record("sns-early-1", delivery, 3, {})->result, FeedbackResult::kRecorded);
  EXPECT_EQ(Reputation().delivered, 1u);
  // The acknowledgement, with that message id, comes afterwards; SES reports the delivery
  // again: not counted twice.
  EXPECT_EQ(AckSent(jobs, {"ses-early"}), 1);
  EXPECT_EQ(feedback_->Record("sns-early-2", delivery, 3, {})->result, FeedbackResult::kRecorded);
  EXPECT_EQ(Reputation().delivered, 1u);
  EXPECT_EQ(Text(absl::StrCat("SELECT (delivered_at IS NOT NULL) || ' ' || state"
                              " FROM delivery_states WHERE token_id = ",
                              jobs[0].id)),
            "true sent");
}

TEST_F(FeedbackStoreTest, TransientBouncesSuppressAtTheLimitWithinSevenDays) {
  std::vector<testing::Leased> jobs = SendTo(1);
  FeedbackEvent soft = Bounce(absl::StrCat("ses-", jobs[0].id), "a1@example.test", "Transient");
  ASSERT_TRUE(feedback_->Record("t1", soft, 3, {}).ok());
  ASSERT_TRUE(feedback_->Record("t2", soft, 3, {}).ok());
  EXPECT_EQ(Text("SELECT count(*) FROM suppressions"), "0");
  // An old one does not count.
  Exec("UPDATE soft_bounces SET bounced_at = now() - interval '8 days'"
       " WHERE bounced_at = (SELECT min(bounced_at) FROM soft_bounces)");
  ASSERT_TRUE(feedback_->Record("t3", soft, 3, {}).ok());
  EXPECT_EQ(Text("SELECT count(*) FROM suppressions"), "0");
  ASSERT_TRUE(feedback_->Record("t4", soft, 3, {}).ok());
  EXPECT_EQ(Text("SELECT reason || ' ' || source FROM suppressions"),
            "hard_bounce ses bounce: 3 transient bounces within 7 days General");
  EXPECT_EQ(Reputation().bounced, 0u);  // only permanent bounces count in the rate
}

// An event that names no delivery of ours (a stranger's message id, or a signed message about
// mail someone else sent) suppresses nothing, counts no soft bounce and moves no counter; with
// the operator's opt-in for its provider it suppresses its recipients as before.
TEST_F(FeedbackStoreTest, AnEventForNoDeliverySuppressesNothingUnlessOptedIn) {
  SendTo(1);
  const std::string before = Text("SELECT count(*) || ' ' || sum(sent) FROM reputation_hourly");
  for (const char* type : {"Permanent", "Transient"}) {
    auto r = feedback_->Record(absl::StrCat("stray-", type),
                               Bounce("nobody-knows", "stray@example.test", type), 1, {});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->result, FeedbackResult::kUnmatched);
    EXPECT_EQ(r->unmatched_reason, "no_delivery");
    EXPECT_FALSE(r->suppressed);
  }
  FeedbackEvent complaint = Bounce("nobody-knows", "stray@example.test");
  complaint.type = "Complaint";
  EXPECT_EQ(feedback_->Record("stray-c", complaint, 3, {})->result, FeedbackResult::kUnmatched);
  EXPECT_EQ(Text("SELECT count(*) FROM suppressions"), "0");
  EXPECT_EQ(Text("SELECT count(*) FROM soft_bounces"), "0");
  EXPECT_EQ(Text("SELECT count(*) || ' ' || sum(sent) FROM reputation_hourly"), before);

  FeedbackScope opt_in;
  opt_in.suppress_unmatched = true;
  auto r = feedback_->Record("stray-opt", Bounce("nobody-knows", "Stray@example.test"), 3, opt_in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->result, FeedbackResult::kUnmatched);
  EXPECT_TRUE(r->suppressed);
  EXPECT_EQ(Text("SELECT address || ' ' || reason || ' ' || source FROM suppressions"),
            "stray@example.test hard_bounce ses bounce: Permanent General");
  EXPECT_EQ(Text("SELECT count(*) || ' ' || sum(sent) FROM reputation_hourly"), before);
}

// An event naming a delivery's message id (or its job by tags) reaches it only when the
// delivery's recipient, lower(btrim(address)), is among the event's; and then suppresses that
// recipient only, not the other addresses the event lists.
TEST_F(FeedbackStoreTest, AnEventReachesADeliveryOnlyThroughItsRecipient) {
  std::vector<testing::Leased> jobs = SendTo(2, /*last_without_id=*/true);
  const std::string ses_id = absl::StrCat("ses-", jobs[0].id);
  auto wrong = feedback_->Record("w1", Bounce(ses_id, "victim@example.test"), 3, {});
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  EXPECT_EQ(wrong->result, FeedbackResult::kUnmatched);
  EXPECT_EQ(wrong->unmatched_reason, "recipient");
  FeedbackEvent by_tags = Bounce("", "victim@example.test");
  by_tags.group = "mailroom";
  by_tags.job_id = jobs[1].id;
  auto tags = feedback_->Record("w2", by_tags, 3, {});
  EXPECT_EQ(tags->result, FeedbackResult::kUnmatched);
  EXPECT_EQ(tags->unmatched_reason, "recipient");
  EXPECT_EQ(Text("SELECT count(*) FROM suppressions"), "0");
  EXPECT_EQ(Text("SELECT count(*) FROM delivery_states WHERE bounced_at IS NOT NULL"), "0");
  EXPECT_EQ(Reputation().bounced, 0u);

  FeedbackEvent both = Bounce(ses_id, "  A1@Example.TEST ");
  both.recipients.push_back("victim@example.test");
  EXPECT_EQ(feedback_->Record("w3", both, 3, {})->result, FeedbackResult::kRecorded);
  EXPECT_EQ(Text("SELECT string_agg(address, ',') FROM suppressions"), "a1@example.test");
  EXPECT_EQ(Reputation().bounced, 1u);
}

// Each delivery keeps the transport that sent it: a provider's event reaches what that provider
// sent, what a relay (smtp) sent and what no known provider sent, never another provider's
// delivery, by message id or by tags; the operator's own reports (http) reach every provider's.
TEST_F(FeedbackStoreTest, AProvidersEventReachesOnlyWhatThatProviderSent) {
  Exec("INSERT INTO accounts (email, login) SELECT 'a' || i || '@example.test', 'a' || i"
       " FROM generate_series(1, 3) i");
  CollectSignups();
  std::vector<testing::Leased> jobs = Dequeue(3);
  ASSERT_EQ(jobs.size(), 3u);
  std::vector<std::string> ids, attempts;
  for (const testing::Leased& j : jobs) {
    ids.push_back(absl::StrCat(j.id));
    attempts.push_back(absl::StrCat(j.attempt));
  }
  EXPECT_EQ(Text(absl::StrCat("SELECT count(*) FROM mailroom_ack('mailroom', 's', ARRAY[",
                              absl::StrJoin(ids, ","), "]::bigint[], ARRAY[",
                              absl::StrJoin(attempts, ","),
                              "]::int[], ARRAY['sent', 'sent', 'sent'], ARRAY['', '', ''],"
                              " ARRAY[0, 0, 0], ARRAY[0, 0, 0]::bigint[],"
                              " ARRAY['m-1', 'm-2', 'm-3'], ARRAY['postmark', 'smtp', ''])")),
            "3");
  EXPECT_EQ(Text("SELECT string_agg(coalesce(provider, '-'), ',' ORDER BY token_id)"
                 " FROM deliveries"),
            "postmark,smtp,-");
  auto from = [](const std::string& provider, const std::string& id, const std::string& to) {
    FeedbackEvent e = Bounce(id, to);
    e.provider = provider;
    return e;
  };
  auto other = feedback_->Record("sendgrid:1", from("sendgrid", "m-1", "a1@example.test"), 3, {});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->result, FeedbackResult::kUnmatched);
  EXPECT_EQ(other->unmatched_reason, "provider");
  FeedbackEvent by_tags = from("sendgrid", "", "a1@example.test");
  by_tags.message_ids.clear();
  by_tags.group = "mailroom";
  by_tags.job_id = jobs[0].id;
  auto tags = feedback_->Record("sendgrid:2", by_tags, 3, {});
  EXPECT_EQ(tags->result, FeedbackResult::kUnmatched);
  EXPECT_EQ(tags->unmatched_reason, "provider");
  EXPECT_EQ(Text("SELECT count(*) FROM suppressions"), "0");
  EXPECT_EQ(Text("SELECT count(*) FROM deliveries WHERE bounced_at IS NOT NULL"), "0");

  EXPECT_EQ(
      feedback_->Record("sendgrid:3", from("sendgrid", "m-2", "a2@example.test"), 3, {})->result,
      FeedbackResult::kRecorded);
  EXPECT_EQ(
      feedback_->Record("sendgrid:4", from("sendgrid", "m-3", "a3@example.test"), 3, {})->result,
      FeedbackResult::kRecorded);
  FeedbackEvent complaint = from("http", "m-1", "a1@example.test");
  complaint.type = "Complaint";
  EXPECT_EQ(feedback_->Record("http:5", complaint, 3, {})->result, FeedbackResult::kRecorded);
  EXPECT_EQ(
      feedback_->Record("postmark:6", from("postmark", "m-1", "a1@example.test"), 3, {})->result,
      FeedbackResult::kRecorded);
  EXPECT_EQ(Text("SELECT string_agg(address, ',' ORDER BY address) FROM suppressions"),
            "a1@example.test,a2@example.test,a3@example.test");
  EXPECT_EQ(Text("SELECT count(*) FROM deliveries WHERE bounced_at IS NOT NULL"), "3");
}

// Two groups that sent the same accounts: an event scoped to one group (a report signed with
// that group's secret) that names the other's deliveries, by message id or by tags, changes
// nothing of the other group, even with the opt-in for unmatched events.
TEST_F(FeedbackStoreTest, AScopedEventReachesOnlyItsGroupsDeliveries) {
  Exec("SELECT mailroom_ensure_group('other', true)");
  std::vector<testing::Leased> jobs = SendTo(1);
  // Group "other" sends the same job, with message id "other-<job id>".
  {
    pqxx::work tx(*conn_);
    pqxx::row job = tx.exec1(
        "SELECT job_id, attempt FROM mailroom_dequeue('other', 1, 's2', 60000)");
    tx.exec_params1(
        "SELECT count(*) FROM mailroom_ack('other', 's2', ARRAY[$1::bigint], ARRAY[$2::int],"
        " ARRAY['sent'], ARRAY[''], ARRAY[0], ARRAY[0::bigint], ARRAY['other-' || $1])",
        job[0].as<int64_t>(), job[1].as<int>());
    tx.exec("SELECT mailroom_record_sent('other', 1, '{}', '{}')");
    tx.commit();
    ASSERT_EQ(job[0].as<uint64_t>(), jobs[0].id);
  }
  const std::string other_id = absl::StrCat("other-", jobs[0].id);
  FeedbackScope mailroom_only;
  mailroom_only.group = "mailroom";
  mailroom_only.suppress_unmatched = true;  // ignored for a scoped event
  FeedbackEvent complaint = Bounce(other_id, "a1@example.test");
  complaint.type = "Complaint";
  complaint.provider = "http";
  auto by_id = feedback_->Record("http@mailroom:c1", complaint, 3, mailroom_only);
  ASSERT_TRUE(by_id.ok()) << by_id.status();
  EXPECT_EQ(by_id->result, FeedbackResult::kUnmatched);
  EXPECT_EQ(by_id->unmatched_reason, "other_group");
  EXPECT_FALSE(by_id->suppressed);
  FeedbackEvent by_tags = complaint;
  by_tags.message_ids.clear();
  by_tags.group = "other";
  by_tags.job_id = jobs[0].id;
  auto tags = feedback_->Record("http@mailroom:c2", by_tags, 3, mailroom_only);
  EXPECT_EQ(tags->result, FeedbackResult::kUnmatched);
  EXPECT_EQ(tags->unmatched_reason, "other_group");
  EXPECT_EQ(Text("SELECT count(*) FROM delivery_states WHERE complained_at IS NOT NULL"), "0");
  EXPECT_EQ(Text("SELECT count(*) FROM suppressions"), "0");
  EXPECT_EQ(Text("SELECT coalesce(sum(complained), 0) FROM reputation_hourly"), "0");

  // The same complaint about its own group's delivery is recorded there only.
  FeedbackEvent own = by_tags;
  own.group = "mailroom";
  EXPECT_EQ(feedback_->Record("http@mailroom:c3", own, 3, mailroom_only)->result,
            FeedbackResult::kRecorded);
  EXPECT_EQ(Text("SELECT string_agg(g.name, ',') FROM delivery_states d JOIN consumer_groups g"
                 " ON g.id = d.group_id WHERE d.complained_at IS NOT NULL"),
            "mailroom");
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
