#include "testing/collector_client.h"

namespace mailroom::testing {

void Authorize(grpc::ClientContext* ctx, const std::string& bearer) {
  if (!bearer.empty()) ctx->AddMetadata("authorization", "Bearer " + bearer);
}

TestSubscriber::TestSubscriber(std::shared_ptr<grpc::Channel> channel, const std::string& bearer,
                               const std::string& group, int max_in_flight, const std::string& name)
    : stub_(v1::Collector::NewStub(channel)), bearer_(bearer), group_(group) {
  Authorize(&ctx_, bearer);
  v1::SubscribeRequest req;
  req.set_consumer_group(group);
  req.set_max_in_flight(max_in_flight);
  req.set_subscriber_name(name);
  reader_ = stub_->Subscribe(&ctx_, req);
  thread_ = std::thread([this] { ReadLoop(); });
}

TestSubscriber::~TestSubscriber() {
  Cancel();
  if (thread_.joinable()) thread_.join();
}

void TestSubscriber::ReadLoop() {
  v1::SubscribeResponse resp;
  while (reader_->Read(&resp)) {
    absl::Time now = absl::Now();
    absl::MutexLock lock(&mu_);
    if (!subscribed_) {
      subscribed_ = true;
      subscriber_id_ = resp.subscriber_id();
    }
    for (auto& j : *resp.mutable_jobs()) {
      arrivals_.emplace_back(j.job_id(), now);
      attempts_[j.job_id()] = j.attempt();
      jobs_.push_back(std::move(j));
    }
  }
  grpc::Status st = reader_->Finish();
  absl::MutexLock lock(&mu_);
  status_ = st;
  done_ = true;
}

bool TestSubscriber::WaitSubscribed(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto cond = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return subscribed_ || done_; };
  mu_.AwaitWithTimeout(absl::Condition(&cond), timeout);
  return subscribed_;
}

size_t TestSubscriber::WaitForJobs(size_t n, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto cond = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return jobs_.size() >= n || done_; };
  mu_.AwaitWithTimeout(absl::Condition(&cond), timeout);
  return jobs_.size();
}

std::vector<v1::Job> TestSubscriber::Jobs() const {
  absl::MutexLock lock(&mu_);
  return jobs_;
}

std::vector<v1::Job> TestSubscriber::Take() {
  absl::MutexLock lock(&mu_);
  std::vector<v1::Job> out(jobs_.begin() + taken_, jobs_.end());
  taken_ = jobs_.size();
  return out;
}

size_t TestSubscriber::Received() const {
  absl::MutexLock lock(&mu_);
  return jobs_.size();
}

std::vector<std::pair<uint64_t, absl::Time>> TestSubscriber::Arrivals() const {
  absl::MutexLock lock(&mu_);
  return arrivals_;
}

std::string TestSubscriber::subscriber_id() const {
  absl::MutexLock lock(&mu_);
  return subscriber_id_;
}

uint32_t TestSubscriber::AttemptOf(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = attempts_.find(id);
  return it == attempts_.end() ? 0 : it->second;
}

grpc::Status TestSubscriber::Ack(const std::vector<uint64_t>& ids, v1::Outcome outcome,
                                 const std::string& reason, int64_t cost_micros,
                                 v1::AcknowledgeResponse* response) {
  v1::AcknowledgeRequest req;
  req.set_consumer_group(group_);
  req.set_subscriber_id(subscriber_id());
  for (uint64_t id : ids) {
    auto* o = req.add_outcomes();
    o->set_job_id(id);
    o->set_outcome(outcome);
    o->set_reason(reason);
    o->set_cost_micros(cost_micros);
    o->set_attempt(AttemptOf(id));
  }
  v1::AcknowledgeResponse resp;
  grpc::ClientContext ctx;
  Authorize(&ctx, bearer_);
  grpc::Status st = stub_->Acknowledge(&ctx, req, response != nullptr ? response : &resp);
  return st;
}

void TestSubscriber::Cancel() { ctx_.TryCancel(); }

grpc::Status TestSubscriber::Finished(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto cond = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return done_; };
  mu_.AwaitWithTimeout(absl::Condition(&cond), timeout);
  return status_;
}

}  // namespace mailroom::testing
