#include "sender/lease/subscription.h"

#include <algorithm>
#include <iterator>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/backoff.h"
#include "common/log.h"

namespace mailroom {

namespace {

constexpr absl::Duration kFirstBackoff = absl::Milliseconds(100);
// Reconnects wait from half to all of their step, so senders that lost one collector at the same
// moment do not come back in step.
constexpr double kReconnectJitter = 0.5;

// Errors no retry fixes: the collector refuses this sender or its request.
bool Refused(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAUTHENTICATED || code == grpc::StatusCode::INVALID_ARGUMENT ||
         code == grpc::StatusCode::PERMISSION_DENIED;
}

std::chrono::system_clock::time_point InRealSeconds(int seconds) {
  return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

}  // namespace

std::shared_ptr<grpc::Channel> MakeCollectorChannel(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
  args.SetMaxReceiveMessageSize(64 << 20);
  return grpc::CreateCustomChannel(address, credentials, args);
}

Subscription::Subscription(Options options)
    : opt_(std::move(options)), clock_(opt_.clock), leases_(opt_.leases),
      channel_(opt_.channel != nullptr ? opt_.channel
                                       : MakeCollectorChannel(opt_.address, opt_.credentials)),
      stub_(v1::Collector::NewStub(channel_)), renewer_([this] { RenewLoop(); }, clock_) {}

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
  renewer_.Start();
}

grpc::Status Subscription::ReadStream(bool* answered) {
  *answered = false;
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
  std::string subscriber_id;
  bool first = true;
  while (reader->Read(&resp)) {
    if (first) {
      first = false;
      subscriber_id = resp.subscriber_id();
      connected_ = true;
      *answered = true;
      leases_->SetLease(absl::Milliseconds(resp.lease_duration_ms()));
      const bool held = leases_->leases() > 0;
      {
        absl::MutexLock lock(&mu_);
        ack_now_ = true;
      }
      // Confirm at once which of the jobs held from before are still ours.
      if (held) renewer_.Wake();
      LogInfo("subscribed", {{"group", opt_.group},
                             {"subscriber", ShortId(subscriber_id)},
                             {"lease_ms", absl::StrCat(resp.lease_duration_ms())}});
    }
    if (resp.jobs_size() == 0) continue;
    // A message with jobs says how much of their leases is left as it was written (it may
    // have waited in the collector); a collector that does not say sends 0: the whole lease.
    std::vector<v1::Job> jobs(std::make_move_iterator(resp.mutable_jobs()->begin()),
                              std::make_move_iterator(resp.mutable_jobs()->end()));
    jobs_.load()->Submit(
        leases_->Receive(subscriber_id, absl::Milliseconds(resp.lease_left_ms()), std::move(jobs)));
  }
  grpc::Status st = reader->Finish();
  connected_ = false;
  absl::MutexLock lock(&mu_);
  stream_ctx_ = nullptr;
  return st;
}

void Subscription::ReadLoop() {
  JitteredExponentialBackOffStrategy backoff(kFirstBackoff, opt_.max_backoff, kReconnectJitter,
                                             reconnect_random_);
  // Since the last answered stream: refused once (the reconnects stay slow until one is answered).
  bool refused = false;
  while (receiving_ && !stopping_) {
    bool answered = false;
    const grpc::Status st = ReadStream(&answered);
    if (answered) {
      backoff.Reset();
      refused = false;
    }
    if (!receiving_ || stopping_) break;
    if (Refused(st.error_code())) {
      // No retry fixes this; keep trying slowly so a fixed collector config is picked up.
      refused = true;
      LogError("subscription rejected",
               {{"code", absl::StrCat(st.error_code())},
                {"error", st.error_message()},
                {"in_ms", absl::StrCat(absl::ToInt64Milliseconds(opt_.max_backoff))}});
      Backoff(opt_.max_backoff);
      continue;
    }
    const absl::Duration delay = refused ? opt_.max_backoff : backoff.NextBackOff();
    LogWarn("subscription ended; reconnecting",
            {{"code", absl::StrCat(st.error_code())},
             {"error", st.error_message()},
             {"in_ms", absl::StrCat(absl::ToInt64Milliseconds(delay))}});
    Backoff(delay);
  }
}

bool Subscription::Acknowledge(LeaseTable::Batch* batch, std::vector<uint64_t>* ignored) {
  v1::AcknowledgeRequest req;
  req.set_consumer_group(opt_.group);
  req.set_subscriber_id(batch->subscriber_id);
  for (const auto& o : batch->outcomes) *req.add_outcomes() = o;
  grpc::ClientContext ctx;
  Authorize(&ctx);
  ctx.set_deadline(InRealSeconds(10));
  v1::AcknowledgeResponse resp;
  grpc::Status st = stub_->Acknowledge(&ctx, req, &resp);
  if (st.ok()) {
    // A rejected outcome is reported and dropped: the job keeps its lease and comes back
    // when it runs out. It never holds up the others.
    for (const auto& r : resp.rejected()) {
      LogError("outcome rejected by the collector",
               {{"job", absl::StrCat(r.job_id())}, {"error", r.error()}});
    }
    absl::flat_hash_set<uint64_t> rejected;
    for (const auto& r : resp.rejected()) rejected.insert(r.job_id());
    for (uint64_t id : resp.ignored_job_ids()) {
      if (rejected.count(id) == 0) ignored->push_back(id);
    }
    if (!ignored->empty()) {
      LogWarn("outcomes ignored: those leases were no longer ours",
              {{"count", absl::StrCat(ignored->size())}});
    }
    return true;
  }
  if (st.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
    LogError("acknowledgement rejected",
             {{"error", st.error_message()}, {"dropped", absl::StrCat(batch->outcomes.size())}});
    return true;
  }
  LogWarn("acknowledgement failed; retrying", {{"code", absl::StrCat(st.error_code())},
                                               {"error", st.error_message()},
                                               {"pending", absl::StrCat(leases_->pending_acks())}});
  return false;
}

void Subscription::AckLoop() {
  // Exact delays: one sender's acknowledgements to its collector.
  JitteredExponentialBackOffStrategy backoff(kFirstBackoff, absl::Seconds(5));
  const size_t want = static_cast<size_t>(
      opt_.outcomes_per_ack > 0 ? opt_.outcomes_per_ack : std::max(1, opt_.max_in_flight / 2));
  while (true) {
    std::optional<LeaseTable::Batch> batch = leases_->NextBatch(want, opt_.ack_delay);
    if (!batch.has_value()) return;  // closed by Stop()
    if (batch->outcomes.empty()) continue;
    std::vector<uint64_t> ignored;
    if (Acknowledge(&*batch, &ignored)) {
      leases_->Recorded(*batch, ignored);
      backoff.Reset();
      continue;
    }
    // Keep them and try again: an outcome is never dropped.
    leases_->Returned(*std::move(batch));
    Pause(backoff.NextBackOff());
  }
}

void Subscription::Backoff(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !receiving_.load() || stopping_.load();
  };
  clock_->AwaitWithDeadline(&mu_, absl::Condition(&done), clock_->Now() + d);
}

void Subscription::Pause(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  auto woken = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_.load() || ack_now_; };
  clock_->AwaitWithDeadline(&mu_, absl::Condition(&woken), clock_->Now() + d);
  ack_now_ = false;
}

void Subscription::RenewLoop() {
  for (;;) {
    const absl::Duration lease = leases_->lease();
    const absl::Duration period = lease > absl::ZeroDuration() ? lease / 3 : absl::Seconds(1);
    // A third of the lease, or less when a new stream asks for a renewal (Wake) or Stop().
    if (!renewer_.WaitFor(period)) return;
    if (leases_->lease() == absl::ZeroDuration()) continue;  // not subscribed yet
    RenewAll();
  }
}

void Subscription::RenewAll() {
  constexpr size_t kPerCall = 10000;
  std::vector<uint64_t> lost_all;
  for (const auto& [sub, held] : leases_->HeldBySubscription()) {
    for (size_t i = 0; i < held.size(); i += kPerCall) {
      v1::RenewLeasesRequest req;
      req.set_consumer_group(opt_.group);
      req.set_subscriber_id(sub);
      for (size_t j = i; j < std::min(held.size(), i + kPerCall); ++j) {
        req.add_job_ids(held[j].first);
        req.add_attempts(held[j].second);
      }
      grpc::ClientContext ctx;
      Authorize(&ctx);
      ctx.set_deadline(InRealSeconds(10));
      const absl::Time asked = clock_->Now();
      v1::RenewLeasesResponse resp;
      grpc::Status st = stub_->RenewLeases(&ctx, req, &resp);
      if (!st.ok()) {
        LogWarn("lease renewal failed",
                {{"code", absl::StrCat(st.error_code())}, {"error", st.error_message()}});
        continue;
      }
      absl::flat_hash_set<uint64_t> lost(resp.lost_job_ids().begin(), resp.lost_job_ids().end());
      std::vector<uint64_t> gone = leases_->ApplyRenewal(
          sub, absl::MakeConstSpan(req.job_ids().data(), req.job_ids().size()), lost, asked);
      lost_all.insert(lost_all.end(), gone.begin(), gone.end());
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

void Subscription::Stop() {
  StopReceiving();
  {
    // Under the lock, so waits on a condition over stopping_ see it at once.
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  renewer_.RequestStop();
  leases_->Close();
  if (reader_.joinable()) reader_.join();
  if (acker_.joinable()) acker_.join();
  renewer_.Stop();
}

absl::StatusOr<v1::GetUsageResponse> Subscription::Usage(absl::Duration timeout) {
  absl::Time deadline = clock_->Now() + timeout;
  grpc::Status st;
  while (true) {
    grpc::ClientContext ctx;
    Authorize(&ctx);
    ctx.set_deadline(InRealSeconds(2));
    ctx.set_wait_for_ready(true);
    v1::GetUsageRequest req;
    req.set_consumer_group(opt_.group);
    v1::GetUsageResponse resp;
    st = stub_->GetUsage(&ctx, req, &resp);
    if (st.ok()) return resp;
    if (Refused(st.error_code()) || clock_->Now() > deadline) break;
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

}  // namespace mailroom
