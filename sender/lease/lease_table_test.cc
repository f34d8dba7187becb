// The lease table alone, on simulated time: what a job's lease allows as the clock moves,
// outcomes queued and batched for acknowledgement, renewals. (With the gRPC stream around it:
// subscription_test.)
#include "sender/lease/lease_table.h"

#include <thread>

#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1768478400);

std::vector<v1::Job> Jobs(std::vector<std::pair<uint64_t, uint32_t>> ids_and_attempts) {
  std::vector<v1::Job> jobs;
  for (const auto& [id, attempt] : ids_and_attempts) {
    v1::Job j;
    j.set_job_id(id);
    j.set_attempt(attempt);
    jobs.push_back(j);
  }
  return jobs;
}

OutcomeReport Sent(uint64_t id) { return OutcomeReport::Sent(id, 0, ""); }

class LeaseTableTest : public ::testing::Test {
 protected:
  LeaseTableTest() : clock_(kStart), table_(&clock_) { table_.SetLease(absl::Seconds(60)); }

  FakeClock clock_;
  LeaseTable table_;
};

TEST_F(LeaseTableTest, ReceivedJobsCarryTheirLeaseAndAreOwnedWithAWindowOfThreeQuarters) {
  auto leased = table_.Receive("sub-1", absl::ZeroDuration(), Jobs({{1, 3}, {2, 1}}));
  ASSERT_EQ(leased.size(), 2u);
  EXPECT_EQ(leased[0].job.job_id(), 1u);
  EXPECT_EQ(leased[0].lease.subscriber_id, "sub-1");
  EXPECT_EQ(leased[0].lease.attempt, 3u);
  EXPECT_EQ(leased[1].lease.attempt, 1u);
  EXPECT_EQ(table_.leases(), 2u);
  absl::Duration window = absl::InfiniteDuration();
  EXPECT_EQ(table_.Check(leased[0], &window), LeaseState::kOwned);
  EXPECT_EQ(window, absl::Seconds(45));
  EXPECT_EQ(table_.Check(7), LeaseState::kLost);  // never held
}

TEST_F(LeaseTableTest, AnUnrenewedLeaseWaitsThenIsLostAndForgotten) {
  table_.Receive("sub-1", absl::ZeroDuration(), Jobs({{1, 1}}));
  absl::Duration window;
  clock_.Advance(absl::Seconds(44));  // 16 s left: a 1 s window
  EXPECT_EQ(table_.Check(1, &window), LeaseState::kOwned);
  EXPECT_EQ(window, absl::Seconds(1));
  clock_.Advance(absl::Milliseconds(500));  // 15.5 s left: under the 1 s minimum window
  EXPECT_EQ(table_.Check(1, &window), LeaseState::kWait);
  clock_.Advance(absl::Seconds(1));  // 14.5 s left: less than a quarter of the lease
  EXPECT_EQ(table_.Check(1), LeaseState::kLost);
  EXPECT_EQ(table_.leases(), 0u);
  EXPECT_TRUE(table_.HeldBySubscription().empty());  // not renewed any more
}

TEST_F(LeaseTableTest, WhatIsLeftOfALeaseIsTrustedUpToTheWholeLease) {
  table_.Receive("sub-1", absl::Seconds(20), Jobs({{1, 1}}));
  table_.Receive("sub-1", absl::Seconds(600), Jobs({{2, 1}}));  // more than the lease: 60 s
  absl::Duration window;
  EXPECT_EQ(table_.Check(1, &window), LeaseState::kOwned);
  EXPECT_EQ(window, absl::Seconds(5));  // 20 s less the 15 s quarter
  EXPECT_EQ(table_.Check(2, &window), LeaseState::kOwned);
  EXPECT_EQ(window, absl::Seconds(45));
}

TEST_F(LeaseTableTest, AReportedOutcomeCarriesTheAttemptAndEndsTheLease) {
  table_.Receive("sub-1", absl::ZeroDuration(), Jobs({{1, 3}, {2, 1}}));
  table_.Report(OutcomeReport::Failed(1, "bad address", true));
  table_.Report(Sent(9));  // not held: dropped
  EXPECT_EQ(table_.leases(), 1u);
  EXPECT_EQ(table_.Check(1), LeaseState::kLost);
  EXPECT_EQ(table_.pending_acks(), 1u);
  auto batch = table_.NextBatch(1, absl::ZeroDuration());
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->subscriber_id, "sub-1");
  ASSERT_EQ(batch->outcomes.size(), 1u);
  EXPECT_EQ(batch->outcomes[0].job_id(), 1u);
  EXPECT_EQ(batch->outcomes[0].attempt(), 3u);
  EXPECT_EQ(batch->outcomes[0].outcome(), v1::OUTCOME_FAILED);
  EXPECT_TRUE(batch->outcomes[0].suppress_recipient());
  EXPECT_EQ(table_.pending_acks(), 1u);  // in flight
  table_.Recorded(*batch);
  EXPECT_EQ(table_.pending_acks(), 0u);
  EXPECT_TRUE(table_.AwaitAcknowledged(absl::ZeroDuration()));
}

TEST_F(LeaseTableTest, ABatchHoldsOneSubscriptionsOutcomesAndFailedOnesComeBackInFront) {
  table_.Receive("sub-1", absl::ZeroDuration(), Jobs({{1, 1}, {2, 1}}));
  table_.Receive("sub-2", absl::ZeroDuration(), Jobs({{3, 1}}));
  table_.Report(Sent(1));
  table_.Report(Sent(3));
  table_.Report(Sent(2));
  auto first = table_.NextBatch(3, absl::ZeroDuration());
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->subscriber_id, "sub-1");
  ASSERT_EQ(first->outcomes.size(), 2u);
  EXPECT_EQ(first->outcomes[1].job_id(), 2u);
  EXPECT_EQ(table_.pending_acks(), 3u);
  table_.Returned(*std::move(first));  // not answered: tried again first
  auto again = table_.NextBatch(3, absl::ZeroDuration());
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->subscriber_id, "sub-1");
  EXPECT_EQ(again->outcomes.size(), 2u);
  table_.Recorded(*again);
  auto second = table_.NextBatch(3, absl::ZeroDuration());
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->subscriber_id, "sub-2");
  EXPECT_EQ(second->outcomes.size(), 1u);
}

TEST_F(LeaseTableTest, OutcomesOlderThanTheStallLimitMeanWait) {
  table_.Receive("sub-1", absl::ZeroDuration(), Jobs({{1, 1}, {2, 1}}));
  table_.Report(Sent(1));
  clock_.Advance(absl::Seconds(2));  // exactly the 2 s limit: not yet
  EXPECT_EQ(table_.Check(2), LeaseState::kOwned);
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_EQ(table_.Check(2), LeaseState::kWait);
  auto batch = table_.NextBatch(1, absl::ZeroDuration());  // in flight, still unrecorded
  EXPECT_EQ(table_.Check(2), LeaseState::kWait);
  table_.Recorded(*batch);
  EXPECT_EQ(table_.Check(2), LeaseState::kOwned);
}

TEST_F(LeaseTableTest, RenewalPushesDeadlinesOnAndForgetsTheLostOnes) {
  table_.Receive("sub-1", absl::ZeroDuration(), Jobs({{1, 1}, {2, 2}}));
  table_.Receive("sub-2", absl::ZeroDuration(), Jobs({{3, 1}}));
  auto held = table_.HeldBySubscription();
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held["sub-1"], (std::vector<std::pair<uint64_t, uint32_t>>{{1, 1}, {2, 2}}));
  clock_.Advance(absl::Seconds(20));
  const std::vector<uint64_t> ids = {1, 2, 3};  // 3 is another subscription's: untouched
  EXPECT_EQ(table_.ApplyRenewal("sub-1", ids, {2}, clock_.Now()), std::vector<uint64_t>{2});
  EXPECT_EQ(table_.Check(2), LeaseState::kLost);
  clock_.Advance(absl::Seconds(40));  // 60 s after arrival, 40 s after the renewal
  absl::Duration window;
  EXPECT_EQ(table_.Check(1, &window), LeaseState::kOwned);
  EXPECT_EQ(window, absl::Seconds(5));
  EXPECT_EQ(table_.Check(3), LeaseState::kLost);  // not renewed: ran out
}

// The collector handed a job out again before it recorded the outcome sent for it (it crashed,
// came back after the lease ran out and dequeued the job again): the job is not sent again and
// its outcome goes under the new lease, whether it was still queued, in flight or ignored.
TEST_F(LeaseTableTest, AJobHandedOutAgainWhileItsOutcomeIsQueuedIsNotSentAgain) {
  table_.Receive("sub-1", absl::ZeroDuration(), Jobs({{1, 1}, {2, 1}}));
  table_.Report(Sent(1));
  auto leased = table_.Receive("sub-2", absl::ZeroDuration(), Jobs({{1, 2}, {3, 1}}));
  ASSERT_EQ(leased.size(), 1u);
  EXPECT_EQ(leased[0].job.job_id(), 3u);
  EXPECT_EQ(table_.received_again(), 1u);
  EXPECT_EQ(table_.pending_acks(), 1u);
  auto batch = table_.NextBatch(1, absl::ZeroDuration());
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->subscriber_id, "sub-2");
  ASSERT_EQ(batch->outcomes.size(), 1u);
  EXPECT_EQ(batch->outcomes[0].job_id(), 1u);
  EXPECT_EQ(batch->outcomes[0].attempt(), 2u);
  EXPECT_EQ(batch->outcomes[0].outcome(), v1::OUTCOME_SENT);
}

TEST_F(LeaseTableTest, AJobHandedOutAgainWhileItsOutcomeIsInFlightIsReportedUnderTheNewLease) {
  table_.Receive("sub-1", absl::ZeroDuration(), Jobs({{1, 1}, {2, 1}}));
  table_.Report(OutcomeReport::Failed(1, "bad address"));
  table_.Report(Sent(2));
  auto first = table_.NextBatch(2, absl::ZeroDuration());
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->outcomes.size(), 2u);
  EXPECT_TRUE(table_.Receive("sub-2", absl::ZeroDuration(), Jobs({{1, 2}, {2, 2}})).empty());
  // The old lease's call fails: both go back, under their new lease.
  table_.Returned(*std::move(first));
  auto second = table_.NextBatch(2, absl::ZeroDuration());
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->subscriber_id, "sub-2");
  ASSERT_EQ(second->outcomes.size(), 2u);
  EXPECT_EQ(second->outcomes[0].attempt(), 2u);
  EXPECT_EQ(second->outcomes[0].outcome(), v1::OUTCOME_FAILED);
  EXPECT_EQ(second->outcomes[1].attempt(), 2u);
  // Received a third time while in flight, and the collector ignores the second lease's call.
  EXPECT_TRUE(table_.Receive("sub-3", absl::ZeroDuration(), Jobs({{2, 3}})).empty());
  const std::vector<uint64_t> ignored = {1, 2};
  table_.Recorded(*second, ignored);
  auto third = table_.NextBatch(1, absl::ZeroDuration());
  ASSERT_TRUE(third.has_value());
  EXPECT_EQ(third->subscriber_id, "sub-3");
  ASSERT_EQ(third->outcomes.size(), 1u);
  EXPECT_EQ(third->outcomes[0].job_id(), 2u);
  EXPECT_EQ(third->outcomes[0].attempt(), 3u);
  table_.Recorded(*third);
  EXPECT_EQ(table_.pending_acks(), 0u);
  // Job 1's ignored outcome is kept: handed out once more, it is reported, not sent.
  EXPECT_TRUE(table_.Receive("sub-4", absl::ZeroDuration(), Jobs({{1, 4}})).empty());
  auto fourth = table_.NextBatch(1, absl::ZeroDuration());
  ASSERT_TRUE(fourth.has_value());
  EXPECT_EQ(fourth->subscriber_id, "sub-4");
  EXPECT_EQ(fourth->outcomes[0].attempt(), 4u);
  EXPECT_EQ(fourth->outcomes[0].reason(), "bad address");
  EXPECT_EQ(table_.received_again(), 4u);
}

// A RETRY still unrecorded when its job comes back and is sent: the RETRY's answer neither
// forgets the SENT nor keeps the RETRY, and a third hand-out reports the SENT.
TEST_F(LeaseTableTest, AHandedBackOutcomeNeverStandsInForTheFinalOne) {
  table_.Receive("sub-1", absl::ZeroDuration(), Jobs({{1, 1}}));
  table_.Report(OutcomeReport::Retry(1, "451", absl::Seconds(1)));
  auto retry = table_.NextBatch(1, absl::ZeroDuration());
  ASSERT_TRUE(retry.has_value());
  ASSERT_EQ(table_.Receive("sub-2", absl::ZeroDuration(), Jobs({{1, 2}})).size(), 1u);
  table_.Report(Sent(1));
  table_.Recorded(*retry, std::vector<uint64_t>{1});
  EXPECT_TRUE(table_.Receive("sub-3", absl::ZeroDuration(), Jobs({{1, 3}})).empty());
  auto sent = table_.NextBatch(1, absl::ZeroDuration());
  ASSERT_TRUE(sent.has_value());
  EXPECT_EQ(sent->subscriber_id, "sub-3");
  ASSERT_EQ(sent->outcomes.size(), 1u);
  EXPECT_EQ(sent->outcomes[0].outcome(), v1::OUTCOME_SENT);
  EXPECT_EQ(sent->outcomes[0].attempt(), 3u);
}

TEST_F(LeaseTableTest, RecordedHandedBackAndLongIgnoredOutcomesAreNotKept) {
  table_.Receive("sub-1", absl::ZeroDuration(), Jobs({{1, 1}, {2, 1}, {3, 1}}));
  table_.Report(Sent(1));
  table_.Report(OutcomeReport::Retry(2, "451", absl::Seconds(1)));
  table_.Report(Sent(3));
  auto batch = table_.NextBatch(3, absl::ZeroDuration());
  ASSERT_TRUE(batch.has_value());
  const std::vector<uint64_t> ignored = {2, 3};  // 1 recorded; 2 handed back; 3 ignored
  table_.Recorded(*batch, ignored);
  // A recorded job and a handed-back one are sent when they come back.
  EXPECT_EQ(table_.Receive("sub-2", absl::ZeroDuration(), Jobs({{1, 2}, {2, 2}})).size(), 2u);
  clock_.Advance(LeaseTable::kUnrecordedKept + absl::Seconds(1));
  table_.Report(Sent(1));
  auto next = table_.NextBatch(1, absl::ZeroDuration());
  ASSERT_TRUE(next.has_value());
  table_.Recorded(*next, std::vector<uint64_t>{1});  // prunes what was ignored too long ago
  EXPECT_EQ(table_.Receive("sub-3", absl::ZeroDuration(), Jobs({{3, 2}})).size(), 1u);
  EXPECT_TRUE(table_.Receive("sub-3", absl::ZeroDuration(), Jobs({{1, 3}})).empty());
  EXPECT_EQ(table_.received_again(), 1u);
}

TEST_F(LeaseTableTest, CloseEndsAWaitForOutcomes) {
  std::optional<LeaseTable::Batch> batch = LeaseTable::Batch{};
  std::thread acker([&] { batch = table_.NextBatch(1, absl::ZeroDuration()); });
  // The acknowledger waits on the simulated clock, which does not move: only Close ends it.
  while (clock_.waiting() < 1) absl::SleepFor(absl::Microseconds(200));
  table_.Close();
  acker.join();
  EXPECT_FALSE(batch.has_value());
}

}  // namespace
}  // namespace mailroom
