#include "sender/subscription.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "collector/common/log.h"

namespace mailroom {

Subscription::Subscription(Options options, std::function<void(std::vector<v1::Job>)> on_jobs,
                           std::function<std::vector<uint64_t>()> held)
    : opt_(std::move(options)), on_jobs_(std::move(on_jobs)), held_(std::move(held)) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
  args.SetMaxReceiveMessageSize(64 << 20);
  channel_ = grpc::CreateCustomChannel(opt_.address, opt_.credentials, args);
  stub_ = v1::Collector::NewStub(channel_);
}

Subscription::~Subscription() { Stop(); }

void Subscription::Authorize(grpc::ClientContext* ctx) const {
  if (!opt_.bearer.empty()) ctx->AddMetadata("authorization", "Bearer " + opt_.bearer);
}

void Subscription::StartReceiving() {
  reader_ = std::thread([this] { ReadLoop(); });
}

void Subscription::Start() {
  acker_ = std::thread([this] { AckLoop(); });
  renewer_ = std::thread([this] { RenewLoop(); });
}

void Subscription::ReadLoop() {
  absl::Duration backoff = absl::Milliseconds(100);
  while (receiving_ && !stopping_) {
    grpc::ClientContext ctx;
    Authorize(&ctx);
    {
      absl::MutexLock lock(&mu_);
      stream_ctx_ = &ctx;
    }
    v1::SubscribeRequest req;
    req.set_consumer_group(opt_.group);
    req.set_max_in_flight(opt_.max_in_flight);
    req.set_subscriber_name(opt_.name);
    auto reader = stub_->Subscribe(&ctx, req);
    v1::SubscribeResponse resp;
    bool first = true;
    while (reader->Read(&resp)) {
      if (first) {
        first = false;
        connected_ = true;
        backoff = absl::Milliseconds(100);
        {
          absl::MutexLock lock(&mu_);
          subscriber_id_ = resp.subscriber_id();
          lease_ = absl::Milliseconds(resp.lease_ms());
        }
        LogInfo("subscribed", {{"group", opt_.group},
                               {"subscriber", resp.subscriber_id()},
                               {"lease_ms", absl::StrCat(resp.lease_ms())}});
      }
      if (resp.jobs_size() > 0) {
        std::vector<v1::Job> jobs(std::make_move_iterator(resp.mutable_jobs()->begin()),
                                  std::make_move_iterator(resp.mutable_jobs()->end()));
        on_jobs_(std::move(jobs));
      }
    }
    grpc::Status st = reader->Finish();
    connected_ = false;
    {
      absl::MutexLock lock(&mu_);
      stream_ctx_ = nullptr;
    }
    if (!receiving_ || stopping_) break;
    if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
        st.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
        st.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
      // No retry fixes this; keep trying slowly so a fixed collector config is picked up.
      LogError("subscription rejected", {{"code", absl::StrCat(st.error_code())},
                                         {"error", st.error_message()}});
      backoff = opt_.max_backoff;
    } else {
      LogWarn("subscription ended; reconnecting",
              {{"code", absl::StrCat(st.error_code())}, {"error", st.error_message()},
               {"in_ms", absl::StrCat(absl::ToInt64Milliseconds(backoff))}});
    }
    absl::Time until = absl::Now() + backoff;
    while (receiving_ && !stopping_ && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    backoff = std::min(backoff * 2, opt_.max_backoff);
  }
}

void Subscription::Report(v1::JobOutcome outcome) {
  absl::MutexLock lock(&mu_);
  outbox_.push_back(std::move(outcome));
}

void Subscription::AckLoop() {
  absl::Duration backoff = absl::Milliseconds(100);
  while (true) {
    std::vector<v1::JobOutcome> batch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return !outbox_.empty() || stopping_.load();
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(200));
      if (outbox_.empty()) {
        if (stopping_) return;
        continue;
      }
      size_t n = std::min<size_t>(outbox_.size(), 5000);
      batch.assign(std::make_move_iterator(outbox_.begin()),
                   std::make_move_iterator(outbox_.begin() + n));
      outbox_.erase(outbox_.begin(), outbox_.begin() + n);
      sending_ = n;
    }
    v1::AcknowledgeRequest req;
    req.set_consumer_group(opt_.group);
    for (auto& o : batch) *req.add_outcomes() = o;
    grpc::ClientContext ctx;
    Authorize(&ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::AcknowledgeResponse resp;
    grpc::Status st = stub_->Acknowledge(&ctx, req, &resp);
    absl::MutexLock lock(&mu_);
    sending_ = 0;
    if (st.ok() || st.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      if (!st.ok()) {
        LogError("acknowledgement rejected", {{"error", st.error_message()}});
      }
      backoff = absl::Milliseconds(100);
      continue;
    }
    // Keep them (in front, in order) and try again: an outcome is never dropped.
    outbox_.insert(outbox_.begin(), std::make_move_iterator(batch.begin()),
                   std::make_move_iterator(batch.end()));
    LogWarn("acknowledgement failed; retrying",
            {{"error", st.error_message()}, {"pending", absl::StrCat(outbox_.size())}});
    mu_.Unlock();
    absl::SleepFor(backoff);
    mu_.Lock();
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
}

void Subscription::RenewLoop() {
  while (!stopping_) {
    absl::Duration lease = this->lease();
    absl::Duration period = lease > absl::ZeroDuration() ? lease / 3 : absl::Seconds(1);
    absl::Time until = absl::Now() + period;
    while (!stopping_ && absl::Now() < until) absl::SleepFor(absl::Milliseconds(50));
    if (stopping_ || lease == absl::ZeroDuration()) continue;
    std::vector<uint64_t> ids = held_();
    std::string sub;
    {
      absl::MutexLock lock(&mu_);
      sub = subscriber_id_;
    }
    for (size_t i = 0; i < ids.size(); i += 10000) {
      v1::RenewLeasesRequest req;
      req.set_consumer_group(opt_.group);
      req.set_subscriber_id(sub);
      for (size_t j = i; j < std::min(ids.size(), i + 10000); ++j) req.add_job_ids(ids[j]);
      grpc::ClientContext ctx;
      Authorize(&ctx);
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      v1::RenewLeasesResponse resp;
      grpc::Status st = stub_->RenewLeases(&ctx, req, &resp);
      if (!st.ok()) {
        LogWarn("lease renewal failed", {{"error", st.error_message()}});
      }
    }
  }
}

void Subscription::StopReceiving() {
  receiving_ = false;
  absl::MutexLock lock(&mu_);
  if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
}

bool Subscription::Flush(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto empty = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return outbox_.empty() && sending_ == 0;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&empty), timeout);
}

void Subscription::Stop() {
  StopReceiving();
  stopping_ = true;
  if (reader_.joinable()) reader_.join();
  if (acker_.joinable()) acker_.join();
  if (renewer_.joinable()) renewer_.join();
}

absl::StatusOr<v1::GetUsageResponse> Subscription::Usage(absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  grpc::Status st;
  while (true) {
    grpc::ClientContext ctx;
    Authorize(&ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    ctx.set_wait_for_ready(true);
    v1::GetUsageRequest req;
    req.set_consumer_group(opt_.group);
    v1::GetUsageResponse resp;
    st = stub_->GetUsage(&ctx, req, &resp);
    if (st.ok()) return resp;
    if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
        st.error_code() == grpc::StatusCode::INVALID_ARGUMENT || absl::Now() > deadline ||
        stopping_) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  return absl::UnavailableError(absl::StrCat("GetUsage: ", st.error_message()));
}

absl::Duration Subscription::lease() const {
  absl::MutexLock lock(&mu_);
  return lease_;
}

size_t Subscription::pending_acks() const {
  absl::MutexLock lock(&mu_);
  return outbox_.size() + sending_;
}

}  // namespace mailroom
