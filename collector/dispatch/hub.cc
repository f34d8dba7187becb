#include "collector/dispatch/hub.h"

#include <algorithm>

namespace mailroom {

int RecoveryLane(int max_in_flight) { return std::max(10, max_in_flight / 10); }

SubscribeReactor::SubscribeReactor(std::shared_ptr<Subscriber> sub,
                                   std::function<void(const std::shared_ptr<Subscriber>&)> on_done)
    : sub_(std::move(sub)), on_done_(std::move(on_done)) {}

void SubscribeReactor::OnWriteDone(bool ok) { sub_->OnWriteDone(ok); }

void SubscribeReactor::OnCancel() {
  // The client went away or the server is shutting down: end the RPC (exactly once).
  sub_->Finish(grpc::Status::CANCELLED);
}

void SubscribeReactor::OnDone() {
  sub_->Detach();
  on_done_(sub_);
  delete this;
}

void Subscriber::Attach(SubscribeReactor* reactor, v1::SubscribeResponse welcome) {
  absl::MutexLock lock(&mu_);
  reactor_ = reactor;
  queue_.push_front(Outgoing{std::move(welcome), absl::InfiniteFuture()});
  StartNextLocked();
}

void Subscriber::Detach() {
  absl::MutexLock lock(&mu_);
  reactor_ = nullptr;
  finished_ = true;
  DropQueueLocked();
}

void Subscriber::DropQueueLocked() {
  for (const Outgoing& out : queue_) {
    for (const auto& job : out.message.jobs()) unsent_.push_back(job.job_id());
  }
  queue_.clear();
}

std::vector<uint64_t> Subscriber::TakeUnsent() {
  absl::MutexLock lock(&mu_);
  return std::move(unsent_);
}

void Subscriber::SetBudgetHolder(std::string holder) {
  absl::MutexLock lock(&mu_);
  budget_holder_ = std::move(holder);
}

DequeueRequest Subscriber::NextDequeue(int limit, absl::Duration lease,
                                       bool recoveries_only) const {
  absl::MutexLock lock(&mu_);
  return DequeueRequest{
      group_, limit, id_, lease, recoveries_only, budget_holder_, holder_registered_};
}

void Subscriber::DequeueDone() {
  absl::MutexLock lock(&mu_);
  holder_registered_ = !budget_holder_.empty();
}

int Subscriber::Room() const {
  absl::MutexLock lock(&mu_);
  if (finished_) return 0;
  return std::max(0, max_in_flight_ - static_cast<int>(in_flight_.size()));
}

int Subscriber::LaneRoom() const {
  absl::MutexLock lock(&mu_);
  if (finished_) return 0;
  return std::max(0, lane_ - static_cast<int>(lane_in_flight_.size()));
}

bool Subscriber::Deliver(v1::SubscribeResponse message, absl::Time lease_end, bool lane) {
  if (secrets_ == JobSecrets::kWithheld) {
    // The last point before the stream: whatever a caller built, an observer's jobs leave
    // without the credentials that take over the account.
    for (v1::Job& job : *message.mutable_jobs()) {
      job.clear_token();
      job.clear_code();
    }
  }
  absl::MutexLock lock(&mu_);
  if (finished_ || reactor_ == nullptr) return false;
  auto& counted = lane ? lane_in_flight_ : in_flight_;
  for (const auto& job : message.jobs()) counted.insert(job.job_id());
  queue_.push_back(Outgoing{std::move(message), lease_end});
  StartNextLocked();
  return true;
}

int Subscriber::Forget(const std::vector<uint64_t>& ids) {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (uint64_t id : ids) n += in_flight_.erase(id) + lane_in_flight_.erase(id);
  return n;
}

void Subscriber::Finish(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  if (finished_ || reactor_ == nullptr) return;
  finished_ = true;
  DropQueueLocked();
  // Finish waits for an outstanding write itself; calling it now is allowed.
  reactor_->Finish(status);
}

void Subscriber::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  if (!ok) {
    // The peer is gone; OnDone follows.
    // The message being written did not reach the peer.
    for (const auto& job : current_.jobs()) unsent_.push_back(job.job_id());
    if (!finished_ && reactor_ != nullptr) {
      finished_ = true;
      DropQueueLocked();
      reactor_->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
    }
    return;
  }
  StartNextLocked();
}

void Subscriber::StartNextLocked() {
  if (writing_ || finished_ || reactor_ == nullptr || queue_.empty()) return;
  current_ = std::move(queue_.front().message);
  const absl::Time lease_end = queue_.front().lease_end;
  queue_.pop_front();
  if (lease_end != absl::InfiniteFuture()) {
    const int64_t left = absl::ToInt64Milliseconds(lease_end - clock_->Now());
    current_.set_lease_left_ms(static_cast<uint32_t>(std::clamp<int64_t>(left, 1, UINT32_MAX)));
  }
  writing_ = true;
  reactor_->StartWrite(&current_);
}

void Hub::Add(const std::shared_ptr<Subscriber>& sub) {
  absl::MutexLock lock(&mu_);
  groups_[sub->group()].push_back(sub);
}

void Hub::Remove(const std::shared_ptr<Subscriber>& sub) {
  absl::MutexLock lock(&mu_);
  auto it = groups_.find(sub->group());
  if (it == groups_.end()) return;
  auto& v = it->second;
  v.erase(std::remove(v.begin(), v.end(), sub), v.end());
  if (v.empty()) groups_.erase(it);
}

std::vector<std::string> Hub::Groups() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [g, subs] : groups_) out.push_back(g);
  return out;
}

std::vector<std::string> Hub::MemberIds(const std::string& group) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  auto it = groups_.find(group);
  if (it == groups_.end()) return out;
  for (const auto& s : it->second) out.push_back(s->id());
  return out;
}

std::shared_ptr<Subscriber> Hub::PickMember(const std::string& group) const {
  return PickMost(group, &Subscriber::Room);
}

std::shared_ptr<Subscriber> Hub::PickLaneMember(const std::string& group) const {
  return PickMost(group, &Subscriber::LaneRoom);
}

std::shared_ptr<Subscriber> Hub::PickMost(const std::string& group,
                                          int (Subscriber::*room_of)() const) const {
  absl::MutexLock lock(&mu_);
  auto it = groups_.find(group);
  if (it == groups_.end()) return nullptr;
  std::shared_ptr<Subscriber> best;
  int best_room = 0;
  for (const auto& s : it->second) {
    int room = ((*s).*room_of)();
    if (room > best_room) {
      best = s;
      best_room = room;
    }
  }
  return best;
}

bool Hub::Forget(const std::string& group, const std::string& owner,
                 const std::vector<uint64_t>& ids) {
  std::shared_ptr<Subscriber> member;
  {
    absl::MutexLock lock(&mu_);
    auto it = groups_.find(group);
    if (it == groups_.end()) return false;
    for (const auto& s : it->second) {
      if (s->id() == owner) member = s;
    }
  }
  return member != nullptr && member->Forget(ids) > 0;
}

int Hub::Count(const std::string& group) const {
  absl::MutexLock lock(&mu_);
  auto it = groups_.find(group);
  return it == groups_.end() ? 0 : static_cast<int>(it->second.size());
}

void Hub::FinishAll(const grpc::Status& status) {
  std::vector<std::shared_ptr<Subscriber>> all;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [g, subs] : groups_) all.insert(all.end(), subs.begin(), subs.end());
  }
  for (const auto& s : all) s->Finish(status);
}

}  // namespace mailroom
