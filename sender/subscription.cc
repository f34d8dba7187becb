#include "sender/subscription.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace mailroom {

Subscription::Subscription(Options options) : opt_(std::move(options)), clock_(opt_.clock) {
  if (opt_.channel != nullptr) {
    channel_ = opt_.channel;
    stub_ = v1::Collector::NewStub(channel_);
    return;
  }
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

void Subscription::StartReceiving(JobSink* jobs) {
  jobs_ = jobs;
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
    if (!opt_.budget_holder.empty()) req.set_budget_holder(opt_.budget_holder);
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
          lease_ = absl::Milliseconds(resp.lease_duration_ms());
          // Confirm at once which of the jobs held from before are still ours.
          if (!leases_.empty()) renew_now_ = true;
        }
        LogInfo("subscribed", {{"group", opt_.group},
                               {"subscriber", ShortId(resp.subscriber_id())},
                               {"lease_ms", absl::StrCat(resp.lease_duration_ms())}});
      }
      if (resp.jobs_size() > 0) {
        std::vector<LeasedJob> jobs;
        jobs.reserve(resp.jobs_size());
        {
          absl::MutexLock lock(&mu_);
          // A message with jobs says how much of their leases is left as it was written (it
          // may have waited in the collector); a collector that does not say sends 0: the
          // whole lease.
          const absl::Duration left = absl::Milliseconds(resp.lease_left_ms());
          const absl::Time deadline =
              clock_->Now() + (resp.lease_left_ms() > 0 ? std::min(left, lease_) : lease_);
          for (v1::Job& j : *resp.mutable_jobs()) {
            LeaseRef lease{subscriber_id_, j.attempt()};
            leases_[j.job_id()] = HeldLease{lease, deadline};
            jobs.push_back(LeasedJob{std::move(j), std::move(lease)});
          }
        }
        jobs_.load()->Submit(std::move(jobs));
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
                                         {"error", st.error_message()},
                                         {"in_ms", absl::StrCat(absl::ToInt64Milliseconds(
                                                       opt_.max_backoff))}});
      backoff = opt_.max_backoff;
    } else {
      LogWarn("subscription ended; reconnecting",
              {{"code", absl::StrCat(st.error_code())}, {"error", st.error_message()},
               {"in_ms", absl::StrCat(absl::ToInt64Milliseconds(backoff))}});
    }
    Backoff(backoff);
    backoff = std::min(backoff * 2, opt_.max_backoff);
  }
}

void Subscription::Report(OutcomeReport report) {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(report.job_id);
  if (it == leases_.end()) {
    // The collector reported the lease lost (another member has the job now): an outcome
    // would be ignored anyway.
    LogWarn("outcome not reported: the job's lease is no longer ours",
            {{"job", absl::StrCat(report.job_id)}});
    return;
  }
  v1::JobOutcome outcome = report.ToProto();
  outcome.set_attempt(it->second.ref.attempt);
  outbox_.push_back(
      Pending{std::move(it->second.ref.subscriber_id), std::move(outcome), clock_->Now()});
  leases_.erase(it);
}

LeaseState Subscription::Check(const LeasedJob& job, absl::Duration* send_window) {
  return Check(job.job.job_id(), send_window);
}

LeaseState Subscription::Check(uint64_t id, absl::Duration* send_window) {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(id);
  if (it == leases_.end()) return LeaseState::kLost;
  const absl::Time now = clock_->Now();
  // Enough lease left for a send to finish and be reported before anyone else could be handed
  // the job. Otherwise forget it: renewing it later would keep a job we do not send.
  if (it->second.deadline - now <= lease_ / 4) {
    leases_.erase(it);
    return LeaseState::kLost;
  }
  const absl::Duration stall = std::min(lease_ / 10, absl::Seconds(2));
  const bool stalled = (sending_ > 0 && now - sending_oldest_ > stall) ||
                       (!outbox_.empty() && now - outbox_.front().queued > stall);
  if (stalled) return LeaseState::kWait;
  // Time for a send that is still reported before anyone else could be handed the job. Too
  // little (renewals are not getting through): keep the job unsent until a renewal gives it
  // more, or it runs down to the quarter above.
  const absl::Duration window = it->second.deadline - now - lease_ / 4;
  // A lease too short for the usual minimum still leaves its last quarter as the margin.
  if (window < std::min(kMinSendWindow, lease_ / 4)) return LeaseState::kWait;
  if (send_window != nullptr) *send_window = window;
  return LeaseState::kOwned;
}

size_t Subscription::leases() const {
  absl::MutexLock lock(&mu_);
  return leases_.size();
}

void Subscription::AckLoop() {
  absl::Duration backoff = absl::Milliseconds(100);
  while (true) {
    std::string sub;
    std::vector<v1::JobOutcome> outcomes;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return !outbox_.empty() || stopping_.load();
      };
      clock_->AwaitWithDeadline(&mu_, absl::Condition(&ready),
                                clock_->Now() + absl::Milliseconds(200));
      // Stop() comes after Flush(): what is still here could not be recorded in time.
      if (stopping_) return;
      if (outbox_.empty()) continue;
      if (opt_.ack_delay > absl::ZeroDuration()) {
        const size_t want = static_cast<size_t>(
            opt_.outcomes_per_ack > 0 ? opt_.outcomes_per_ack : std::max(1, opt_.max_in_flight / 2));
        auto gathered = [this, want]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
          return outbox_.size() >= want || stopping_.load();
        };
        clock_->AwaitWithDeadline(&mu_, absl::Condition(&gathered),
                                  clock_->Now() + opt_.ack_delay);
        if (stopping_) return;
      }
      // One call per lease holder: the outcomes of jobs received on the same stream.
      sub = outbox_.front().subscriber_id;
      sending_oldest_ = outbox_.front().queued;
      for (auto it = outbox_.begin(); it != outbox_.end() && outcomes.size() < 5000;) {
        if (it->subscriber_id == sub) {
          sending_oldest_ = std::min(sending_oldest_, it->queued);
          outcomes.push_back(std::move(it->outcome));
          it = outbox_.erase(it);
        } else {
          ++it;
        }
      }
      sending_ = outcomes.size();
    }
    v1::AcknowledgeRequest req;
    req.set_consumer_group(opt_.group);
    req.set_subscriber_id(sub);
    for (auto& o : outcomes) *req.add_outcomes() = o;
    grpc::ClientContext ctx;
    Authorize(&ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::AcknowledgeResponse resp;
    grpc::Status st = stub_->Acknowledge(&ctx, req, &resp);
    absl::MutexLock lock(&mu_);
    sending_ = 0;
    if (st.ok()) {
      // A rejected outcome is reported and dropped: the job keeps its lease and comes back
      // when it runs out. It never holds up the others.
      for (const auto& r : resp.rejected()) {
        LogError("outcome rejected by the collector",
                 {{"job", absl::StrCat(r.job_id())}, {"error", r.error()}});
      }
      if (resp.ignored_job_ids_size() > resp.rejected_size()) {
        LogWarn("outcomes ignored: those leases were no longer ours",
                {{"count", absl::StrCat(resp.ignored_job_ids_size() - resp.rejected_size())}});
      }
      backoff = absl::Milliseconds(100);
      continue;
    }
    if (st.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      LogError("acknowledgement rejected", {{"error", st.error_message()},
                                            {"dropped", absl::StrCat(outcomes.size())}});
      backoff = absl::Milliseconds(100);
      continue;
    }
    // Keep them (in front, in order) and try again: an outcome is never dropped.
    for (auto it = outcomes.rbegin(); it != outcomes.rend(); ++it) {
      outbox_.push_front(Pending{sub, std::move(*it), sending_oldest_});
    }
    LogWarn("acknowledgement failed; retrying",
            {{"code", absl::StrCat(st.error_code())}, {"error", st.error_message()},
             {"pending", absl::StrCat(outbox_.size())}});
    auto stopping = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_.load(); };
    clock_->AwaitWithDeadline(&mu_, absl::Condition(&stopping), clock_->Now() + backoff);
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
}

void Subscription::SleepUntil(absl::Time until) {
  absl::MutexLock lock(&mu_);
  auto wake = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return renew_now_ || stopping_.load();
  };
  clock_->AwaitWithDeadline(&mu_, absl::Condition(&wake), until);
}

void Subscription::Backoff(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !receiving_.load() || stopping_.load();
  };
  clock_->AwaitWithDeadline(&mu_, absl::Condition(&done), clock_->Now() + d);
}

void Subscription::RenewLoop() {
  while (!stopping_) {
    absl::Duration lease = this->lease();
    absl::Duration period = lease > absl::ZeroDuration() ? lease / 3 : absl::Seconds(1);
    SleepUntil(clock_->Now() + period);
    if (stopping_) break;
    {
      absl::MutexLock lock(&mu_);
      renew_now_ = false;
    }
    if (lease == absl::ZeroDuration() && this->lease() == absl::ZeroDuration()) continue;
    RenewAll();
  }
}

void Subscription::RenewAll() {
  // The leases held, by the subscription they came on.
  std::map<std::string, std::vector<std::pair<uint64_t, uint32_t>>> by_sub;
  absl::Duration lease;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, l] : leases_) by_sub[l.ref.subscriber_id].emplace_back(id, l.ref.attempt);
    lease = lease_;
  }
  std::vector<uint64_t> lost_all;
  for (const auto& [sub, held] : by_sub) {
    for (size_t i = 0; i < held.size(); i += 10000) {
      v1::RenewLeasesRequest req;
      req.set_consumer_group(opt_.group);
      req.set_subscriber_id(sub);
      for (size_t j = i; j < std::min(held.size(), i + 10000); ++j) {
        req.add_job_ids(held[j].first);
        req.add_attempts(held[j].second);
      }
      grpc::ClientContext ctx;
      Authorize(&ctx);
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      const absl::Time asked = clock_->Now();
      v1::RenewLeasesResponse resp;
      grpc::Status st = stub_->RenewLeases(&ctx, req, &resp);
      if (!st.ok()) {
        LogWarn("lease renewal failed", {{"code", absl::StrCat(st.error_code())},
                                         {"error", st.error_message()}});
        continue;
      }
      absl::flat_hash_set<uint64_t> lost(resp.lost_job_ids().begin(), resp.lost_job_ids().end());
      absl::MutexLock lock(&mu_);
      for (uint64_t id : req.job_ids()) {
        auto it = leases_.find(id);
        if (it == leases_.end() || it->second.ref.subscriber_id != sub) continue;
        if (lost.count(id) > 0) {
          leases_.erase(it);
          lost_all.push_back(id);
        } else {
          // Counted from before the call: never later than the collector's own deadline.
          it->second.deadline = asked + lease;
        }
      }
    }
  }
  if (!lost_all.empty()) {
    LogWarn("leases lost: those jobs went to another member and are not sent here",
            {{"count", absl::StrCat(lost_all.size())}});
    jobs_.load()->Drop(lost_all);
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
  return clock_->AwaitWithDeadline(&mu_, absl::Condition(&empty), clock_->Now() + timeout);
}

void Subscription::Stop() {
  StopReceiving();
  {
    // Under the lock, so waits on a condition over stopping_ see it at once.
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (reader_.joinable()) reader_.join();
  if (acker_.joinable()) acker_.join();
  if (renewer_.joinable()) renewer_.join();
}

absl::StatusOr<v1::GetUsageResponse> Subscription::Usage(absl::Duration timeout) {
  absl::Time deadline = clock_->Now() + timeout;
  grpc::Status st;
  while (true) {
    grpc::ClientContext ctx;
    Authorize(&ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    ctx.set_wait_for_ready(true);
    v1::GetUsageRequest req;
    req.set_consumer_group(opt_.group);
    v1::GetUsageResponse resp;
    st = stub_->GetUsage(&ctx, req, &resp);
    if (st.ok()) return resp;
    if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
        st.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
        st.error_code() == grpc::StatusCode::INVALID_ARGUMENT || clock_->Now() > deadline) {
      break;
    }
    if (stopping_ || !receiving_) return absl::CancelledError("shutting down");
    Backoff(absl::Milliseconds(200));
  }
  const std::string what = absl::StrCat("GetUsage: ", st.error_message());
  switch (st.error_code()) {
    case grpc::StatusCode::UNAUTHENTICATED: return absl::UnauthenticatedError(what);
    case grpc::StatusCode::PERMISSION_DENIED: return absl::PermissionDeniedError(what);
    case grpc::StatusCode::INVALID_ARGUMENT: return absl::InvalidArgumentError(what);
    default: return absl::UnavailableError(what);
  }
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
