#include "sender/lease/lease_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace mailroom {

namespace {

// The most outcomes one Acknowledge call carries.
constexpr size_t kMaxBatch = 5000;

}  // namespace

LeaseTable::LeaseTable(Clock* clock) : clock_(clock) {}

void LeaseTable::SetLease(absl::Duration lease) {
  absl::MutexLock lock(&mu_);
  lease_ = lease;
}

absl::Duration LeaseTable::lease() const {
  absl::MutexLock lock(&mu_);
  return lease_;
}

std::vector<LeasedJob> LeaseTable::Receive(const std::string& subscriber_id, absl::Duration left,
                                           std::vector<v1::Job> jobs) {
  std::vector<LeasedJob> leased;
  leased.reserve(jobs.size());
  absl::MutexLock lock(&mu_);
  // The message may have waited in the collector: trust it only for what it says is left.
  const absl::Time deadline = clock_->Now() +
                              (left > absl::ZeroDuration() ? std::min(left, lease_) : lease_);
  for (v1::Job& j : jobs) {
    LeaseRef lease{subscriber_id, j.attempt()};
    leases_[j.job_id()] = HeldLease{lease, deadline};
    leased.push_back(LeasedJob{std::move(j), std::move(lease)});
  }
  return leased;
}

LeaseState LeaseTable::Check(const LeasedJob& job, absl::Duration* send_window) {
  return Check(job.job.job_id(), send_window);
}

bool LeaseTable::Stalled(absl::Time now) const {
  const absl::Duration stall = std::min(lease_ / 10, absl::Seconds(2));
  return (sending_ > 0 && now - sending_oldest_ > stall) ||
         (!outbox_.empty() && now - outbox_.front().queued > stall);
}

LeaseState LeaseTable::Check(uint64_t id, absl::Duration* send_window) {
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
  if (Stalled(now)) return LeaseState::kWait;
  // Time for a send that is still reported before anyone else could be handed the job. Too
  // little (renewals are not getting through): keep the job unsent until a renewal gives it
  // more, or it runs down to the quarter above.
  const absl::Duration window = it->second.deadline - now - lease_ / 4;
  // A lease too short for the usual minimum still leaves its last quarter as the margin.
  if (window < std::min(kMinSendWindow, lease_ / 4)) return LeaseState::kWait;
  if (send_window != nullptr) *send_window = window;
  return LeaseState::kOwned;
}

void LeaseTable::Report(OutcomeReport report) {
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

size_t LeaseTable::leases() const {
  absl::MutexLock lock(&mu_);
  return leases_.size();
}

std::optional<LeaseTable::Batch> LeaseTable::NextBatch(size_t want, absl::Duration gather) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !outbox_.empty() || closed_; };
  clock_->AwaitWithDeadline(&mu_, absl::Condition(&ready), clock_->Now() + absl::Milliseconds(200));
  // Closed after the last wait for acknowledgements: what is still here could not be recorded.
  if (closed_) return std::nullopt;
  Batch batch;
  if (outbox_.empty()) return batch;
  if (gather > absl::ZeroDuration()) {
    auto gathered = [this, want]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return outbox_.size() >= want || closed_;
    };
    clock_->AwaitWithDeadline(&mu_, absl::Condition(&gathered), clock_->Now() + gather);
    if (closed_) return std::nullopt;
  }
  // One call per lease holder: the outcomes of jobs received on the same stream.
  batch.subscriber_id = outbox_.front().subscriber_id;
  batch.oldest = outbox_.front().queued;
  for (auto it = outbox_.begin(); it != outbox_.end() && batch.outcomes.size() < kMaxBatch;) {
    if (it->subscriber_id == batch.subscriber_id) {
      batch.oldest = std::min(batch.oldest, it->queued);
      batch.outcomes.push_back(std::move(it->outcome));
      it = outbox_.erase(it);
    } else {
      ++it;
    }
  }
  sending_ = batch.outcomes.size();
  sending_oldest_ = batch.oldest;
  return batch;
}

void LeaseTable::Recorded() {
  absl::MutexLock lock(&mu_);
  sending_ = 0;
}

void LeaseTable::Returned(Batch batch) {
  absl::MutexLock lock(&mu_);
  sending_ = 0;
  for (auto it = batch.outcomes.rbegin(); it != batch.outcomes.rend(); ++it) {
    outbox_.push_front(Pending{batch.subscriber_id, std::move(*it), batch.oldest});
  }
}

bool LeaseTable::AwaitAcknowledged(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto empty = [this]()
                   ABSL_SHARED_LOCKS_REQUIRED(mu_) { return outbox_.empty() && sending_ == 0; };
  return clock_->AwaitWithDeadline(&mu_, absl::Condition(&empty), clock_->Now() + timeout);
}

size_t LeaseTable::pending_acks() const {
  absl::MutexLock lock(&mu_);
  return outbox_.size() + sending_;
}

void LeaseTable::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

std::map<std::string, std::vector<std::pair<uint64_t, uint32_t>>> LeaseTable::HeldBySubscription()
    const {
  std::map<std::string, std::vector<std::pair<uint64_t, uint32_t>>> by_sub;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, l] : leases_) by_sub[l.ref.subscriber_id].emplace_back(id, l.ref.attempt);
  return by_sub;
}

std::vector<uint64_t> LeaseTable::ApplyRenewal(const std::string& subscriber_id,
                                               absl::Span<const uint64_t> ids,
                                               const absl::flat_hash_set<uint64_t>& lost,
                                               absl::Time asked) {
  std::vector<uint64_t> gone;
  absl::MutexLock lock(&mu_);
  for (uint64_t id : ids) {
    auto it = leases_.find(id);
    // Reported meanwhile, or received again on another subscription: not this renewal's.
    if (it == leases_.end() || it->second.ref.subscriber_id != subscriber_id) continue;
    if (lost.count(id) > 0) {
      leases_.erase(it);
      gone.push_back(id);
    } else {
      it->second.deadline = asked + lease_;
    }
  }
  return gone;
}

}  // namespace mailroom
