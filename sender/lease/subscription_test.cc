// The subscription and its lease table against an in-process gRPC Collector (ServerBuilder
// without a port, InProcessChannel) whose answers each test scripts, on simulated time: leases
// run out, stall and renew when the FakeClock says so. (The table alone: lease_table_test;
// the real collector with PostgreSQL: integration_tests/e2e_test and fault_test.)
#include "sender/lease/subscription.h"

#include <atomic>
#include <functional>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/testing/fake_clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1768478400);

// A collector that hands out the jobs a test queues and records what it is told.
class FakeCollector final : public v1::Collector::Service {
 public:
  grpc::Status Subscribe(grpc::ServerContext* ctx, const v1::SubscribeRequest* req,
                         grpc::ServerWriter<v1::SubscribeResponse>* writer) override {
    v1::SubscribeResponse hello;
    hello.set_subscriber_id("sub-1");
    hello.set_lease_duration_ms(60000);
    {
      absl::MutexLock lock(&mu_);
      group_ = req->consumer_group();
      max_in_flight_ = req->max_in_flight();
      budget_holder_ = req->has_budget_holder() ? req->budget_holder() : "(unset)";
    }
    if (!writer->Write(hello)) return grpc::Status::OK;
    while (!ctx->IsCancelled()) {
      std::vector<v1::Job> jobs;
      {
        absl::MutexLock lock(&mu_);
        auto have = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !to_send_.empty(); };
        // The stream's end is not a mutex condition: look at it every few milliseconds.
        mu_.AwaitWithTimeout(absl::Condition(&have), absl::Milliseconds(5));
        jobs.swap(to_send_);
      }
      if (jobs.empty()) continue;
      v1::SubscribeResponse resp;
      for (auto& j : jobs) *resp.add_jobs() = j;
      {
        absl::MutexLock lock(&mu_);
        resp.set_lease_left_ms(message_lease_left_ms_);
      }
      if (!writer->Write(resp)) break;
    }
    return grpc::Status::OK;
  }
  grpc::Status Acknowledge(grpc::ServerContext*, const v1::AcknowledgeRequest* req,
                           v1::AcknowledgeResponse* resp) override {
    absl::MutexLock lock(&mu_);
    auto open = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return acks_open_; };
    mu_.Await(absl::Condition(&open));
    acks_.push_back(*req);
    resp->set_recorded(req->outcomes_size());
    return grpc::Status::OK;
  }
  grpc::Status RenewLeases(grpc::ServerContext*, const v1::RenewLeasesRequest* req,
                           v1::RenewLeasesResponse* resp) override {
    absl::MutexLock lock(&mu_);
    ++renewals_;
    if (!renew_ok_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "database down");
    for (uint64_t id : req->job_ids()) {
      if (lost_.count(id) > 0) resp->add_lost_job_ids(id);
    }
    return grpc::Status::OK;
  }
  grpc::Status GetUsage(grpc::ServerContext*, const v1::GetUsageRequest* req,
                        v1::GetUsageResponse* resp) override {
    if (req->consumer_group() != "mailroom") {
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "not your group");
    }
    resp->set_month("2026-01");
    resp->set_sent(42);
    resp->set_cost_micros(4200);
    return grpc::Status::OK;
  }

  void Queue(std::vector<v1::Job> jobs) {
    absl::MutexLock lock(&mu_);
    for (auto& j : jobs) to_send_.push_back(std::move(j));
  }

  absl::Mutex mu_;
  std::vector<v1::Job> to_send_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::AcknowledgeRequest> acks_ ABSL_GUARDED_BY(mu_);
  bool acks_open_ ABSL_GUARDED_BY(mu_) = true;
  bool renew_ok_ ABSL_GUARDED_BY(mu_) = true;
  uint32_t message_lease_left_ms_ ABSL_GUARDED_BY(mu_) = 0;  // what each jobs message says is left
  std::set<uint64_t> lost_ ABSL_GUARDED_BY(mu_);
  int renewals_ ABSL_GUARDED_BY(mu_) = 0;
  std::string group_ ABSL_GUARDED_BY(mu_);
  uint32_t max_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::string budget_holder_ ABSL_GUARDED_BY(mu_);
};

v1::Job Job(uint64_t id, uint32_t attempt = 1) {
  v1::Job j;
  j.set_job_id(id);
  j.set_attempt(attempt);
  return j;
}

// Records the jobs the subscription hands out and those it reports lost.
class RecordingSink : public JobSink {
 public:
  void Submit(std::vector<LeasedJob> jobs) override {
    absl::MutexLock lock(&mu);
    for (auto& j : jobs) received.push_back(j.job.job_id());
  }
  void Drop(const std::vector<uint64_t>& ids) override {
    absl::MutexLock lock(&mu);
    lost.insert(lost.end(), ids.begin(), ids.end());
  }

  absl::Mutex mu;
  std::vector<uint64_t> received ABSL_GUARDED_BY(mu);
  std::vector<uint64_t> lost ABSL_GUARDED_BY(mu);
};

class SubscriptionTest : public ::testing::Test {
 protected:
  SubscriptionTest() : clock_(kStart) {
    grpc::ServerBuilder b;
    b.RegisterService(&collector_);
    server_ = b.BuildAndStart();
  }
  ~SubscriptionTest() override {
    {
      absl::MutexLock lock(&collector_.mu_);
      collector_.acks_open_ = true;
    }
    if (sub_ != nullptr) sub_->Stop();
    server_->Shutdown();
  }

  // No gathering of outcomes unless asked: the clock is simulated and stands still.
  void StartSubscription(std::string group = "mailroom",
                         absl::Duration ack_delay = absl::ZeroDuration()) {
    Subscription::Options o;
    o.group = std::move(group);
    o.ack_delay = ack_delay;
    o.max_in_flight = 7;
    o.name = "test";
    o.budget_holder = "test-0123456789ab";
    o.clock = &clock_;
    o.channel = server_->InProcessChannel(grpc::ChannelArguments());
    leases_ = std::make_unique<LeaseTable>(&clock_);
    o.leases = leases_.get();
    sub_ = std::make_unique<Subscription>(o);
    sub_->Start();
    sub_->StartReceiving(&sink_);
  }

  bool Eventually(const std::function<bool()>& pred) {
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    while (!pred()) {
      if (absl::Now() > give_up) return false;
      absl::SleepFor(absl::Microseconds(200));
    }
    return true;
  }
  bool Received(size_t n) {
    return Eventually([&] {
      absl::MutexLock lock(&sink_.mu);
      return sink_.received.size() >= n;
    });
  }
  size_t Acked() {
    absl::MutexLock lock(&collector_.mu_);
    size_t n = 0;
    for (const auto& a : collector_.acks_) n += a.outcomes_size();
    return n;
  }
  OutcomeReport Sent(uint64_t id) { return OutcomeReport::Sent(id, 0, ""); }
  // Usage with simulated time moving while it waits: a call that does not get through (a slow
  // machine's 2 s real deadline) is retried after its backoff and, past `timeout`, gives up,
  // instead of waiting forever on a clock that stands still.
  absl::StatusOr<v1::GetUsageResponse> UsageWhileTimeMoves(absl::Duration timeout) {
    std::atomic<bool> done{false};
    std::thread ticker([&] {
      while (!done) {
        clock_.Advance(absl::Milliseconds(10));
        absl::SleepFor(absl::Milliseconds(5));
      }
    });
    auto usage = sub_->Usage(timeout);
    done = true;
    ticker.join();
    return usage;
  }

  FakeClock clock_;
  FakeCollector collector_;
  std::unique_ptr<grpc::Server> server_;
  RecordingSink sink_;
  std::unique_ptr<LeaseTable> leases_;  // the table the subscription and a test share
  std::unique_ptr<Subscription> sub_;
};

TEST_F(SubscriptionTest, JobsArriveAndOutcomesAreAcknowledgedUnderTheirLease) {
  collector_.Queue({Job(1, 3), Job(2)});
  StartSubscription();
  ASSERT_TRUE(Received(2));
  ASSERT_TRUE(Eventually([&] { return sub_->connected(); }));
  EXPECT_EQ(leases_->lease(), absl::Seconds(60));
  EXPECT_EQ(leases_->leases(), 2u);
  EXPECT_EQ(leases_->Check(1), LeaseState::kOwned);
  leases_->Report(Sent(1));
  ASSERT_TRUE(leases_->AwaitAcknowledged(absl::Seconds(10)));
  ASSERT_EQ(Acked(), 1u);
  {
    absl::MutexLock lock(&collector_.mu_);
    const auto& ack = collector_.acks_[0];
    EXPECT_EQ(ack.subscriber_id(), "sub-1");
    EXPECT_EQ(ack.consumer_group(), "mailroom");
    EXPECT_EQ(ack.outcomes(0).job_id(), 1u);
    EXPECT_EQ(ack.outcomes(0).attempt(), 3u);  // the attempt the job came with
    EXPECT_EQ(collector_.group_, "mailroom");
    EXPECT_EQ(collector_.max_in_flight_, 7u);
    EXPECT_EQ(collector_.budget_holder_, "test-0123456789ab");  // its grants' holder
  }
  EXPECT_EQ(leases_->leases(), 1u);
  EXPECT_EQ(leases_->pending_acks(), 0u);
  // A reported job is no longer ours: a second outcome is dropped, not sent.
  EXPECT_EQ(leases_->Check(1), LeaseState::kLost);
}

TEST_F(SubscriptionTest, OutcomesGatherForOneAcknowledgementUntilHalfTheWindowOrTheDelay) {
  collector_.Queue({Job(1), Job(2), Job(3), Job(4)});
  StartSubscription("mailroom", absl::Milliseconds(5));
  ASSERT_TRUE(Received(4));
  // Half of max_in_flight 7 is 3: the first three outcomes share one call, whatever the
  // timing of their reports (the simulated clock does not move).
  leases_->Report(Sent(1));
  leases_->Report(Sent(2));
  leases_->Report(Sent(3));
  ASSERT_TRUE(Eventually([&] { return Acked() == 3; }));
  {
    absl::MutexLock lock(&collector_.mu_);
    ASSERT_EQ(collector_.acks_.size(), 1u);
    EXPECT_EQ(collector_.acks_[0].outcomes_size(), 3);
  }
  // A lone outcome goes out once the delay has passed (simulated time moves in steps of the
  // delay until it has).
  leases_->Report(Sent(4));
  ASSERT_TRUE(Eventually([&] {
    clock_.Advance(absl::Milliseconds(5));
    return Acked() == 4;
  }));
  absl::MutexLock lock(&collector_.mu_);
  ASSERT_EQ(collector_.acks_.size(), 2u);
  EXPECT_EQ(collector_.acks_[1].outcomes(0).job_id(), 4u);
}

TEST_F(SubscriptionTest, ALeaseThatCannotBeRenewedRunsOutOnSimulatedTime) {
  {
    absl::MutexLock lock(&collector_.mu_);
    collector_.renew_ok_ = false;  // the collector cannot vouch for our leases
  }
  collector_.Queue({Job(1)});
  StartSubscription();
  ASSERT_TRUE(Received(1));
  absl::Duration window;
  EXPECT_EQ(leases_->Check(1, &window), LeaseState::kOwned);
  EXPECT_EQ(window, absl::Seconds(45));  // 60 s left, less a quarter to report the outcome
  clock_.Advance(absl::Seconds(44));     // 16 s left of 60: still enough for a 1 s send
  EXPECT_EQ(leases_->Check(1, &window), LeaseState::kOwned);
  // A send started now times out after 1 s at most, however long MAILROOM_SEND_TIMEOUT_MS.
  EXPECT_EQ(window, absl::Seconds(1));
  clock_.Advance(absl::Milliseconds(500));  // 15.5 s left: too little for a send to start
  EXPECT_EQ(leases_->Check(1, &window), LeaseState::kWait);
  clock_.Advance(absl::Milliseconds(1500));  // 14 s left: less than a quarter of the lease
  EXPECT_EQ(leases_->Check(1), LeaseState::kLost);
  // Forgotten: neither renewed nor reported any more.
  EXPECT_EQ(leases_->leases(), 0u);
}

TEST_F(SubscriptionTest, AJobsMessageThatWaitedInTheCollectorIsTrustedOnlyForWhatIsLeftOfItsLease) {
  {
    absl::MutexLock lock(&collector_.mu_);
    collector_.renew_ok_ = false;
    collector_.message_lease_left_ms_ = 20000;  // 40 s of the 60 s lease went by before the write
  }
  collector_.Queue({Job(1)});
  StartSubscription();
  ASSERT_TRUE(Received(1));
  EXPECT_EQ(leases_->Check(1), LeaseState::kOwned);
  clock_.Advance(absl::Seconds(6));  // 14 s left: less than a quarter of the lease
  EXPECT_EQ(leases_->Check(1), LeaseState::kLost);
}

TEST_F(SubscriptionTest, RenewalKeepsLeasesAndReportsTheLostOnes) {
  {
    absl::MutexLock lock(&collector_.mu_);
    collector_.lost_ = {2};
  }
  collector_.Queue({Job(1), Job(2)});
  StartSubscription();
  ASSERT_TRUE(Received(2));
  // Renewals run every third of the lease, on simulated time: once the renewer sleeps (the only
  // thread waiting on the clock while the stream is up), else a renewer that starts late would
  // count its third from after the advance.
  ASSERT_TRUE(Eventually([&] { return clock_.waiting() >= 1; }));
  clock_.Advance(absl::Seconds(20));
  ASSERT_TRUE(Eventually([&] {
    absl::MutexLock lock(&sink_.mu);
    return sink_.lost == std::vector<uint64_t>{2};
  })) << "lost: "
      <<
      [&] {
        absl::MutexLock lock(&sink_.mu);
        return absl::StrJoin(sink_.lost, ",");
      }()
      << " renewals: " <<
      [&] {
        absl::MutexLock lock(&collector_.mu_);
        return collector_.renewals_;
      }()
      << " waiting: " << clock_.waiting();
  ASSERT_TRUE(Eventually([&] { return leases_->leases() == 1u; }));
  // 60 s after arrival job 1 is still ours: the renewal at 20 s pushed its deadline to 80 s.
  clock_.Advance(absl::Seconds(40));
  EXPECT_EQ(leases_->Check(1), LeaseState::kOwned);
  EXPECT_EQ(leases_->Check(2), LeaseState::kLost);
}

TEST_F(SubscriptionTest, OutcomesNotGettingThroughMeanWait) {
  collector_.Queue({Job(1), Job(2)});
  StartSubscription();
  ASSERT_TRUE(Received(2));
  {
    absl::MutexLock lock(&collector_.mu_);
    collector_.acks_open_ = false;  // the collector takes the call but does not answer
  }
  leases_->Report(Sent(1));
  ASSERT_TRUE(Eventually([&] { return leases_->pending_acks() == 1u; }));
  EXPECT_EQ(leases_->Check(2), LeaseState::kOwned);
  clock_.Advance(absl::Seconds(3));  // the outcome is older than the 2 s stall limit
  EXPECT_EQ(leases_->Check(2), LeaseState::kWait);
  {
    absl::MutexLock lock(&collector_.mu_);
    collector_.acks_open_ = true;
  }
  ASSERT_TRUE(leases_->AwaitAcknowledged(absl::Seconds(10)));
  EXPECT_EQ(leases_->Check(2), LeaseState::kOwned);
}

TEST_F(SubscriptionTest, UsageIsTheCollectorsAnswerAndRefusalsEndAtOnce) {
  StartSubscription();
  auto usage = UsageWhileTimeMoves(absl::Seconds(30));
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->month(), "2026-01");
  EXPECT_EQ(usage->sent(), 42u);
  sub_->Stop();
  sub_.reset();
  StartSubscription("audit");
  auto refused = UsageWhileTimeMoves(absl::Seconds(30));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace mailroom
