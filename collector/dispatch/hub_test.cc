// Subscribers, their in-flight accounting and their stream reactors, over a real in-process
// gRPC server (as grpc's health service tests its watch reactors).
#include "collector/dispatch/hub.h"

#include <set>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "common/testing/fake_clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

// Serves Subscribe with the real SubscribeReactor: one Subscriber per stream, added to `hub`,
// named after the request's subscriber_name, on the simulated `clock`. A name starting with
// "observer" makes an observer's subscription (its jobs without token and code).
class SubscribeOnlyService : public v1::Collector::CallbackService {
 public:
  grpc::ServerWriteReactor<v1::SubscribeResponse>* Subscribe(
      grpc::CallbackServerContext*, const v1::SubscribeRequest* req) override {
    auto sub = std::make_shared<Subscriber>(req->subscriber_name(), req->consumer_group(),
                                            req->subscriber_name(),
                                            static_cast<int>(req->max_in_flight()),
                                            absl::StartsWith(req->subscriber_name(), "observer")
                                                ? JobSecrets::kWithheld
                                                : JobSecrets::kIncluded,
                                            &clock);
    auto* reactor = new SubscribeReactor(sub, [this](const std::shared_ptr<Subscriber>& s) {
      hub.Remove(s);
      absl::MutexLock lock(&mu);
      unsent[s->id()] = s->TakeUnsent();
      done.insert(s->id());
    });
    hub.Add(sub);
    v1::SubscribeResponse welcome;
    welcome.set_subscriber_id(sub->id());
    sub->Attach(reactor, std::move(welcome));
    return reactor;
  }

  bool WaitDone(const std::string& id) {
    absl::MutexLock lock(&mu);
    auto gone = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return done.count(id) > 0; };
    return mu.AwaitWithTimeout(absl::Condition(&gone), absl::Seconds(10));
  }

  FakeClock clock{absl::FromUnixSeconds(1700000000)};
  Hub hub;
  absl::Mutex mu;
  std::set<std::string> done ABSL_GUARDED_BY(mu);
  std::map<std::string, std::vector<uint64_t>> unsent ABSL_GUARDED_BY(mu);
};

// A client stream of one subscriber.
struct Stream {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<v1::SubscribeResponse>> reader;
};

v1::SubscribeResponse JobsMessage(std::vector<uint64_t> ids, size_t padding = 0) {
  v1::SubscribeResponse b;
  for (uint64_t id : ids) {
    v1::Job* j = b.add_jobs();
    j->set_job_id(id);
    j->set_email(std::string(padding, 'x'));
  }
  return b;
}

class HubTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    stub_ = v1::Collector::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  }
  void TearDown() override {
    streams_.clear();
    server_->Shutdown();
  }

  // Opens a stream for `name` in `group` and reads its welcome.
  Stream* Open(const std::string& name, const std::string& group, int max_in_flight) {
    auto s = std::make_unique<Stream>();
    v1::SubscribeRequest req;
    req.set_subscriber_name(name);
    req.set_consumer_group(group);
    req.set_max_in_flight(max_in_flight);
    s->reader = stub_->Subscribe(&s->ctx, req);
    v1::SubscribeResponse welcome;
    EXPECT_TRUE(s->reader->Read(&welcome));
    EXPECT_EQ(welcome.subscriber_id(), name);
    streams_.push_back(std::move(s));
    return streams_.back().get();
  }
  // A lease a minute long, from now.
  absl::Time LeaseEnd() { return service_.clock.Now() + absl::Minutes(1); }
  std::shared_ptr<Subscriber> Member(const std::string& group, int want_room) {
    auto m = service_.hub.PickMember(group);
    EXPECT_NE(m, nullptr);
    if (m != nullptr) {
      EXPECT_EQ(m->Room(), want_room);
    }
    return m;
  }

  SubscribeOnlyService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Collector::Stub> stub_;
  std::vector<std::unique_ptr<Stream>> streams_;
};

TEST_F(HubTest, DeliveredJobsCountAsInFlightUntilForgotten) {
  Stream* s = Open("a", "g", 5);
  std::shared_ptr<Subscriber> a = Member("g", 5);
  ASSERT_TRUE(a->Deliver(JobsMessage({1, 2, 3}), LeaseEnd()));
  EXPECT_EQ(a->Room(), 2);
  v1::SubscribeResponse got;
  ASSERT_TRUE(s->reader->Read(&got));
  ASSERT_EQ(got.jobs_size(), 3);
  EXPECT_EQ(got.jobs(2).job_id(), 3u);
  ASSERT_TRUE(a->Deliver(JobsMessage({4, 5}), LeaseEnd()));
  EXPECT_EQ(a->Room(), 0);
  EXPECT_EQ(service_.hub.PickMember("g"), nullptr);  // nobody has room
  EXPECT_TRUE(service_.hub.Forget("g", "a", {1, 2, 99}));
  EXPECT_EQ(a->Room(), 2);
  EXPECT_FALSE(service_.hub.Forget("g", "a", {1, 2}));  // already forgotten
  EXPECT_EQ(a->Forget({3, 4, 5}), 3);
  EXPECT_EQ(a->Room(), 5);
}

// Whatever the caller put in the jobs, an observer's stream never carries a token or a code
// (in the window or in the recovery lane); a sender's carries them as given.
TEST_F(HubTest, AnObserversStreamNeverCarriesATokenOrACode) {
  auto with_secrets = [](std::vector<uint64_t> ids) {
    v1::SubscribeResponse b = JobsMessage(std::move(ids));
    for (v1::Job& j : *b.mutable_jobs()) {
      j.set_token(std::string(86, 'T'));
      j.set_code("54321");
    }
    return b;
  };
  Stream* obs = Open("observer-1", "audit", 1);
  Stream* snd = Open("sender-1", "mailroom", 1);
  std::shared_ptr<Subscriber> observer = Member("audit", 1);
  std::shared_ptr<Subscriber> sender = Member("mailroom", 1);
  EXPECT_EQ(observer->secrets(), JobSecrets::kWithheld);
  EXPECT_EQ(sender->secrets(), JobSecrets::kIncluded);
  ASSERT_TRUE(observer->Deliver(with_secrets({1}), LeaseEnd()));
  ASSERT_TRUE(observer->Deliver(with_secrets({2, 3}), LeaseEnd(), /*lane=*/true));
  ASSERT_TRUE(sender->Deliver(with_secrets({1}), LeaseEnd()));
  for (int message = 0; message < 2; ++message) {
    v1::SubscribeResponse got;
    ASSERT_TRUE(obs->reader->Read(&got));
    ASSERT_GT(got.jobs_size(), 0);
    for (const v1::Job& j : got.jobs()) {
      EXPECT_EQ(j.token(), "") << j.job_id();
      EXPECT_EQ(j.code(), "") << j.job_id();
    }
    EXPECT_EQ(got.SerializeAsString().find("54321"), std::string::npos);
  }
  v1::SubscribeResponse sent;
  ASSERT_TRUE(snd->reader->Read(&sent));
  ASSERT_EQ(sent.jobs_size(), 1);
  EXPECT_EQ(sent.jobs(0).token(), std::string(86, 'T'));
  EXPECT_EQ(sent.jobs(0).code(), "54321");
}

TEST_F(HubTest, AJobsMessageCarriesWhatIsLeftOfItsLeasesWhenItIsWritten) {
  Stream* s = Open("a", "g", 10);
  std::shared_ptr<Subscriber> a = Member("g", 10);
  FakeClock& clock = service_.clock;
  ASSERT_TRUE(a->Deliver(JobsMessage({1}), clock.Now() + absl::Seconds(10)));
  v1::SubscribeResponse got;
  ASSERT_TRUE(s->reader->Read(&got));
  EXPECT_EQ(got.lease_left_ms(), 10000u);
  // Leased 4 s before it was written: 6 s are left, read on the subscriber's clock.
  const absl::Time lease_end = clock.Now() + absl::Seconds(10);
  clock.Advance(absl::Seconds(4));
  ASSERT_TRUE(a->Deliver(JobsMessage({3}), lease_end));
  ASSERT_TRUE(s->reader->Read(&got));
  EXPECT_EQ(got.jobs(0).job_id(), 3u);
  EXPECT_EQ(got.lease_left_ms(), 6000u);
  // Leased long before it could be written (a paused collector): it says so, never 0 (which
  // would read as "the whole lease").
  ASSERT_TRUE(a->Deliver(JobsMessage({2}), clock.Now() - absl::Seconds(5)));
  ASSERT_TRUE(s->reader->Read(&got));
  EXPECT_EQ(got.jobs(0).job_id(), 2u);
  EXPECT_EQ(got.lease_left_ms(), 1u);
}

TEST_F(HubTest, TheRecoveryLaneIsCountedApartFromTheWindow) {
  EXPECT_EQ(RecoveryLane(1), 10);
  EXPECT_EQ(RecoveryLane(100), 10);
  EXPECT_EQ(RecoveryLane(250), 25);
  Stream* s = Open("a", "g", 100);
  std::shared_ptr<Subscriber> a = Member("g", 100);
  EXPECT_EQ(a->LaneRoom(), 10);
  std::vector<uint64_t> window;
  for (uint64_t id = 1; id <= 100; ++id) window.push_back(id);
  ASSERT_TRUE(a->Deliver(JobsMessage(window), LeaseEnd()));
  EXPECT_EQ(a->Room(), 0);
  EXPECT_EQ(a->LaneRoom(), 10);  // a full window leaves the lane alone
  EXPECT_EQ(service_.hub.PickMember("g"), nullptr);
  EXPECT_EQ(service_.hub.PickLaneMember("g"), a);
  ASSERT_TRUE(a->Deliver(JobsMessage({101, 102, 103}), LeaseEnd(), /*lane=*/true));
  EXPECT_EQ(a->Room(), 0);
  EXPECT_EQ(a->LaneRoom(), 7);
  v1::SubscribeResponse got;
  ASSERT_TRUE(s->reader->Read(&got));
  EXPECT_EQ(got.jobs_size(), 100);
  ASSERT_TRUE(s->reader->Read(&got));
  EXPECT_EQ(got.jobs_size(), 3);
  // A lane job's outcome frees lane room only; a window job's, window room only.
  EXPECT_TRUE(service_.hub.Forget("g", "a", {101}));
  EXPECT_EQ(a->Room(), 0);
  EXPECT_EQ(a->LaneRoom(), 8);
  EXPECT_EQ(a->Forget({1, 2, 102}), 3);
  EXPECT_EQ(a->Room(), 2);
  EXPECT_EQ(a->LaneRoom(), 9);
  // A full lane: nobody is picked for it.
  std::vector<uint64_t> lane;
  for (uint64_t id = 201; id <= 209; ++id) lane.push_back(id);
  ASSERT_TRUE(a->Deliver(JobsMessage(lane), LeaseEnd(), /*lane=*/true));
  EXPECT_EQ(a->LaneRoom(), 0);
  EXPECT_EQ(service_.hub.PickLaneMember("g"), nullptr);
  EXPECT_EQ(service_.hub.PickMember("g"), a);
}

TEST_F(HubTest, TheLaneMemberIsTheOneWithTheMostLaneRoom) {
  Open("a", "g", 5);
  Open("b", "g", 300);
  std::shared_ptr<Subscriber> b = Member("g", 300);
  EXPECT_EQ(service_.hub.PickLaneMember("g"), b);  // 30 against 10
  std::vector<uint64_t> ids;
  for (uint64_t id = 1; id <= 25; ++id) ids.push_back(id);
  ASSERT_TRUE(b->Deliver(JobsMessage(ids), LeaseEnd(), /*lane=*/true));
  std::shared_ptr<Subscriber> a = service_.hub.PickLaneMember("g");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->id(), "a");
  EXPECT_EQ(a->LaneRoom(), 10);
  // A finished stream has no lane room.
  a->Finish(grpc::Status::CANCELLED);
  EXPECT_EQ(a->LaneRoom(), 0);
  EXPECT_EQ(service_.hub.PickLaneMember("g"), b);
}

TEST_F(HubTest, ForgetTouchesOnlyTheOwner) {
  Open("a", "g", 10);
  Open("b", "g", 10);
  Open("a", "other", 10);  // the same id in another group
  ASSERT_EQ(service_.hub.Count("g"), 2);
  std::shared_ptr<Subscriber> a;
  for (int i = 0; i < 2 && a == nullptr; ++i) {
    auto m = service_.hub.PickMember("g");
    if (m->id() == "a") a = m;
  }
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->Deliver(JobsMessage({1, 2, 3}), LeaseEnd()));
  // b naming a's jobs, or a's id in another group, frees nothing of a's.
  EXPECT_FALSE(service_.hub.Forget("g", "b", {1, 2, 3}));
  EXPECT_FALSE(service_.hub.Forget("other", "a", {1, 2, 3}));
  EXPECT_FALSE(service_.hub.Forget("nope", "a", {1, 2, 3}));
  EXPECT_EQ(a->Room(), 7);
  // PickMember prefers the member with the most room: b.
  EXPECT_EQ(service_.hub.PickMember("g")->id(), "b");
  EXPECT_TRUE(service_.hub.Forget("g", "a", {2}));
  EXPECT_EQ(a->Room(), 8);
  std::vector<std::string> ids = service_.hub.MemberIds("g");
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()), (std::set<std::string>{"a", "b"}));
  std::vector<std::string> groups = service_.hub.Groups();
  EXPECT_EQ(std::set<std::string>(groups.begin(), groups.end()),
            (std::set<std::string>{"g", "other"}));
}

TEST_F(HubTest, JobsThatNeverReachedACancelledStreamAreUnsent) {
  Stream* s = Open("a", "g", 1000);
  std::shared_ptr<Subscriber> a = Member("g", 1000);
  // The client reads nothing more: the first message's write stays outstanding and the others
  // queue behind it (one write in flight).
  std::set<uint64_t> delivered;
  for (uint64_t b = 0; b < 5; ++b) {
    std::vector<uint64_t> ids = {b * 10 + 1, b * 10 + 2};
    ASSERT_TRUE(a->Deliver(JobsMessage(ids, 1 << 20), LeaseEnd()));
    delivered.insert(ids.begin(), ids.end());
  }
  s->ctx.TryCancel();
  ASSERT_TRUE(service_.WaitDone("a"));
  EXPECT_EQ(service_.hub.Count("g"), 0);
  // The stream is over: nothing more is accepted, and it has no room.
  EXPECT_FALSE(a->Deliver(JobsMessage({100}), LeaseEnd()));
  EXPECT_EQ(a->Room(), 0);
  std::vector<uint64_t> unsent;
  {
    absl::MutexLock lock(&service_.mu);
    unsent = service_.unsent["a"];
  }
  // Every queued message is unsent, each job once; at most the first may have been written.
  std::set<uint64_t> unique(unsent.begin(), unsent.end());
  EXPECT_EQ(unique.size(), unsent.size());
  EXPECT_GE(unsent.size(), delivered.size() - 2);
  for (uint64_t id : unsent) EXPECT_EQ(delivered.count(id), 1u) << id;
  for (uint64_t id : {41u, 42u}) EXPECT_EQ(unique.count(id), 1u) << id;
  EXPECT_TRUE(a->TakeUnsent().empty());  // taken once
}

TEST_F(HubTest, FinishAllEndsEveryStreamWithTheStatus) {
  Stream* s1 = Open("a", "g", 10);
  Stream* s2 = Open("b", "h", 10);
  service_.hub.FinishAll(grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down"));
  v1::SubscribeResponse msg;
  for (Stream* s : {s1, s2}) {
    EXPECT_FALSE(s->reader->Read(&msg));
    EXPECT_EQ(s->reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  }
  ASSERT_TRUE(service_.WaitDone("a"));
  ASSERT_TRUE(service_.WaitDone("b"));
  EXPECT_TRUE(service_.hub.Groups().empty());
}

// A subscription's dequeues carry its budget holder; the first one after the holder is set is
// told the link is not registered yet, the ones after a success that it is. Without a holder
// none is registered.
TEST(SubscriberTest, ItsDequeuesCarryItsBudgetHolderAndWhetherTheLinkIsRegistered) {
  Subscriber plain("sub-1", "mailroom", "a", 10, JobSecrets::kIncluded);
  DequeueRequest q = plain.NextDequeue(5, absl::Seconds(30), /*recoveries_only=*/true);
  EXPECT_EQ(q.group, "mailroom");
  EXPECT_EQ(q.owner, "sub-1");
  EXPECT_EQ(q.limit, 5);
  EXPECT_EQ(q.lease, absl::Seconds(30));
  EXPECT_TRUE(q.recoveries_only);
  EXPECT_EQ(q.holder, "");
  plain.DequeueDone();
  EXPECT_FALSE(plain.NextDequeue(5, absl::Seconds(30), false).holder_registered);

  Subscriber linked("sub-2", "mailroom", "b", 10, JobSecrets::kIncluded);
  linked.SetBudgetHolder("h~0123");
  q = linked.NextDequeue(5, absl::Seconds(30), false);
  EXPECT_EQ(q.holder, "h~0123");
  EXPECT_FALSE(q.holder_registered);
  EXPECT_FALSE(
      linked.NextDequeue(5, absl::Seconds(30), false).holder_registered);  // no success yet
  linked.DequeueDone();
  EXPECT_TRUE(linked.NextDequeue(5, absl::Seconds(30), false).holder_registered);
}

}  // namespace
}  // namespace mailroom
