#include "sender/lease/lease_table.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace mailroom {

namespace {

// The most outcomes one Acknowledge call carries.
constexpr size_t kMaxBatch = 5000;

// An outcome that ends the job (the others hand it back to be sent later).
bool Final(v1::Outcome o) {
  return o == v1::OUTCOME_SENT || o == v1::OUTCOME_FAILED || o == v1::OUTCOME_EXPIRED;
}

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
  size_t again = 0;
  {
    absl::MutexLock lock(&mu_);
    // The message may have waited in the collector: trust it only for what it says is left.
    const absl::Time deadline = clock_->Now() +
                                (left > absl::ZeroDuration() ? std::min(left, lease_) : lease_);
    // Outcomes still queued, by job, to be put under their new lease in one pass.
    absl::flat_hash_map<uint64_t, uint32_t> queued_again;
    for (v1::Job& j : jobs) {
      if (ReportAgain(subscriber_id, j, &queued_again)) {
        ++again;
        continue;
      }
      LeaseRef lease{subscriber_id, j.attempt()};
      leases_[j.job_id()] = HeldLease{lease, deadline};
      leased.push_back(LeasedJob{std::move(j), std::move(lease)});
    }
    for (Pending& p : outbox_) {
      if (queued_again.empty()) break;
      auto it = queued_again.find(p.outcome.job_id());
      if (it == queued_again.end() || !Final(p.outcome.outcome())) continue;
      p.subscriber_id = subscriber_id;
      p.outcome.set_attempt(it->second);
      queued_again.erase(it);
    }
    // Not in the outbox: in the batch in flight, queued again under this lease unless that
    // batch is recorded.
    for (const auto& [id, attempt] : queued_again) {
      again_in_flight_[id] = LeaseRef{subscriber_id, attempt};
    }
    received_again_ += again;
  }
  if (again > 0) {
    LogInfo("jobs received again before their outcomes were recorded: not sent again, their "
            "outcomes are reported under the new leases",
            {{"count", absl::StrCat(again)}});
  }
  return leased;
}

bool LeaseTable::ReportAgain(const std::string& subscriber_id, const v1::Job& job,
                             absl::flat_hash_map<uint64_t, uint32_t>* queued_again) {
  const uint64_t id = job.job_id();
  if (auto it = ignored_.find(id); it != ignored_.end()) {
    // Its ignored_order_ entry stays until pruned; PruneIgnored skips it.
    v1::JobOutcome outcome = std::move(it->second.outcome);
    ignored_.erase(it);
    outcome.set_attempt(job.attempt());
    outbox_.push_back(Pending{subscriber_id, std::move(outcome), clock_->Now()});
    unrecorded_.insert(id);
    return true;
  }
  if (unrecorded_.count(id) == 0) return false;
  // Queued or in flight: Receive finds which and puts it under this lease.
  (*queued_again)[id] = job.attempt();
  return true;
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
  if (Final(outcome.outcome())) unrecorded_.insert(report.job_id);
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

void LeaseTable::Recorded(const Batch& batch, absl::Span<const uint64_t> ignored) {
  const absl::flat_hash_set<uint64_t> not_recorded(ignored.begin(), ignored.end());
  absl::MutexLock lock(&mu_);
  sending_ = 0;
  const absl::Time now = clock_->Now();
  for (const v1::JobOutcome& o : batch.outcomes) {
    const uint64_t id = o.job_id();
    // Not final (a RETRY or DEFER: its job is to be sent again), or not tracked.
    if (!Final(o.outcome()) || unrecorded_.erase(id) == 0) continue;
    if (auto again = again_in_flight_.find(id); again != again_in_flight_.end()) {
      // Handed to us again while this batch was in flight: report it under the new lease.
      v1::JobOutcome outcome = o;
      outcome.set_attempt(again->second.attempt);
      outbox_.push_back(Pending{std::move(again->second.subscriber_id), std::move(outcome), now});
      unrecorded_.insert(id);
      again_in_flight_.erase(again);
      continue;
    }
    if (not_recorded.count(id) == 0) continue;
    ignored_[id] = Ignored{o, now};
    ignored_order_.emplace_back(now, id);
  }
  PruneIgnored(now);
}

void LeaseTable::PruneIgnored(absl::Time now) {
  while (!ignored_order_.empty() && (ignored_order_.size() > kMaxUnrecorded ||
                                     now - ignored_order_.front().first > kUnrecordedKept)) {
    const auto [since, id] = ignored_order_.front();
    ignored_order_.pop_front();
    // Skip an entry whose outcome was reported again (or ignored again, later) since.
    if (auto it = ignored_.find(id); it != ignored_.end() && it->second.since == since) {
      ignored_.erase(it);
    }
  }
}

void LeaseTable::Returned(Batch batch) {
  absl::MutexLock lock(&mu_);
  sending_ = 0;
  for (auto it = batch.outcomes.rbegin(); it != batch.outcomes.rend(); ++it) {
    std::string subscriber_id = batch.subscriber_id;
    if (auto again = again_in_flight_.find(it->job_id()); again != again_in_flight_.end()) {
      subscriber_id = std::move(again->second.subscriber_id);
      it->set_attempt(again->second.attempt);
      again_in_flight_.erase(again);
    }
    outbox_.push_front(Pending{std::move(subscriber_id), std::move(*it), batch.oldest});
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

uint64_t LeaseTable::received_again() const {
  absl::MutexLock lock(&mu_);
  return received_again_;
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
