// The Collector service over an in-process gRPC channel, with a fake Store: authentication and
// scopes, request validation, per-outcome rejections, and the lease identity (subscriber id +
// attempt) it passes to the store.
#include "collector/api/service.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "collector/store/testing/fake_store.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using ::testing::ElementsAre;
using testing::FakeStore;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kKey[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
constexpr char kSubscriber[] = "subscriber-token-0123456789";     // mailroom: subscriber
constexpr char kOperator[] = "operator-token-0123456789";         // mailroom: operator
constexpr char kOther[] = "other-group-token-0123456789";         // other: subscriber
constexpr char kAdmin[] = "admin-operator-token-0123456789";      // *: operator
constexpr char kSecond[] = "second-subscriber-token-0123456789";  // mailroom: subscriber
// mailroom+other: subscriber, every group of the fake store (none unless a test sets them)
// that a sender uses. Not `*`: a sender of `*` serves every group, and no observer could
// subscribe beside it.
constexpr char kEvery[] = "every-group-subscriber-0123456789";
constexpr char kObserver[] = "audit-observer-token-0123456789";  // audit: observer
// mailroom+audit: observer. A collector refuses to start with it beside the senders of
// mailroom (CheckObserversApart); here it stands for a credential the service gets otherwise.
constexpr char kWatcher[] = "both-groups-observer-0123456789";
constexpr char kSeesAll[] = "every-group-observer-0123456789";  // *: observer

// A LISTEN connection that never notifies: a running dispatcher then dequeues only when the
// service kicks it (a subscription, an acknowledgement).
class QuietListener : public NotificationListener {
 public:
  QuietListener() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~QuietListener() override { close(fd_); }
  int fd() override { return fd_; }
  absl::StatusOr<int> TakeNotifications() override { return 0; }
  absl::Status Ping() override { return absl::OkStatus(); }

 private:
  const int fd_;
};

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto creds = ParseCredentials(
        {absl::StrCat(kSubscriber, "@mailroom:subscriber"),
         absl::StrCat(kOperator, "@mailroom+audit:operator"),
         absl::StrCat(kOther, "@other:subscriber"), absl::StrCat(kAdmin, "@*:operator"),
         absl::StrCat(kSecond, "@mailroom:subscriber"),
         absl::StrCat(kEvery, "@mailroom+other:subscriber"),
         absl::StrCat(kObserver, "@audit:observer"),
         absl::StrCat(kWatcher, "@mailroom+audit:observer"), absl::StrCat(kSeesAll, "@*:observer")},
        "MAILROOM_SUBSCRIBER_TOKENS");
    ASSERT_TRUE(creds.ok()) << creds.status();
    auth_ = std::make_unique<Authenticator>(*creds, false);
    // The dispatcher's loop is not run (unless run_dispatcher_): the service only queues kicks
    // and departures for it.
    dispatcher_ = std::make_unique<Dispatcher>(
        DispatcherOptions{}, &store_, &hub_, *ParseSigningKey(kKey), &metrics_, [](bool) {},
        RealClock::Get(),
        [](const std::string&) -> absl::StatusOr<std::unique_ptr<NotificationListener>> {
          return std::make_unique<QuietListener>();
        });
    if (run_dispatcher_) loop_ = std::thread([this] { dispatcher_->Run(); });
    ServiceLimits limits;
    limits.lease = absl::Seconds(30);
    limits.max_cost_micros = 5000;
    limits.max_in_flight_cap = 50;
    service_ = std::make_unique<CollectorService>(&store_, &hub_, dispatcher_.get(), auth_.get(),
                                                  &metrics_, limits);
    service_->SetOperatorStore(&store_);  // the fake is both stores
    grpc::ServerBuilder builder;
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    stub_ = v1::Collector::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  }
  void TearDown() override {
    hub_.FinishAll(grpc::Status::CANCELLED);
    server_->Shutdown();
    if (loop_.joinable()) {
      dispatcher_->Stop();
      loop_.join();
    }
  }

  std::unique_ptr<grpc::ClientContext> Ctx(const std::string& bearer) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    if (!bearer.empty()) ctx->AddMetadata("authorization", "Bearer " + bearer);
    return ctx;
  }
  grpc::Status Ack(const std::string& bearer, const v1::AcknowledgeRequest& req,
                   v1::AcknowledgeResponse* resp) {
    return stub_->Acknowledge(Ctx(bearer).get(), req, resp);
  }
  // Subscribe's status when it ends at once (an error), or OK with the welcome in `welcome`.
  // `holder`: the budget_holder to name (nullptr: none).
  grpc::Status Subscribe(const std::string& bearer, const std::string& group, int max_in_flight,
                         v1::SubscribeResponse* welcome = nullptr, const char* holder = nullptr) {
    auto ctx = Ctx(bearer);
    v1::SubscribeRequest req;
    req.set_consumer_group(group);
    req.set_max_in_flight(max_in_flight);
    if (holder != nullptr) req.set_budget_holder(holder);
    auto reader = stub_->Subscribe(ctx.get(), req);
    v1::SubscribeResponse msg;
    if (reader->Read(&msg)) {
      if (welcome) *welcome = msg;
      ctx->TryCancel();
      (void)reader->Finish();
      return grpc::Status::OK;
    }
    return reader->Finish();
  }
  // A subscription id issued to `bearer` (its stream is closed again at once).
  std::string Subscription(const std::string& bearer = kSubscriber) {
    v1::SubscribeResponse welcome;
    EXPECT_TRUE(Subscribe(bearer, "mailroom", 1, &welcome).ok());
    return welcome.subscriber_id();
  }
  static v1::AcknowledgeRequest AckRequest(const std::string& sub) {
    v1::AcknowledgeRequest req;
    req.set_consumer_group("mailroom");
    req.set_subscriber_id(sub);
    return req;
  }
  static v1::JobOutcome* Add(v1::AcknowledgeRequest* req, uint64_t id, v1::Outcome outcome,
                             uint32_t attempt = 1) {
    v1::JobOutcome* o = req->add_outcomes();
    o->set_job_id(id);
    o->set_attempt(attempt);
    o->set_outcome(outcome);
    return o;
  }

  bool run_dispatcher_ = false;
  std::thread loop_;
  FakeStore store_;
  Hub hub_;
  Metrics metrics_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::unique_ptr<CollectorService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Collector::Stub> stub_;
};

TEST_F(ServiceTest, CallsWithoutAValidCredentialAreUnauthenticated) {
  v1::GetQueueStatsResponse stats;
  for (const std::string bearer : {"", "wrong-token-wrong-token-wrong"}) {
    EXPECT_EQ(stub_->GetQueueStats(Ctx(bearer).get(), {}, &stats).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(Subscribe(bearer, "mailroom", 10).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(store_.CallCount("Stats"), 0);
}

TEST_F(ServiceTest, SubscribeValidatesItsArgumentsAndWelcomes) {
  EXPECT_EQ(Subscribe(kSubscriber, "Bad Group!", 10).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Subscribe(kSubscriber, "", 10).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Subscribe(kSubscriber, "mailroom", 0).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Subscribe(kSubscriber, "mailroom", kMaxInFlight + 1).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::SubscribeResponse welcome;
  ASSERT_TRUE(Subscribe(kSubscriber, "mailroom", kMaxInFlight, &welcome).ok());
  EXPECT_THAT(welcome.subscriber_id(), ::testing::StartsWith("sub-"));
  EXPECT_EQ(welcome.lease_duration_ms(), 30000u);
}

TEST_F(ServiceTest, ABudgetHolderIsValidated) {
  for (const char* bad : {"", "two words", "caf\xc3\xa9"}) {
    grpc::Status st = Subscribe(kSubscriber, "mailroom", 10, nullptr, bad);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_THAT(st.error_message(), ::testing::HasSubstr("budget_holder")) << bad;
  }
  const std::string too_long(kMaxHolderBytes + 1, 'h');
  EXPECT_EQ(Subscribe(kSubscriber, "mailroom", 10, nullptr, too_long.c_str()).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(Subscribe(kSubscriber, "mailroom", 10, nullptr, "sender-0123456789ab").ok());
}

TEST_F(ServiceTest, ScopesAndRolesArePermissionDenied) {
  // A subscriber of another group, an operator subscribing.
  EXPECT_EQ(Subscribe(kOther, "mailroom", 10).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Subscribe(kOperator, "mailroom", 10).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  v1::AcknowledgeRequest ack = AckRequest("sub-1");
  Add(&ack, 1, v1::OUTCOME_SENT);
  v1::AcknowledgeResponse resp;
  grpc::Status st = Ack(kOther, ack, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(st.error_message(), HasSubstr("\"mailroom\""));
  EXPECT_THAT(st.error_message(), ::testing::Not(HasSubstr(kOther)));
  // Subscribers do not requeue; operators do, in their groups only.
  v1::RequeueRequest rq;
  rq.set_consumer_group("mailroom");
  v1::RequeueResponse rr;
  EXPECT_EQ(stub_->Requeue(Ctx(kSubscriber).get(), rq, &rr).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(stub_->Requeue(Ctx(kOperator).get(), rq, &rr).ok());
  rq.set_consumer_group("other");
  EXPECT_EQ(stub_->Requeue(Ctx(kOperator).get(), rq, &rr).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Nothing denied reached the store.
  EXPECT_EQ(store_.CallCount("Ack"), 0);
  EXPECT_EQ(store_.CallCount("Requeue"), 1);
}

// A client that leaks streams (one per request, never closed) would take a window of jobs
// with each: one credential may hold only MAILROOM_MAX_STREAMS_PER_CREDENTIAL (64) open.
TEST_F(ServiceTest, OneCredentialMayHoldOnlySoManyStreamsOpen) {
  struct Open {
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<grpc::ClientReader<v1::SubscribeResponse>> reader;
  };
  std::vector<Open> open;
  auto subscribe = [&](const std::string& bearer, const std::string& group) {
    Open o{Ctx(bearer), nullptr};
    v1::SubscribeRequest req;
    req.set_consumer_group(group);
    req.set_max_in_flight(1);
    o.reader = stub_->Subscribe(o.ctx.get(), req);
    v1::SubscribeResponse welcome;
    if (!o.reader->Read(&welcome)) return o.reader->Finish();
    open.push_back(std::move(o));
    return grpc::Status::OK;
  };
  auto close_last = [&] {
    open.back().ctx->TryCancel();
    (void)open.back().reader->Finish();
    open.pop_back();
  };
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(subscribe(kSubscriber, "mailroom").ok()) << i;
  grpc::Status refused = subscribe(kSubscriber, "mailroom");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("token 1 already has 64 Subscribe streams"));
  EXPECT_THAT(refused.error_message(), HasSubstr("MAILROOM_MAX_STREAMS_PER_CREDENTIAL"));
  EXPECT_THAT(refused.error_message(), ::testing::Not(HasSubstr(kSubscriber)));
  // Another credential is counted on its own.
  EXPECT_TRUE(subscribe(kOther, "other").ok());
  close_last();
  // Once one of the 64 has ended (its reactor is done a moment after the client's cancel),
  // the credential may open another.
  close_last();
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  grpc::Status again;
  while (!(again = subscribe(kSubscriber, "mailroom")).ok() && absl::Now() < deadline) {
    ASSERT_EQ(again.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << again.error_message();
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_TRUE(again.ok()) << again.error_message();
  while (!open.empty()) close_last();
}

TEST_F(ServiceTest, AcknowledgeNeedsASubscriberIdAndOutcomes) {
  v1::AcknowledgeResponse resp;
  v1::AcknowledgeRequest req = AckRequest("");
  Add(&req, 1, v1::OUTCOME_SENT);
  EXPECT_EQ(Ack(kSubscriber, req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  req.set_subscriber_id(std::string(65, 's'));
  EXPECT_EQ(Ack(kSubscriber, req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Ack(kSubscriber, AckRequest("sub-1"), &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // no outcomes
  v1::AcknowledgeRequest many = AckRequest("sub-1");
  for (int i = 1; i <= kMaxIdsPerCall + 1; ++i) Add(&many, i, v1::OUTCOME_SENT);
  EXPECT_EQ(Ack(kSubscriber, many, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(store_.CallCount("Ack"), 0);
}

// Every field of an outcome is checked alone: the bad ones are rejected one by one and the
// valid ones beside them reach the store, with the caller's lease identity.
TEST_F(ServiceTest, BadOutcomesAreRejectedOneByOneAndTheRestIsRecorded) {
  const std::string sub = Subscription();
  v1::AcknowledgeRequest req = AckRequest(sub);
  Add(&req, 1, v1::OUTCOME_SENT)->set_cost_micros(9223372036854775807LL);        // over the cap
  Add(&req, 2, v1::OUTCOME_FAILED)->set_reason(std::string("bad\0reason", 10));  // NUL
  Add(&req, 3, v1::OUTCOME_RETRY)->set_retry_after_ms(40u * 24 * 3600 * 1000);   // > 31 days
  Add(&req, 4, v1::OUTCOME_FAILED);  // FAILED without a reason
  Add(&req, 5, v1::OUTCOME_UNSPECIFIED);
  Add(&req, 6, v1::OUTCOME_SENT, /*attempt=*/0);  // no lease identity
  Add(&req, 7, v1::OUTCOME_FAILED, 3)->set_reason(std::string(1500, 'x') + "\xc3\xa9");
  Add(&req, 8, v1::OUTCOME_SENT, 2)->set_cost_micros(4000);
  Add(&req, 8, v1::OUTCOME_SENT, 2)->set_cost_micros(4000);  // the same job twice
  Add(&req, 9, v1::OUTCOME_DEFER, 1)->set_cost_micros(1);    // only SENT has a cost
  v1::AcknowledgeResponse resp;
  ASSERT_TRUE(Ack(kSubscriber, req, &resp).ok());
  EXPECT_EQ(resp.recorded(), 2u);
  ASSERT_EQ(resp.rejected_size(), 8);
  std::set<uint64_t> rejected;
  for (const auto& r : resp.rejected()) rejected.insert(r.job_id());
  EXPECT_EQ(rejected, (std::set<uint64_t>{1, 2, 3, 4, 5, 6, 8, 9}));
  EXPECT_THAT(resp.rejected(0).error(), HasSubstr("MAILROOM_MAX_COST_MICROS"));
  EXPECT_THAT(resp.rejected(1).error(), HasSubstr("NUL"));

  auto calls = store_.Calls("Ack");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].group, "mailroom");
  EXPECT_EQ(calls[0].owner, sub);  // fencing: the subscription ...
  ASSERT_EQ(calls[0].results.size(), 2u);
  EXPECT_EQ(calls[0].results[0].id, 7u);
  EXPECT_EQ(calls[0].results[0].attempt, 3u);  // ... and the attempt, as handed out
  EXPECT_EQ(calls[0].results[0].kind, JobResult::Kind::kFailed);
  EXPECT_EQ(calls[0].results[0].reason.size(), 1000u);  // cut at a character boundary
  EXPECT_EQ(calls[0].results[1].id, 8u);
  EXPECT_EQ(calls[0].results[1].attempt, 2u);
  EXPECT_EQ(calls[0].results[1].cost_micros, 4000);
}

TEST_F(ServiceTest, OutcomesTheStoreDidNotRecordAreReportedAsIgnored) {
  store_.AckOnly({1});
  v1::AcknowledgeRequest req = AckRequest(Subscription());
  Add(&req, 1, v1::OUTCOME_SENT);
  Add(&req, 2, v1::OUTCOME_SENT);  // not this subscriber's lease (any more)
  v1::AcknowledgeResponse resp;
  ASSERT_TRUE(Ack(kSubscriber, req, &resp).ok());
  EXPECT_EQ(resp.recorded(), 1u);
  EXPECT_THAT(resp.ignored_job_ids(), ElementsAre(2u));
  EXPECT_EQ(metrics_.Value("mailroom_collector_acknowledged_total",
                           {{"group", "mailroom"}, {"outcome", "sent"}}),
            1);
}

TEST_F(ServiceTest, RenewLeasesPassesTheLeaseIdentityToTheStore) {
  v1::RenewLeasesRequest req;
  req.set_consumer_group("mailroom");
  const std::string sub = Subscription();
  req.set_subscriber_id(sub);
  req.add_job_ids(10);
  req.add_job_ids(11);
  req.add_attempts(1);
  v1::RenewLeasesResponse resp;
  EXPECT_EQ(stub_->RenewLeases(Ctx(kSubscriber).get(), req, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // attempts must match job_ids
  req.add_attempts(4);
  ASSERT_TRUE(stub_->RenewLeases(Ctx(kSubscriber).get(), req, &resp).ok());
  auto calls = store_.Calls("Renew");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].owner, sub);
  EXPECT_THAT(calls[0].ids, ElementsAre(10u, 11u));
  EXPECT_THAT(calls[0].attempts, ElementsAre(1u, 4u));
  EXPECT_EQ(calls[0].lease, absl::Seconds(30));
  EXPECT_EQ(resp.lost_job_ids_size(), 0);
  EXPECT_GT(resp.lease_expires_at_ms(), 0);
  req.clear_subscriber_id();
  EXPECT_EQ(stub_->RenewLeases(Ctx(kSubscriber).get(), req, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServiceTest, StoreErrorsMapToGrpcCodes) {
  store_.FailWith("Ack", absl::UnavailableError("database connection lost"));
  v1::AcknowledgeRequest req = AckRequest(Subscription());
  Add(&req, 1, v1::OUTCOME_SENT);
  v1::AcknowledgeResponse resp;
  EXPECT_EQ(Ack(kSubscriber, req, &resp).error_code(), grpc::StatusCode::UNAVAILABLE);
  store_.FailWith("Usage", absl::FailedPreconditionError("bad"));
  v1::GetUsageRequest u;
  u.set_consumer_group("mailroom");
  v1::GetUsageResponse ur;
  EXPECT_EQ(stub_->GetUsage(Ctx(kSubscriber).get(), u, &ur).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(ServiceTest, QueueStatsCoverTheOperatorsGroupsOnly) {
  GroupStatsRow a, b;
  a.group = "mailroom";
  a.depth = 3;
  b.group = "other";
  store_.SetStats({a, b});
  v1::GetQueueStatsResponse all;
  ASSERT_TRUE(stub_->GetQueueStats(Ctx(kOperator).get(), {}, &all).ok());
  ASSERT_EQ(all.groups_size(), 1);
  EXPECT_EQ(all.groups(0).consumer_group(), "mailroom");
  EXPECT_EQ(all.groups(0).depth(), 3u);
  v1::GetQueueStatsRequest req;
  req.set_consumer_group("audit");  // allowed, but the store knows no such group
  v1::GetQueueStatsResponse none;
  EXPECT_EQ(stub_->GetQueueStats(Ctx(kOperator).get(), req, &none).error_code(),
            grpc::StatusCode::NOT_FOUND);
  req.set_consumer_group("other");
  EXPECT_EQ(stub_->GetQueueStats(Ctx(kOperator).get(), req, &none).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

TEST(CleanReasonTest, CutsAtACharacterBoundaryAndRejectsBadUtf8) {
  EXPECT_EQ(*CleanReason("ok"), "ok");
  auto cut = CleanReason(std::string(999, 'x') + "\xc3\xa9");
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->size(), 999u);                    // the 2-byte character would end past 1000
  EXPECT_FALSE(CleanReason("\xc0\xaf").ok());      // overlong
  EXPECT_FALSE(CleanReason("\xed\xa0\x80").ok());  // surrogate
  EXPECT_FALSE(CleanReason(std::string("a\0b", 3)).ok());
}

TEST_F(ServiceTest, SuppressRecipientGoesWithFailedOutcomesOnly) {
  v1::AcknowledgeRequest req = AckRequest(Subscription(kEvery));
  v1::JobOutcome* bad = Add(&req, 1, v1::OUTCOME_SENT);
  bad->set_suppress_recipient(true);
  v1::JobOutcome* good = Add(&req, 2, v1::OUTCOME_FAILED);
  good->set_reason("smtp RCPT: 550 5.1.1 <x@example.test>: user unknown");
  good->set_suppress_recipient(true);
  Add(&req, 3, v1::OUTCOME_FAILED)->set_reason("smtp DATA: 554 5.7.1 spam");
  v1::AcknowledgeResponse resp;
  ASSERT_TRUE(Ack(kEvery, req, &resp).ok());
  ASSERT_EQ(resp.rejected_size(), 1);
  EXPECT_EQ(resp.rejected(0).job_id(), 1u);
  EXPECT_THAT(resp.rejected(0).error(), HasSubstr("suppress_recipient"));
  auto calls = store_.Calls("Ack");
  ASSERT_EQ(calls.size(), 1u);
  ASSERT_EQ(calls[0].results.size(), 2u);
  EXPECT_TRUE(calls[0].results[0].suppress_recipient);
  EXPECT_EQ(calls[0].results[0].reason, "smtp RCPT: 550 5.1.1 <x@example.test>: user unknown");
  EXPECT_FALSE(calls[0].results[1].suppress_recipient);
}

// The suppression list applies to every group: a credential scoped to some groups has its
// FAILED outcome recorded, but the recipient is not suppressed (for any group).
TEST_F(ServiceTest, OnlyACredentialOfEveryGroupSuppressesARecipient) {
  GroupStatsRow audit, mailroom;
  audit.group = "audit";
  mailroom.group = "mailroom";
  store_.SetStats({audit, mailroom});
  v1::AcknowledgeRequest req = AckRequest(Subscription(kSubscriber));
  v1::JobOutcome* o = Add(&req, 2, v1::OUTCOME_FAILED);
  o->set_reason("smtp RCPT: 550 5.1.1 <x@example.test>: user unknown");
  o->set_suppress_recipient(true);
  v1::AcknowledgeResponse resp;
  ASSERT_TRUE(Ack(kSubscriber, req, &resp).ok());
  EXPECT_EQ(resp.rejected_size(), 0);
  EXPECT_EQ(resp.recorded(), 1u);
  auto calls = store_.Calls("Ack");
  ASSERT_EQ(calls.size(), 1u);
  ASSERT_EQ(calls[0].results.size(), 1u);
  EXPECT_EQ(calls[0].results[0].kind, JobResult::Kind::kFailed);
  EXPECT_FALSE(calls[0].results[0].suppress_recipient);
  EXPECT_EQ(metrics_.Value("mailroom_collector_suppressions_not_scoped_total",
                           {{"group", "mailroom"}}),
            1);
  // With `mailroom` the only group there is, its credential covers every group.
  store_.SetStats({mailroom});
  ASSERT_TRUE(Ack(kSubscriber, req, &resp).ok());
  calls = store_.Calls("Ack");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_TRUE(calls[1].results[0].suppress_recipient);
}

// Two credentials of one group: neither settles, renews or frees the other's subscription,
// even knowing its id; each gets its own ids.
TEST_F(ServiceTest, ASubscriptionIsSettledAndRenewedOnlyByItsOwnCredential) {
  const std::string a = Subscription(kSubscriber);
  const std::string b = Subscription(kSecond);
  EXPECT_THAT(a, ::testing::MatchesRegex("sub-[0-9a-f]{32}-[0-9a-f]{16}"));
  EXPECT_NE(a.substr(0, 36), b.substr(0, 36));
  v1::AcknowledgeRequest req = AckRequest(a);
  Add(&req, 1, v1::OUTCOME_SENT);
  v1::AcknowledgeResponse resp;
  grpc::Status st = Ack(kSecond, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_THAT(st.error_message(), ::testing::Not(HasSubstr(a)));
  v1::RenewLeasesRequest renew;
  renew.set_consumer_group("mailroom");
  renew.set_subscriber_id(a);
  renew.add_job_ids(1);
  v1::RenewLeasesResponse renewed;
  EXPECT_EQ(stub_->RenewLeases(Ctx(kSecond).get(), renew, &renewed).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // A forged or altered id is nobody's.
  std::string forged = a;
  forged.back() = forged.back() == '0' ? '1' : '0';
  EXPECT_EQ(Ack(kSubscriber, AckRequest(forged), &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // no outcomes: arguments first
  v1::AcknowledgeRequest forged_req = AckRequest(forged);
  Add(&forged_req, 1, v1::OUTCOME_SENT);
  EXPECT_EQ(Ack(kSubscriber, forged_req, &resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // An id of the earlier, unbound form ("sub-" and 18 hex digits) is no one's: neither
  // another credential nor any other settles or renews leases with it; the holder subscribes
  // again.
  const std::string unbound = "sub-0123456789abcdef01";
  for (const char* bearer : {kSecond, kSubscriber}) {
    v1::AcknowledgeRequest old_req = AckRequest(unbound);
    Add(&old_req, 1, v1::OUTCOME_SENT);
    grpc::Status old_st = Ack(bearer, old_req, &resp);
    EXPECT_EQ(old_st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << old_st.error_message();
    EXPECT_THAT(old_st.error_message(), HasSubstr("subscribe again"));
    v1::RenewLeasesRequest old_renew = renew;
    old_renew.set_subscriber_id(unbound);
    EXPECT_EQ(stub_->RenewLeases(Ctx(bearer).get(), old_renew, &renewed).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_EQ(store_.CallCount("Ack"), 0);
  EXPECT_EQ(store_.CallCount("Renew"), 0);
  // Its own credential may.
  ASSERT_TRUE(Ack(kSubscriber, req, &resp).ok());
  ASSERT_TRUE(stub_->RenewLeases(Ctx(kSubscriber).get(), renew, &renewed).ok());
  EXPECT_EQ(store_.CallCount("Ack"), 1);
  EXPECT_EQ(store_.CallCount("Renew"), 1);
}

TEST_F(ServiceTest, ProviderMessageIdGoesWithSentOutcomesOnlyAndIsBounded) {
  v1::AcknowledgeRequest req = AckRequest(Subscription());
  Add(&req, 1, v1::OUTCOME_SENT)->set_provider_message_id("0100018c-ses-id-000000");
  v1::JobOutcome* failed = Add(&req, 2, v1::OUTCOME_FAILED);
  failed->set_reason("ses 400 MessageRejected");
  failed->set_provider_message_id("x");
  Add(&req, 3, v1::OUTCOME_SENT)->set_provider_message_id(std::string(257, 'a'));
  Add(&req, 4, v1::OUTCOME_SENT)->set_provider_message_id(std::string("a\0b", 3));
  v1::AcknowledgeResponse resp;
  ASSERT_TRUE(Ack(kSubscriber, req, &resp).ok());
  ASSERT_EQ(resp.rejected_size(), 3);
  EXPECT_EQ(resp.rejected(0).job_id(), 2u);
  EXPECT_THAT(resp.rejected(0).error(), HasSubstr("only valid with a SENT outcome"));
  EXPECT_THAT(resp.rejected(1).error(), HasSubstr("at most 256"));
  EXPECT_THAT(resp.rejected(2).error(), HasSubstr("NUL"));
  auto calls = store_.Calls("Ack");
  ASSERT_EQ(calls.size(), 1u);
  ASSERT_EQ(calls[0].results.size(), 1u);
  EXPECT_EQ(calls[0].results[0].provider_message_id, "0100018c-ses-id-000000");
}

// The transport that sent a job goes with SENT only, as a short lowercase name (it is stored on
// the delivery and compared with the feedback path's).
TEST_F(ServiceTest, ProviderGoesWithSentOutcomesOnlyAndIsAName) {
  v1::AcknowledgeRequest req = AckRequest(Subscription());
  Add(&req, 1, v1::OUTCOME_SENT)->set_provider("postmark");
  v1::JobOutcome* failed = Add(&req, 2, v1::OUTCOME_FAILED);
  failed->set_reason("postmark 422");
  failed->set_provider("postmark");
  Add(&req, 3, v1::OUTCOME_SENT)->set_provider(std::string(33, 'a'));
  Add(&req, 4, v1::OUTCOME_SENT)->set_provider("Postmark");
  Add(&req, 5, v1::OUTCOME_SENT)->set_provider("a\nb");
  Add(&req, 6, v1::OUTCOME_SENT);
  v1::AcknowledgeResponse resp;
  ASSERT_TRUE(Ack(kSubscriber, req, &resp).ok());
  ASSERT_EQ(resp.rejected_size(), 4);
  EXPECT_EQ(resp.rejected(0).job_id(), 2u);
  EXPECT_THAT(resp.rejected(0).error(), HasSubstr("only valid with a SENT outcome"));
  for (int i = 1; i < 4; ++i) {
    EXPECT_EQ(resp.rejected(i).job_id(), static_cast<uint64_t>(i + 2));
    EXPECT_THAT(resp.rejected(i).error(), HasSubstr("at most 32 characters of a-z"));
  }
  auto calls = store_.Calls("Ack");
  ASSERT_EQ(calls.size(), 1u);
  ASSERT_EQ(calls[0].results.size(), 2u);
  EXPECT_EQ(calls[0].results[0].provider, "postmark");
  EXPECT_EQ(calls[0].results[1].provider, "");
}

TEST_F(ServiceTest, SuppressionsNeedAnOperatorOfEveryGroup) {
  v1::ListSuppressionsResponse list;
  v1::AddSuppressionRequest add;
  add.set_address("x@example.test");
  v1::Suppression added;
  v1::RemoveSuppressionRequest rm;
  rm.set_address("x@example.test");
  v1::RemoveSuppressionResponse removed;
  EXPECT_EQ(stub_->ListSuppressions(Ctx("").get(), {}, &list).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  for (const char* bearer : {kSubscriber, kOperator}) {
    EXPECT_EQ(stub_->ListSuppressions(Ctx(bearer).get(), {}, &list).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(stub_->AddSuppression(Ctx(bearer).get(), add, &added).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(stub_->RemoveSuppression(Ctx(bearer).get(), rm, &removed).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  EXPECT_EQ(store_.CallCount("ListSuppressions") + store_.CallCount("AddSuppression") +
                store_.CallCount("RemoveSuppression"),
            0);
}

TEST_F(ServiceTest, AddListAndRemoveSuppressions) {
  v1::Suppression added;
  v1::AddSuppressionRequest add;
  // Shapes that are not an address.
  for (const char* bad : {"", "nobody", "@example.test", "x@", "a b@example.test",
                          "x@example..test", "<x@example.test>", "x@example.test."}) {
    add.set_address(bad);
    EXPECT_EQ(stub_->AddSuppression(Ctx(kAdmin).get(), add, &added).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT)
        << bad;
  }
  add.set_address(std::string(250, 'a') + "@x.test");
  EXPECT_EQ(stub_->AddSuppression(Ctx(kAdmin).get(), add, &added).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  add.set_address("x@example.test");
  add.set_expires_at(1000);  // in the past
  EXPECT_EQ(stub_->AddSuppression(Ctx(kAdmin).get(), add, &added).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  add.set_expires_at(0);
  add.set_reason(static_cast<v1::SuppressionReason>(99));
  EXPECT_EQ(stub_->AddSuppression(Ctx(kAdmin).get(), add, &added).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(store_.CallCount("AddSuppression"), 0);

  // Normalised; the reason defaults to manual and the source to "operator".
  add.set_reason(v1::SUPPRESSION_REASON_UNSPECIFIED);
  add.set_address("  Bob@Example.TEST ");
  ASSERT_TRUE(stub_->AddSuppression(Ctx(kAdmin).get(), add, &added).ok());
  EXPECT_EQ(added.address(), "bob@example.test");
  EXPECT_EQ(added.reason(), v1::SUPPRESSION_REASON_MANUAL);
  EXPECT_EQ(added.source(), "operator");
  for (const char* a : {"ann@example.test", "carl@other.test", "amy@example.test"}) {
    add.set_address(a);
    add.set_reason(v1::SUPPRESSION_REASON_HARD_BOUNCE);
    ASSERT_TRUE(stub_->AddSuppression(Ctx(kAdmin).get(), add, &added).ok());
  }

  // Pages of two, by address; the token is the last address.
  v1::ListSuppressionsRequest lr;
  lr.set_page_size(2);
  v1::ListSuppressionsResponse page;
  ASSERT_TRUE(stub_->ListSuppressions(Ctx(kAdmin).get(), lr, &page).ok());
  ASSERT_EQ(page.suppressions_size(), 2);
  EXPECT_EQ(page.suppressions(0).address(), "amy@example.test");
  EXPECT_EQ(page.suppressions(1).address(), "ann@example.test");
  EXPECT_EQ(page.next_page_token(), "ann@example.test");
  lr.set_page_token(page.next_page_token());
  ASSERT_TRUE(stub_->ListSuppressions(Ctx(kAdmin).get(), lr, &page).ok());
  ASSERT_EQ(page.suppressions_size(), 2);
  EXPECT_EQ(page.suppressions(0).address(), "bob@example.test");
  EXPECT_EQ(page.suppressions(1).address(), "carl@other.test");
  // Filters.
  lr.Clear();
  lr.set_reason(v1::SUPPRESSION_REASON_HARD_BOUNCE);
  lr.set_address_prefix("A");
  ASSERT_TRUE(stub_->ListSuppressions(Ctx(kAdmin).get(), lr, &page).ok());
  ASSERT_EQ(page.suppressions_size(), 2);
  EXPECT_EQ(page.next_page_token(), "");
  lr.set_page_size(1001);
  EXPECT_EQ(stub_->ListSuppressions(Ctx(kAdmin).get(), lr, &page).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  v1::RemoveSuppressionRequest rm;
  rm.set_address("BOB@example.test");
  v1::RemoveSuppressionResponse removed;
  ASSERT_TRUE(stub_->RemoveSuppression(Ctx(kAdmin).get(), rm, &removed).ok());
  EXPECT_EQ(removed.removed().address(), "bob@example.test");
  EXPECT_EQ(stub_->RemoveSuppression(Ctx(kAdmin).get(), rm, &removed).error_code(),
            grpc::StatusCode::NOT_FOUND);
  rm.set_address("not an address");
  EXPECT_EQ(stub_->RemoveSuppression(Ctx(kAdmin).get(), rm, &removed).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

// A BudgetStore that records what the service passes and answers a fixed grant: the SQL is
// budget_store_test's, this checks roles, validation and the mapping to the protos.
class RecordingBudgetStore : public BudgetStore {
 public:
  absl::StatusOr<Grant> Acquire(const GrantRequest& r) override {
    last_acquire = r;
    if (r.group == "audit") return absl::NotFoundError("unknown consumer group \"audit\"");
    Grant g;
    g.grant_id = 7;
    g.emails = std::min(r.emails, 3);
    g.expires_at = absl::Now() + absl::Seconds(10);
    g.pace_per_second = 2.5;
    return g;
  }
  absl::StatusOr<int> Return(const std::string&, const std::string& holder, uint64_t grant_id,
                             int emails) override {
    return holder == last_acquire.holder && grant_id == 7 ? std::min(emails, 3) : 0;
  }
  absl::StatusOr<GroupBudgetRow> Get(const std::string& group) override {
    GroupBudgetRow b;
    b.group = group;
    b.month = "2026-11";
    b.monthly_budget_micros = 100000000;
    b.budget_is_default = false;
    b.recovery_reserve_percent = 10;
    b.committed_micros = 1200;
    return b;
  }
  absl::StatusOr<GroupBudgetRow> Set(const BudgetSettings& s) override {
    last_set = s;
    return Get(s.group);
  }
  absl::StatusOr<std::vector<BudgetRefund>> Refund() override {
    return std::vector<BudgetRefund>{};
  }
  GrantRequest last_acquire;
  BudgetSettings last_set;
};

TEST_F(ServiceTest, BudgetGrantsNeedTheSubscriberRoleAndValidArguments) {
  RecordingBudgetStore budgets;
  v1::AcquireBudgetRequest req;
  req.set_consumer_group("mailroom");
  req.set_holder("s-1");
  req.set_emails(5);
  req.set_recovery(true);
  req.set_price_micros(100);
  v1::AcquireBudgetResponse resp;
  // Not wired: a clear refusal.
  EXPECT_EQ(stub_->AcquireBudget(Ctx(kSubscriber).get(), req, &resp).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  service_->SetBudgetStore(&budgets);
  ASSERT_TRUE(stub_->AcquireBudget(Ctx(kSubscriber).get(), req, &resp).ok());
  // The store's id 7, as this credential sees it.
  const uint64_t grant_id = resp.grant_id();
  EXPECT_NE(grant_id, 7u);
  EXPECT_EQ(resp.emails(), 3u);
  EXPECT_GT(resp.expires_in_ms(), 9000);
  EXPECT_LE(resp.expires_in_ms(), 10000);
  EXPECT_EQ(resp.pace_per_second(), 2.5);
  EXPECT_THAT(budgets.last_acquire.holder, ::testing::StartsWith("s-1~"));
  EXPECT_EQ(budgets.last_acquire.emails, 5);
  EXPECT_TRUE(budgets.last_acquire.recovery);
  EXPECT_EQ(budgets.last_acquire.price_micros, 100);

  EXPECT_EQ(stub_->AcquireBudget(Ctx(kOperator).get(), req, &resp).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(stub_->AcquireBudget(Ctx(kOther).get(), req, &resp).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  auto bad = [&](std::function<void(v1::AcquireBudgetRequest&)> change) {
    v1::AcquireBudgetRequest r = req;
    change(r);
    return stub_->AcquireBudget(Ctx(kSubscriber).get(), r, &resp).error_code();
  };
  EXPECT_EQ(bad([](auto& r) { r.set_holder(""); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad([](auto& r) { r.set_holder("a b"); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad([](auto& r) { r.set_holder(std::string(201, 'h')); }),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad([](auto& r) { r.set_emails(0); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad([](auto& r) { r.set_emails(1001); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad([](auto& r) { r.set_price_micros(0); }), grpc::StatusCode::INVALID_ARGUMENT);
  // Below the collector's price floor (100 µ by default): a sender claiming 1 µ an email would
  // draw a hundred times the group's money in emails.
  {
    v1::AcquireBudgetRequest cheap = req;
    cheap.set_price_micros(kDefaultMinPriceMicros - 1);
    grpc::Status refused = stub_->AcquireBudget(Ctx(kSubscriber).get(), cheap, &resp);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("price_micros must be 100 to"));
  }
  EXPECT_EQ(bad([](auto& r) { r.set_price_micros(5001); }), grpc::StatusCode::INVALID_ARGUMENT);

  v1::ReturnBudgetRequest ret;
  ret.set_consumer_group("mailroom");
  ret.set_holder("s-1");
  ret.set_grant_id(grant_id);
  ret.set_emails(2);
  v1::ReturnBudgetResponse returned;
  ASSERT_TRUE(stub_->ReturnBudget(Ctx(kSubscriber).get(), ret, &returned).ok());
  EXPECT_EQ(returned.returned(), 2u);
  ret.set_holder("s-2");
  ASSERT_TRUE(stub_->ReturnBudget(Ctx(kSubscriber).get(), ret, &returned).ok());
  EXPECT_EQ(returned.returned(), 0u);
  // Another credential naming this grant id (whatever it opens to) gets nothing back.
  ret.set_holder("s-1");
  ASSERT_TRUE(stub_->ReturnBudget(Ctx(kSecond).get(), ret, &returned).ok());
  EXPECT_EQ(returned.returned(), 0u);
  for (uint64_t any : {uint64_t{1}, ~uint64_t{0}}) {
    ret.set_grant_id(any);
    ASSERT_TRUE(stub_->ReturnBudget(Ctx(kSubscriber).get(), ret, &returned).ok());
    EXPECT_EQ(returned.returned(), 0u);
  }
  ret.set_grant_id(0);
  EXPECT_EQ(stub_->ReturnBudget(Ctx(kSubscriber).get(), ret, &returned).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServiceTest, GroupBudgetsAreForOperators) {
  RecordingBudgetStore budgets;
  service_->SetBudgetStore(&budgets);
  v1::SetGroupBudgetRequest set;
  set.set_consumer_group("mailroom");
  set.set_monthly_budget_micros(100000000);
  set.set_burst(20);
  v1::GroupBudget b;
  EXPECT_EQ(stub_->SetGroupBudget(Ctx(kSubscriber).get(), set, &b).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(stub_->SetGroupBudget(Ctx(kOperator).get(), set, &b).ok());
  EXPECT_EQ(budgets.last_set.monthly_budget_micros, 100000000);
  EXPECT_EQ(budgets.last_set.burst, 20);
  EXPECT_FALSE(budgets.last_set.recovery_reserve_percent.has_value());
  EXPECT_FALSE(budgets.last_set.default_budget);
  EXPECT_EQ(b.monthly_budget_micros(), 100000000);
  EXPECT_FALSE(b.unlimited());
  EXPECT_EQ(b.committed_micros(), 1200);
  EXPECT_EQ(b.month(), "2026-11");

  auto code = [&](std::function<void(v1::SetGroupBudgetRequest&)> change) {
    v1::SetGroupBudgetRequest r;
    r.set_consumer_group("mailroom");
    change(r);
    return stub_->SetGroupBudget(Ctx(kOperator).get(), r, &b).error_code();
  };
  EXPECT_EQ(code([](auto& r) { r.set_monthly_budget_micros(-1); }),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code([](auto& r) {
              r.set_monthly_budget_micros(1);
              r.set_default_budget(true);
            }),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code([](auto& r) { r.set_recovery_reserve_percent(101); }),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code([](auto& r) { r.set_burst(0); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code([](auto& r) { r.set_default_reserve(true); }), grpc::StatusCode::OK);
  EXPECT_TRUE(budgets.last_set.default_reserve);

  v1::GetGroupBudgetRequest get;
  get.set_consumer_group("audit");
  ASSERT_TRUE(stub_->GetGroupBudget(Ctx(kOperator).get(), get, &b).ok());
  EXPECT_EQ(b.consumer_group(), "audit");
  get.set_consumer_group("other");
  EXPECT_EQ(stub_->GetGroupBudget(Ctx(kOperator).get(), get, &b).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // A store error keeps its meaning.
  v1::AcquireBudgetRequest req;
  req.set_consumer_group("audit");
  req.set_holder("s-1");
  req.set_emails(1);
  req.set_price_micros(100);
  v1::AcquireBudgetResponse resp;
  EXPECT_EQ(stub_->AcquireBudget(Ctx(kAdmin).get(), req, &resp).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);  // an operator is no subscriber
}

// The same holder string named by two credentials of one group is two holders.
TEST_F(ServiceTest, GrantHoldersAreBoundToTheirCredential) {
  RecordingBudgetStore budgets;
  service_->SetBudgetStore(&budgets);
  v1::AcquireBudgetRequest req;
  req.set_consumer_group("mailroom");
  req.set_holder("sender-a-0123456789ab");
  req.set_emails(5);
  req.set_price_micros(100);
  v1::AcquireBudgetResponse resp;
  ASSERT_TRUE(stub_->AcquireBudget(Ctx(kSubscriber).get(), req, &resp).ok());
  const std::string a = budgets.last_acquire.holder;
  ASSERT_TRUE(stub_->AcquireBudget(Ctx(kSecond).get(), req, &resp).ok());
  const std::string b = budgets.last_acquire.holder;
  EXPECT_NE(a, b);
  EXPECT_THAT(a, ::testing::StartsWith("sender-a-0123456789ab~"));
  EXPECT_THAT(b, ::testing::StartsWith("sender-a-0123456789ab~"));
}

// An observer's credential is scoped like a sender's, but: its subscriptions are told their
// jobs come without secrets, it cannot name a budget holder or take or return grants, its
// outcomes carry no cost, provider id or suppression, and it settles and renews only its own
// subscriptions' leases in its own groups.
TEST_F(ServiceTest, AnObserverSettlesOnlyItsOwnLeasesAndSendsNothing) {
  v1::SubscribeResponse welcome;
  ASSERT_TRUE(Subscribe(kObserver, "audit", 10, &welcome).ok());
  EXPECT_TRUE(welcome.secrets_withheld());
  const std::string mine = welcome.subscriber_id();
  ASSERT_TRUE(Subscribe(kSubscriber, "mailroom", 10, &welcome).ok());
  EXPECT_FALSE(welcome.secrets_withheld());
  const std::string senders = welcome.subscriber_id();

  // Not a sender: no budget holder, no grants.
  grpc::Status st = Subscribe(kObserver, "audit", 10, nullptr, "sender-0123456789ab");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(st.error_message(), HasSubstr("sender role"));
  v1::AcquireBudgetRequest acquire;
  acquire.set_consumer_group("audit");
  acquire.set_holder("h");
  acquire.set_emails(1);
  acquire.set_price_micros(100);
  v1::AcquireBudgetResponse granted;
  st = stub_->AcquireBudget(Ctx(kObserver).get(), acquire, &granted);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(st.error_message(), HasSubstr("needs the sender role"));
  EXPECT_THAT(st.error_message(), HasSubstr("has the observer role"));
  v1::ReturnBudgetRequest give_back;
  give_back.set_consumer_group("audit");
  give_back.set_holder("h");
  give_back.set_grant_id(1);
  give_back.set_emails(1);
  v1::ReturnBudgetResponse returned;
  EXPECT_EQ(stub_->ReturnBudget(Ctx(kObserver).get(), give_back, &returned).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Nor an operator.
  v1::RequeueRequest rq;
  rq.set_consumer_group("audit");
  v1::RequeueResponse rr;
  EXPECT_EQ(stub_->Requeue(Ctx(kObserver).get(), rq, &rr).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::GetUsageRequest usage;
  usage.set_consumer_group("audit");
  v1::GetUsageResponse used;
  EXPECT_TRUE(stub_->GetUsage(Ctx(kObserver).get(), usage, &used).ok());

  // Another group's leases: not its group, or not its subscription, whatever it names.
  v1::AcknowledgeRequest theirs = AckRequest(senders);
  Add(&theirs, 1, v1::OUTCOME_SENT);
  v1::AcknowledgeResponse resp;
  for (const char* bearer : {kObserver, kWatcher, kSeesAll}) {
    EXPECT_EQ(Ack(bearer, theirs, &resp).error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << bearer;
    v1::RenewLeasesRequest renew;
    renew.set_consumer_group("mailroom");
    renew.set_subscriber_id(senders);
    renew.add_job_ids(1);
    v1::RenewLeasesResponse renewed;
    EXPECT_EQ(stub_->RenewLeases(Ctx(bearer).get(), renew, &renewed).error_code(),
              grpc::StatusCode::PERMISSION_DENIED)
        << bearer;
  }
  v1::AcknowledgeRequest elsewhere = AckRequest(mine);  // its own id, named in "mailroom"
  Add(&elsewhere, 1, v1::OUTCOME_SENT);
  EXPECT_EQ(Ack(kObserver, elsewhere, &resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(store_.CallCount("Ack"), 0);
  EXPECT_EQ(store_.CallCount("Renew"), 0);

  // Its own leases: settled as seen (EXPIRED) or handed back, with nothing only a sender's
  // outcome carries (a cost goes with SENT alone: rejected alone).
  v1::AcknowledgeRequest own = AckRequest(mine);
  own.set_consumer_group("audit");
  Add(&own, 1, v1::OUTCOME_EXPIRED);
  Add(&own, 2, v1::OUTCOME_EXPIRED)->set_cost_micros(100);
  Add(&own, 3, v1::OUTCOME_EXPIRED)->set_provider_message_id("ses-1");
  Add(&own, 4, v1::OUTCOME_DEFER)->set_suppress_recipient(true);
  Add(&own, 5, v1::OUTCOME_DEFER);
  // Another observer credential of the group may not settle them either.
  EXPECT_EQ(Ack(kSeesAll, own, &resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(store_.CallCount("Ack"), 0);
  ASSERT_TRUE(Ack(kObserver, own, &resp).ok());
  std::set<uint64_t> rejected;
  for (const auto& r : resp.rejected()) rejected.insert(r.job_id());
  EXPECT_EQ(rejected, (std::set<uint64_t>{2, 3, 4}));
  auto acks = store_.Calls("Ack");
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].group, "audit");
  EXPECT_EQ(acks[0].owner, mine);
  ASSERT_EQ(acks[0].results.size(), 2u);
  EXPECT_EQ(acks[0].results[0].id, 1u);
  EXPECT_EQ(acks[0].results[0].kind, JobResult::Kind::kExpired);
  EXPECT_EQ(acks[0].results[1].id, 5u);
  EXPECT_EQ(acks[0].results[1].kind, JobResult::Kind::kDefer);
}

// The members of a group share its jobs: an observer in a group that a sender credential
// serves would lease jobs the senders then do not get until the leases end. Refused when it
// subscribes, and for its acknowledgements and renewals there, whatever subscription it names
// (PERMISSION_DENIED: the credential's role in that group). In a group of its own it works.
TEST_F(ServiceTest, AnObserverIsRefusedInAGroupASenderServes) {
  const std::pair<const char*, const char*> refused[] = {{kWatcher, "mailroom"},
                                                         {kSeesAll, "mailroom"},
                                                         {kSeesAll, "other"}};
  for (const auto& [bearer, group] : refused) {
    grpc::Status st = Subscribe(bearer, group, 10);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << group;
    EXPECT_THAT(st.error_message(), HasSubstr("a sender credential serves consumer group"));
    EXPECT_THAT(st.error_message(), Not(HasSubstr(bearer)));
  }
  EXPECT_EQ(hub_.Count("mailroom"), 0);
  EXPECT_EQ(hub_.Count("other"), 0);

  // Its own subscription id, named in the senders' group: the same refusal, nothing recorded
  // or renewed.
  v1::SubscribeResponse welcome;
  ASSERT_TRUE(Subscribe(kWatcher, "audit", 10, &welcome).ok());
  EXPECT_TRUE(welcome.secrets_withheld());
  v1::AcknowledgeRequest ack = AckRequest(welcome.subscriber_id());
  Add(&ack, 1, v1::OUTCOME_DEFER);
  v1::AcknowledgeResponse acked;
  grpc::Status st = Ack(kWatcher, ack, &acked);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(st.error_message(), HasSubstr("a sender credential serves"));
  v1::RenewLeasesRequest renew;
  renew.set_consumer_group("mailroom");
  renew.set_subscriber_id(welcome.subscriber_id());
  renew.add_job_ids(1);
  v1::RenewLeasesResponse renewed;
  EXPECT_EQ(stub_->RenewLeases(Ctx(kWatcher).get(), renew, &renewed).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(store_.CallCount("Ack"), 0);
  EXPECT_EQ(store_.CallCount("Renew"), 0);

  // Groups no sender credential serves: as before, for every observer scoped to them.
  ASSERT_TRUE(Subscribe(kObserver, "audit", 10, &welcome).ok());
  EXPECT_TRUE(welcome.secrets_withheld());
  ASSERT_TRUE(Subscribe(kSeesAll, "audit", 10).ok());
  ASSERT_TRUE(Subscribe(kSeesAll, "dashboard", 10).ok());
  ack = AckRequest(welcome.subscriber_id());
  ack.set_consumer_group("audit");
  Add(&ack, 1, v1::OUTCOME_EXPIRED);
  ASSERT_TRUE(Ack(kObserver, ack, &acked).ok());
  EXPECT_EQ(store_.CallCount("Ack"), 1);
  // Senders are not affected.
  EXPECT_TRUE(Subscribe(kSubscriber, "mailroom", 10).ok());
}

// An observer sends nothing: SENT or FAILED from it is refused with PERMISSION_DENIED, the
// whole call, so nothing of it reaches the store (the job stays leased to it, as it was); the
// outcomes it may report (EXPIRED for a job it has seen, DEFER and RETRY to hand one back) are
// recorded as before. A sender's SENT and FAILED are unchanged.
TEST_F(ServiceTest, AnObserversSentOrFailedIsRefusedAndNothingRecorded) {
  v1::SubscribeResponse welcome;
  ASSERT_TRUE(Subscribe(kObserver, "audit", 10, &welcome).ok());
  auto request = [&](std::initializer_list<std::pair<uint64_t, v1::Outcome>> outcomes) {
    v1::AcknowledgeRequest req = AckRequest(welcome.subscriber_id());
    req.set_consumer_group("audit");
    for (const auto& [id, outcome] : outcomes) {
      Add(&req, id, outcome)->set_reason(outcome == v1::OUTCOME_FAILED ? "550 5.1.1" : "");
    }
    return req;
  };
  v1::AcknowledgeResponse resp;
  for (const auto& req : {request({{1, v1::OUTCOME_SENT}}), request({{1, v1::OUTCOME_FAILED}}),
                          request({{2, v1::OUTCOME_DEFER}, {1, v1::OUTCOME_SENT}})}) {
    grpc::Status st = Ack(kObserver, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_THAT(st.error_message(), HasSubstr("an observer sends nothing"));
    EXPECT_THAT(st.error_message(), HasSubstr("job 1"));
    EXPECT_THAT(st.error_message(), Not(HasSubstr(kObserver)));
  }
  EXPECT_EQ(store_.CallCount("Ack"), 0);

  ASSERT_TRUE(
      Ack(kObserver,
          request({{1, v1::OUTCOME_EXPIRED}, {2, v1::OUTCOME_DEFER}, {3, v1::OUTCOME_RETRY}}),
          &resp)
          .ok());
  EXPECT_EQ(resp.recorded(), 3u);
  auto acks = store_.Calls("Ack");
  ASSERT_EQ(acks.size(), 1u);
  ASSERT_EQ(acks[0].results.size(), 3u);
  EXPECT_EQ(acks[0].results[0].kind, JobResult::Kind::kExpired);
  EXPECT_EQ(acks[0].results[1].kind, JobResult::Kind::kDefer);
  EXPECT_EQ(acks[0].results[2].kind, JobResult::Kind::kRetry);

  v1::AcknowledgeRequest sent = AckRequest(Subscription(kSubscriber));
  Add(&sent, 1, v1::OUTCOME_SENT);
  Add(&sent, 2, v1::OUTCOME_FAILED)->set_reason("550 5.1.1");
  ASSERT_TRUE(Ack(kSubscriber, sent, &resp).ok());
  EXPECT_EQ(resp.recorded(), 2u);
}

TEST(ObserverCredentialsTest, SenderAndObserverExcludeEachOther) {
  auto c = ParseCredentials({"both-kinds-token-0123@audit:sender+observer"},
                            "MAILROOM_SUBSCRIBER_TOKENS");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("exclude each other"));
}

// The whole path a job takes to a subscriber (the dispatcher's dequeue, BuildJob, the
// Subscriber, the stream) with an observer's credential: no token and no code on the wire,
// in the first hand-out, in a hand-out again (attempt 2, as after a lease ran out or a
// RETRY), or in the recovery lane; a sender's credential gets both.
class JobPathTest : public ServiceTest {
 protected:
  JobPathTest() { run_dispatcher_ = true; }
  static StoredJob Row(uint64_t id, bool recovery, uint32_t attempt) {
    StoredJob j;
    j.id = id;
    j.action = recovery ? "password_recovery" : "activation";
    j.critical = recovery;
    j.email = absl::StrCat("user", id, "@example.test");
    j.login = absl::StrCat("user", id);
    j.secret = std::string(32, static_cast<char>('a' + id));
    j.code = absl::StrCat(97530 + id);
    j.attempt = attempt;
    j.expires_at = 1700000900;
    return j;
  }
  // The next jobs message of `reader` (a test failure after 10 s without one).
  static v1::SubscribeResponse Next(grpc::ClientReader<v1::SubscribeResponse>* reader) {
    v1::SubscribeResponse msg;
    EXPECT_TRUE(reader->Read(&msg));
    return msg;
  }
  static void ExpectNoSecrets(const v1::SubscribeResponse& msg) {
    EXPECT_GT(msg.jobs_size(), 0);
    const std::string wire = msg.SerializeAsString();
    for (const v1::Job& j : msg.jobs()) {
      EXPECT_EQ(j.token(), "") << j.job_id();
      EXPECT_EQ(j.code(), "") << j.job_id();
      EXPECT_EQ(wire.find(absl::StrCat(97530 + j.job_id())), std::string::npos) << j.job_id();
    }
  }
  static std::vector<std::pair<uint64_t, uint32_t>> Leases(const v1::SubscribeResponse& msg) {
    std::vector<std::pair<uint64_t, uint32_t>> out;
    for (const v1::Job& j : msg.jobs()) out.emplace_back(j.job_id(), j.attempt());
    return out;
  }
  grpc::Status Defer(const std::string& sub, std::vector<uint64_t> ids, uint32_t attempt) {
    v1::AcknowledgeRequest req = AckRequest(sub);
    req.set_consumer_group("audit");
    for (uint64_t id : ids) Add(&req, id, v1::OUTCOME_DEFER, attempt);
    v1::AcknowledgeResponse resp;
    return Ack(kObserver, req, &resp);
  }
};

TEST_F(JobPathTest, AnObserverNeverReceivesATokenOrACode) {
  using Lease = std::pair<uint64_t, uint32_t>;
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", absl::StrCat("Bearer ", kObserver));
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::SubscribeRequest req;
  req.set_consumer_group("audit");
  req.set_max_in_flight(2);
  // First hand-out: an activation and a recovery fill the window.
  store_.QueueJobs({Row(1, false, 1), Row(2, true, 1)});
  auto reader = stub_->Subscribe(&ctx, req);
  v1::SubscribeResponse welcome = Next(reader.get());
  EXPECT_TRUE(welcome.secrets_withheld());
  const std::string sub = welcome.subscriber_id();
  v1::SubscribeResponse first = Next(reader.get());
  EXPECT_THAT(Leases(first), ElementsAre(Lease{1, 1}, Lease{2, 1}));
  ExpectNoSecrets(first);

  // Handed out again (attempt 2), as after its lease ran out: the same path, still nothing.
  store_.QueueJobs({Row(1, false, 2), Row(2, true, 2)});
  ASSERT_TRUE(Defer(sub, {1, 2}, 1).ok());
  v1::SubscribeResponse again = Next(reader.get());
  EXPECT_THAT(Leases(again), ElementsAre(Lease{1, 2}, Lease{2, 2}));
  ExpectNoSecrets(again);

  // A window of recoveries only, then the recovery lane (DequeueRecoveries).
  store_.QueueJobs({Row(2, true, 3), Row(4, true, 1)});
  store_.QueueJobs({Row(5, true, 1)});
  ASSERT_TRUE(Defer(sub, {1, 2}, 2).ok());
  v1::SubscribeResponse window = Next(reader.get());
  EXPECT_THAT(Leases(window), ElementsAre(Lease{2, 3}, Lease{4, 1}));
  ExpectNoSecrets(window);
  v1::SubscribeResponse lane = Next(reader.get());
  EXPECT_THAT(Leases(lane), ElementsAre(Lease{5, 1}));
  ExpectNoSecrets(lane);
  ASSERT_GE(store_.CallCount("DequeueRecoveries"), 1);
  for (const char* method : {"Dequeue", "DequeueRecoveries"}) {
    for (const auto& call : store_.Calls(method)) {
      EXPECT_EQ(call.group, "audit");
      EXPECT_EQ(call.owner, sub);
    }
  }
  ctx.TryCancel();
  (void)reader->Finish();

  // A sender's credential, the same rows: token and code, and the token verifies.
  grpc::ClientContext sender_ctx;
  sender_ctx.AddMetadata("authorization", absl::StrCat("Bearer ", kSubscriber));
  sender_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  req.set_consumer_group("mailroom");
  store_.QueueJobs({Row(1, false, 1), Row(2, true, 1)});
  auto sender = stub_->Subscribe(&sender_ctx, req);
  EXPECT_FALSE(Next(sender.get()).secrets_withheld());
  v1::SubscribeResponse sent = Next(sender.get());
  ASSERT_EQ(sent.jobs_size(), 2);
  std::vector<SigningKey> keys = {*ParseSigningKey(kKey)};
  EXPECT_TRUE(VerifyToken(keys, TokenAction::kActivation, sent.jobs(0).token(), "").ok());
  EXPECT_EQ(sent.jobs(1).code(), "97532");
  EXPECT_TRUE(
      VerifyToken(keys, TokenAction::kPasswordRecovery, sent.jobs(1).token(), "97532").ok());
  sender_ctx.TryCancel();
  (void)sender->Finish();
}

}  // namespace
}  // namespace mailroom

namespace mailroom {
namespace {

// A subscription that names a budget holder is dequeued for with the holder bound to its
// credential (as AcquireBudget binds it): its first dequeue registers the link, the later ones
// say it is registered.
TEST_F(JobPathTest, ASubscriptionsBudgetHolderGoesWithEachOfItsDequeues) {
  RecordingBudgetStore budgets;
  service_->SetBudgetStore(&budgets);
  v1::AcquireBudgetRequest acquire;
  acquire.set_consumer_group("mailroom");
  acquire.set_holder("sender-a-0123456789ab");
  acquire.set_emails(5);
  acquire.set_price_micros(100);
  v1::AcquireBudgetResponse granted;
  ASSERT_TRUE(stub_->AcquireBudget(Ctx(kSecond).get(), acquire, &granted).ok());
  const std::string bound = budgets.last_acquire.holder;
  ASSERT_THAT(bound, ::testing::StartsWith("sender-a-0123456789ab~"));

  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", absl::StrCat("Bearer ", kSecond));
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::SubscribeRequest req;
  req.set_consumer_group("mailroom");
  req.set_max_in_flight(1);
  req.set_budget_holder("sender-a-0123456789ab");
  store_.QueueJobs({Row(1, false, 1)});
  auto reader = stub_->Subscribe(&ctx, req);
  const std::string sub = Next(reader.get()).subscriber_id();
  ASSERT_EQ(Next(reader.get()).jobs_size(), 1);
  // The outcome frees the window: the dispatcher dequeues for it again.
  const int before = store_.CallCount("Dequeue");
  v1::AcknowledgeRequest ack = AckRequest(sub);
  Add(&ack, 1, v1::OUTCOME_SENT);
  v1::AcknowledgeResponse acked;
  ASSERT_TRUE(Ack(kSecond, ack, &acked).ok());
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", before + 1));
  std::vector<FakeStore::Call> mine;
  for (const FakeStore::Call& c : store_.Calls("Dequeue")) {
    if (c.owner == sub) mine.push_back(c);
  }
  ASSERT_GE(mine.size(), 2u);
  EXPECT_EQ(mine[0].holder, bound);
  EXPECT_FALSE(mine[0].holder_registered);
  EXPECT_EQ(mine.back().holder, bound);
  EXPECT_TRUE(mine.back().holder_registered);
  ctx.TryCancel();
  (void)reader->Finish();
}

}  // namespace
}  // namespace mailroom
