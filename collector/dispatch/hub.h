#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "collector/dispatch/job_builder.h"
#include "collector/store/store.h"
#include "common/clock.h"
#include "grpcpp/grpcpp.h"
#include "proto/mailroom/v1/mailroom.grpc.pb.h"

namespace mailroom {

class Subscriber;

// The server side of one Subscribe stream: writes the welcome message, then whatever messages of
// jobs the Subscriber queues, one write in flight at a time. Deletes itself in OnDone.
class SubscribeReactor : public grpc::ServerWriteReactor<v1::SubscribeResponse> {
 public:
  // `on_done` runs once when the stream is over (the subscriber has gone).
  SubscribeReactor(std::shared_ptr<Subscriber> sub,
                   std::function<void(const std::shared_ptr<Subscriber>&)> on_done);
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  std::shared_ptr<Subscriber> sub_;
  std::function<void(const std::shared_ptr<Subscriber>&)> on_done_;
};

// The recovery lane of a subscription with window `max_in_flight`: how many password
// recoveries it may hold on top of a full window, max(10, max_in_flight / 10).
int RecoveryLane(int max_in_flight);

// One subscription: its identity, its in-flight accounting and its queue of outgoing messages.
// Jobs count either against its window (max_in_flight, any job) or against its recovery lane
// (RecoveryLane(max_in_flight), password recoveries delivered when the window was full): the
// two are counted apart, so activations never use the lane. Shared by the reactor (gRPC
// threads), the dispatcher and the Acknowledge handler; all methods are thread-safe.
// `clock` (borrowed; must outlive it) tells what is left of a lease when a message is written.
// `secrets` is fixed for the subscription's life: with JobSecrets::kWithheld (an observer) no
// job it is given ever reaches its stream with a token or a code, whoever built the job.
class Subscriber {
 public:
  Subscriber(std::string id, std::string group, std::string name, int max_in_flight,
             JobSecrets secrets, Clock* clock = RealClock::Get())
      : id_(std::move(id)), group_(std::move(group)), name_(std::move(name)),
        max_in_flight_(max_in_flight), lane_(RecoveryLane(max_in_flight)), secrets_(secrets),
        clock_(clock) {}

  const std::string& id() const { return id_; }
  const std::string& group() const { return group_; }
  const std::string& name() const { return name_; }
  // Whether its jobs carry their tokens and codes (build them accordingly: Deliver strips
  // them from an observer's jobs in any case).
  JobSecrets secrets() const { return secrets_; }
  // The budget holder whose grants it spends (SubscribeRequest.budget_holder; "" none). Set
  // before it joins the hub, so that its first dequeue counts for the holder.
  void SetBudgetHolder(std::string holder);
  // The dequeue it is given jobs by next: `group`, `limit`, this subscription, `lease`, its
  // budget holder and whether a dequeue for it has registered the link yet.
  DequeueRequest NextDequeue(int limit, absl::Duration lease, bool recoveries_only) const;
  // A dequeue of NextDequeue's succeeded: the link to its budget holder is registered.
  void DequeueDone();

  // How many more jobs it may be given now in its window.
  int Room() const;
  // How many more password recoveries it may be given now in its recovery lane.
  int LaneRoom() const;
  // Queues a message of jobs (one dequeue's) for writing and counts its jobs as in flight, in the
  // recovery lane with `lane` (the caller puts only recoveries there), else in the window. False
  // when the stream is over (the jobs were not sent). `lease_end`: when the jobs' leases run out at
  // the earliest (counted from before the dequeue that leased them); the message is written with
  // what is left of them then in `lease_left_ms` (at least 1), so a message that waited (behind a
  // slow stream, or in a collector that was paused) is never taken for a fresh lease. For a
  // subscription with JobSecrets::kWithheld every job's token and code are cleared first.
  bool Deliver(v1::SubscribeResponse message, absl::Time lease_end, bool lane = false);
  // These jobs are no longer in flight here (acknowledged, or lost). Returns how many were.
  int Forget(const std::vector<uint64_t>& ids);
  // Ends the stream with `status` unless it already ended.
  void Finish(const grpc::Status& status);
  // Once the stream is over: the jobs of messages that never reached it (queued, or whose
  // write failed). Their leases can go to another member at once.
  std::vector<uint64_t> TakeUnsent();
  // Binds the stream and writes `welcome` first. Called once, right after creating `reactor`.
  void Attach(SubscribeReactor* reactor, v1::SubscribeResponse welcome);

 private:
  friend class SubscribeReactor;
  void OnWriteDone(bool ok);
  void Detach();
  void StartNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the queued messages, remembering their jobs as unsent.
  void DropQueueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string id_, group_, name_;
  const int max_in_flight_;
  const int lane_;
  const JobSecrets secrets_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  SubscribeReactor* reactor_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  struct Outgoing {
    v1::SubscribeResponse message;
    absl::Time lease_end;  // InfiniteFuture: the welcome (it carries lease_duration_ms)
  };
  v1::SubscribeResponse current_ ABSL_GUARDED_BY(mu_);
  std::deque<Outgoing> queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> in_flight_ ABSL_GUARDED_BY(mu_);       // in the window
  absl::flat_hash_set<uint64_t> lane_in_flight_ ABSL_GUARDED_BY(mu_);  // in the lane
  std::vector<uint64_t> unsent_ ABSL_GUARDED_BY(mu_);
  std::string budget_holder_ ABSL_GUARDED_BY(mu_);
  bool holder_registered_ ABSL_GUARDED_BY(mu_) = false;
};

// Who is subscribed to which group in this collector process. Thread-safe.
class Hub {
 public:
  void Add(const std::shared_ptr<Subscriber>& sub);
  void Remove(const std::shared_ptr<Subscriber>& sub);
  // Groups with at least one subscriber.
  std::vector<std::string> Groups() const;
  // The member of `group` with the most room, or nullptr when none has room.
  std::shared_ptr<Subscriber> PickMember(const std::string& group) const;
  // The member of `group` with the most recovery-lane room, or nullptr when none has any.
  std::shared_ptr<Subscriber> PickLaneMember(const std::string& group) const;
  // Forgets acknowledged/lost jobs in the member `owner` of `group` only; true if it had any.
  bool Forget(const std::string& group, const std::string& owner, const std::vector<uint64_t>& ids);
  // Ids of the subscribers of `group`.
  std::vector<std::string> MemberIds(const std::string& group) const;
  // Subscriber count of a group.
  int Count(const std::string& group) const;
  // Ends every stream (shutdown).
  void FinishAll(const grpc::Status& status);

 private:
  std::shared_ptr<Subscriber> PickMost(const std::string& group,
                                       int (Subscriber::*room)() const) const;

  mutable absl::Mutex mu_;
  std::map<std::string, std::vector<std::shared_ptr<Subscriber>>> groups_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mailroom
