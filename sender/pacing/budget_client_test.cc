// CollectorBudgetClient against a real gRPC server on 127.0.0.1 (port 0, no port sharing) that
// implements the collector's AcquireBudget and ReturnBudget, records every request and its
// metadata and answers as each test scripts: the fields sent, the answer mapped field by field,
// every error code passed through with its message, the deadline, a collector that is gone; and
// MakeHolderName's clean, unique names.
#include "sender/pacing/budget_client.h"

#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using ::testing::MatchesRegex;

// The collector's budget calls: records what it is asked, answers what the test set.
class RecordingCollector final : public v1::Collector::Service {
 public:
  grpc::Status AcquireBudget(grpc::ServerContext* ctx, const v1::AcquireBudgetRequest* req,
                             v1::AcquireBudgetResponse* resp) override {
    absl::MutexLock lock(&mu_);
    acquires_.push_back(*req);
    authorization_.push_back(Authorization(*ctx));
    if (!status_.ok()) return status_;
    *resp = acquire_answer_;
    return grpc::Status::OK;
  }

  grpc::Status ReturnBudget(grpc::ServerContext* ctx, const v1::ReturnBudgetRequest* req,
                            v1::ReturnBudgetResponse* resp) override {
    {
      absl::MutexLock lock(&mu_);
      returns_.push_back(*req);
      authorization_.push_back(Authorization(*ctx));
    }
    if (hold_) {
      // Answer only after the client has given up (the test says so), never on a timer.
      called_.Notify();
      release_.WaitForNotification();
    }
    absl::MutexLock lock(&mu_);
    if (!status_.ok()) return status_;
    resp->set_returned(returned_);
    return grpc::Status::OK;
  }

  void Answer(const v1::AcquireBudgetResponse& a) {
    absl::MutexLock lock(&mu_);
    acquire_answer_ = a;
  }
  void AnswerReturned(uint32_t n) {
    absl::MutexLock lock(&mu_);
    returned_ = n;
  }
  void Fail(grpc::Status st) {
    absl::MutexLock lock(&mu_);
    status_ = std::move(st);
  }
  // ReturnBudget waits for Release() before it answers.
  void Hold() { hold_ = true; }
  void WaitCalled() { called_.WaitForNotification(); }
  void Release() {
    if (!release_.HasBeenNotified()) release_.Notify();
  }

  std::vector<v1::AcquireBudgetRequest> acquires() {
    absl::MutexLock lock(&mu_);
    return acquires_;
  }
  std::vector<v1::ReturnBudgetRequest> returns() {
    absl::MutexLock lock(&mu_);
    return returns_;
  }
  // Each call's authorization header, nullopt when it had none.
  std::vector<std::optional<std::string>> authorization() {
    absl::MutexLock lock(&mu_);
    return authorization_;
  }

 private:
  static std::optional<std::string> Authorization(const grpc::ServerContext& ctx) {
    auto it = ctx.client_metadata().find("authorization");
    if (it == ctx.client_metadata().end()) return std::nullopt;
    return std::string(it->second.data(), it->second.size());
  }

  absl::Mutex mu_;
  std::vector<v1::AcquireBudgetRequest> acquires_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReturnBudgetRequest> returns_ ABSL_GUARDED_BY(mu_);
  std::vector<std::optional<std::string>> authorization_ ABSL_GUARDED_BY(mu_);
  v1::AcquireBudgetResponse acquire_answer_ ABSL_GUARDED_BY(mu_);
  uint32_t returned_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  bool hold_ = false;  // set before any call
  absl::Notification called_, release_;
};

class BudgetClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.RegisterService(&collector_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }

  void TearDown() override {
    collector_.Release();
    if (server_ != nullptr) server_->Shutdown();
  }

  std::shared_ptr<grpc::Channel> Channel() {
    return grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                               grpc::InsecureChannelCredentials());
  }

  CollectorBudgetClient Client(const std::string& bearer = "secret-token",
                               absl::Duration timeout = absl::Seconds(5)) {
    return CollectorBudgetClient(Channel(), "mailroom", "sender-a-0123456789ab", bearer, timeout);
  }

  RecordingCollector collector_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(BudgetClientTest, AcquireSendsTheGroupHolderAskRecoveryAndPrice) {
  CollectorBudgetClient client = Client();
  ASSERT_TRUE(client.Acquire(25, true, 130).ok());
  ASSERT_TRUE(client.Acquire(1, false, 7).ok());

  const std::vector<v1::AcquireBudgetRequest> got = collector_.acquires();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].consumer_group(), "mailroom");
  EXPECT_EQ(got[0].holder(), "sender-a-0123456789ab");
  EXPECT_EQ(got[0].emails(), 25u);
  EXPECT_TRUE(got[0].recovery());
  EXPECT_EQ(got[0].price_micros(), 130);
  EXPECT_EQ(got[1].emails(), 1u);
  EXPECT_FALSE(got[1].recovery());
  EXPECT_EQ(got[1].price_micros(), 7);
  EXPECT_THAT(collector_.authorization(),
              ::testing::ElementsAre("Bearer secret-token", "Bearer secret-token"));
}

TEST_F(BudgetClientTest, AcquireMapsAGrantFieldByField) {
  v1::AcquireBudgetResponse a;
  a.set_grant_id(0xfeedfacecafe1234ULL);
  a.set_emails(17);
  a.set_expires_in_ms(45000);
  a.set_retry_after_ms(0);
  a.set_exhausted(false);
  a.set_pace_per_second(2.75);
  collector_.Answer(a);

  absl::StatusOr<v1::AcquireBudgetResponse> got = Client().Acquire(20, false, 100);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->grant_id(), 0xfeedfacecafe1234ULL);
  EXPECT_EQ(got->emails(), 17u);
  EXPECT_EQ(got->expires_in_ms(), 45000);
  EXPECT_EQ(got->retry_after_ms(), 0);
  EXPECT_FALSE(got->exhausted());
  EXPECT_EQ(got->pace_per_second(), 2.75);
}

TEST_F(BudgetClientTest, AcquireMapsARefusalWithItsRetryAfterAndExhaustion) {
  v1::AcquireBudgetResponse a;
  a.set_emails(0);
  a.set_retry_after_ms(3600000);
  a.set_exhausted(true);
  a.set_pace_per_second(0);
  collector_.Answer(a);
  absl::StatusOr<v1::AcquireBudgetResponse> spent = Client().Acquire(5, false, 100);
  ASSERT_TRUE(spent.ok()) << spent.status();
  EXPECT_EQ(spent->grant_id(), 0u);
  EXPECT_EQ(spent->emails(), 0u);
  EXPECT_EQ(spent->retry_after_ms(), 3600000);
  EXPECT_TRUE(spent->exhausted());
  EXPECT_EQ(spent->pace_per_second(), 0.0);

  // Unlimited: the pace is infinite and comes through as such.
  a.set_exhausted(false);
  a.set_retry_after_ms(250);
  a.set_pace_per_second(std::numeric_limits<double>::infinity());
  collector_.Answer(a);
  absl::StatusOr<v1::AcquireBudgetResponse> paced = Client().Acquire(5, false, 100);
  ASSERT_TRUE(paced.ok()) << paced.status();
  EXPECT_EQ(paced->retry_after_ms(), 250);
  EXPECT_FALSE(paced->exhausted());
  EXPECT_TRUE(std::isinf(paced->pace_per_second()));
}

TEST_F(BudgetClientTest, ReturnSendsTheGrantAndItsUnusedEmailsAndGivesWhatWasCredited) {
  collector_.AnswerReturned(3);
  absl::StatusOr<int> credited = Client().Return(0xabcdef0123456789ULL, 4);
  ASSERT_TRUE(credited.ok()) << credited.status();
  EXPECT_EQ(*credited, 3);

  const std::vector<v1::ReturnBudgetRequest> got = collector_.returns();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].consumer_group(), "mailroom");
  EXPECT_EQ(got[0].holder(), "sender-a-0123456789ab");
  EXPECT_EQ(got[0].grant_id(), 0xabcdef0123456789ULL);
  EXPECT_EQ(got[0].emails(), 4u);

  collector_.AnswerReturned(0);  // not this holder's grant, or returned already
  credited = Client().Return(0xabcdef0123456789ULL, 4);
  ASSERT_TRUE(credited.ok()) << credited.status();
  EXPECT_EQ(*credited, 0);
}

TEST_F(BudgetClientTest, AnEmptyBearerSendsNoAuthorizationHeader) {
  CollectorBudgetClient client = Client("");
  ASSERT_TRUE(client.Acquire(1, false, 1).ok());
  ASSERT_TRUE(client.Return(1, 1).ok());
  EXPECT_THAT(collector_.authorization(), ::testing::ElementsAre(std::nullopt, std::nullopt));
}

TEST_F(BudgetClientTest, EveryErrorOfTheCollectorComesBackWithItsCodeAndMessage) {
  const std::vector<std::pair<grpc::StatusCode, absl::StatusCode>> codes = {
      {grpc::StatusCode::UNAVAILABLE, absl::StatusCode::kUnavailable},
      {grpc::StatusCode::PERMISSION_DENIED, absl::StatusCode::kPermissionDenied},
      {grpc::StatusCode::INVALID_ARGUMENT, absl::StatusCode::kInvalidArgument},
      {grpc::StatusCode::UNAUTHENTICATED, absl::StatusCode::kUnauthenticated},
      {grpc::StatusCode::RESOURCE_EXHAUSTED, absl::StatusCode::kResourceExhausted},
      {grpc::StatusCode::NOT_FOUND, absl::StatusCode::kNotFound},
      {grpc::StatusCode::FAILED_PRECONDITION, absl::StatusCode::kFailedPrecondition},
      {grpc::StatusCode::INTERNAL, absl::StatusCode::kInternal},
  };
  CollectorBudgetClient client = Client();
  for (const auto& [grpc_code, absl_code] : codes) {
    const std::string message = "refused with " + std::to_string(grpc_code);
    collector_.Fail(grpc::Status(grpc_code, message));
    absl::StatusOr<v1::AcquireBudgetResponse> a = client.Acquire(1, false, 100);
    EXPECT_EQ(a.status().code(), absl_code) << a.status();
    EXPECT_EQ(a.status().message(), message);
    absl::StatusOr<int> r = client.Return(9, 1);
    EXPECT_EQ(r.status().code(), absl_code) << r.status();
    EXPECT_EQ(r.status().message(), message);
  }
  EXPECT_EQ(collector_.acquires().size(), codes.size());
  EXPECT_EQ(collector_.returns().size(), codes.size());
}

TEST_F(BudgetClientTest, ACollectorThatDoesNotAnswerInTimeIsDeadlineExceeded) {
  collector_.Hold();
  CollectorBudgetClient client = Client("secret-token", absl::Milliseconds(300));
  absl::StatusOr<int> r = client.Return(9, 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  collector_.WaitCalled();  // the call did reach the collector: the deadline ended it
  collector_.Release();
}

TEST_F(BudgetClientTest, ACollectorThatIsGoneIsUnavailable) {
  std::shared_ptr<grpc::Channel> channel = Channel();
  server_->Shutdown();
  server_->Wait();
  server_.reset();
  CollectorBudgetClient client(channel, "mailroom", "sender-a-0123456789ab", "secret-token");
  EXPECT_EQ(client.Acquire(1, false, 100).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client.Return(9, 1).status().code(), absl::StatusCode::kUnavailable);
}

TEST(MakeHolderNameTest, KeepsPrintableAsciiAndAddsTwelveHexDigits) {
  EXPECT_THAT(MakeHolderName("sender-eu-1"), MatchesRegex("sender-eu-1-[0-9a-f]{12}"));
  EXPECT_THAT(MakeHolderName("my host\tname\xc3\xa9"), MatchesRegex("my_host_name__-[0-9a-f]{12}"));
  EXPECT_THAT(MakeHolderName(""), MatchesRegex("sender-[0-9a-f]{12}"));
}

TEST(MakeHolderNameTest, CutsALongNameTo160AndStaysWithinTheCollectors200) {
  const std::string name = MakeHolderName(std::string(500, 'x'));
  EXPECT_EQ(name.size(), 160u + 1 + 12);
  EXPECT_EQ(name.substr(0, 161), std::string(160, 'x') + "-");
}

TEST(MakeHolderNameTest, TwoProcessesOfOneNameGetDifferentHolders) {
  EXPECT_NE(MakeHolderName("sender"), MakeHolderName("sender"));
}

}  // namespace
}  // namespace mailroom
