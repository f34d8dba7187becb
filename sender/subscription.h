#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "grpcpp/grpcpp.h"
#include "proto/mailroom/v1/mailroom.grpc.pb.h"
#include "sender/leased_job.h"

namespace mailroom {

// The sender's side of the collector API: keeps one Subscribe stream open (reconnecting with
// capped exponential backoff forever), reports outcomes in acknowledgements (each kept and
// retried until the collector has answered for it), and renews the leases of jobs still held.
//
// It keeps every lease it holds: the subscription id and attempt the job came with and when
// the lease runs out as far as this process knows (arrival + lease, pushed on by each
// renewal). Outcomes and renewals name that lease, so they keep working after a reconnect (on
// any collector) and a lease the collector no longer counts as ours is never acted on: Owns()
// turns false when the collector reports it lost or when it would run out before a send could
// finish (for example while the collector is unreachable). Lease deadlines, the outcome stall,
// reconnect and retry backoffs and renewal periods all run on `Options::clock` (RPC deadlines
// stay in real time: they bound the network). Thread-safe.
//
// It hands each job it receives, with its lease, to a JobSink (the Engine), and is the
// Engine's LeaseHolder.
class Subscription : public LeaseHolder {
 public:
  // The shortest send window (Check) a send is started with (a quarter of the lease when that
  // is shorter).
  static constexpr absl::Duration kMinSendWindow = absl::Seconds(1);
  struct Options {
    std::string address;                                  // host:port of the collector
    std::shared_ptr<grpc::ChannelCredentials> credentials;  // TLS or insecure
    std::string bearer;                                   // "" for none (mutual TLS)
    std::string group = "mailroom";
    int max_in_flight = 100;
    std::string name;                                     // shown in the collector's logs
    // The budget grant holder this process sends for (MakeHolderName): the collector counts
    // the jobs it hands to it, so an unused grant comes back if this process dies. "": none.
    std::string budget_holder;
    absl::Duration max_backoff = absl::Seconds(30);
    // Outcomes share Acknowledge calls: once one is waiting, the acknowledger waits up to
    // `ack_delay` for `outcomes_per_ack` of them (0: half of max_in_flight, at least 1) before it
    // calls Acknowledge. Fewer, larger calls (each one PostgreSQL transaction in the
    // collector); zero: at once.
    absl::Duration ack_delay = absl::Milliseconds(5);
    int outcomes_per_ack = 0;
    Clock* clock = RealClock::Get();
    // Tests: talk over this channel (e.g. an in-process server's) instead of `address`.
    std::shared_ptr<grpc::Channel> channel;
  };
  explicit Subscription(Options options);
  ~Subscription() override;

  // Starts the acknowledger and lease renewer threads.
  void Start();
  // Opens the stream (after Start): the jobs received go to `jobs` (borrowed; on the reader
  // thread), and so do the ids of jobs the collector reports as no longer ours (Drop).
  void StartReceiving(JobSink* jobs);
  // Queues an outcome for the next Acknowledge call, under the job's lease (dropped, with a
  // log line, when the job's lease is not held any more). A job the collector handed to this
  // process again while it was being sent is reported under the newest lease held on it.
  void Report(OutcomeReport report) override;
  // Check(job.job.job_id(), send_window).
  LeaseState Check(const LeasedJob& job, absl::Duration* send_window) override;
  // Whether `id` may be sent now. kLost: the collector reported the lease lost, or it would run
  // out before a send could be reported (then it is forgotten: not renewed, and the collector
  // hands the job out again when it runs out). kWait: ours, but outcomes are not getting
  // through (the oldest unrecorded one is older than a tenth of the lease, at most 2 s):
  // sending now could not be reported in time; also while the lease left less that quarter is
  // under kMinSendWindow (a send that would time out sooner is not started). kOwned otherwise,
  // and then
  // `*send_window` (when given) is the lease left less that quarter: a send that ends within
  // it is reported before anyone else could be handed the job.
  LeaseState Check(uint64_t id, absl::Duration* send_window = nullptr);
  // Leases held (jobs received and not yet reported).
  size_t leases() const;
  // Stops taking jobs: ends the stream and does not reconnect. Acks keep flowing.
  void StopReceiving();
  // Waits until every reported outcome was recorded (or timeout); true when all were.
  bool Flush(absl::Duration timeout);
  // Stops everything (after StopReceiving/Flush for a graceful exit).
  void Stop();
  // This month's usage of the group (for the budget), retried until the collector answers or
  // `timeout` passes. UNAUTHENTICATED/PERMISSION_DENIED/INVALID_ARGUMENT end it at once.
  // Returns early (kCancelled) once StopReceiving or Stop was called.
  absl::StatusOr<v1::GetUsageResponse> Usage(absl::Duration timeout);
  // True while a stream is open.
  bool connected() const { return connected_; }
  // The lease length the collector announced (0 before the first subscription).
  absl::Duration lease() const;
  // Outcomes not yet recorded.
  size_t pending_acks() const;

 private:
  void ReadLoop();
  void AckLoop();
  void RenewLoop();
  void Authorize(grpc::ClientContext* ctx) const;
  // Renews every lease held; reports the lost ones to on_lost_.
  void RenewAll();
  // Sleeps until `until`, or less when stopping or a renewal is asked for.
  void SleepUntil(absl::Time until);
  // Waits `d` on the clock, or less once receiving stops (Stop included).
  void Backoff(absl::Duration d);

  // A lease this process holds on a job.
  struct HeldLease {
    LeaseRef ref;
    absl::Time deadline;
  };
  struct Pending {
    std::string subscriber_id;
    v1::JobOutcome outcome;
    absl::Time queued;
  };

  const Options opt_;
  Clock* const clock_;
  std::atomic<JobSink*> jobs_{nullptr};
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Collector::Stub> stub_;
  std::atomic<bool> receiving_{true}, stopping_{false}, connected_{false};
  std::thread reader_, acker_, renewer_;

  mutable absl::Mutex mu_;
  grpc::ClientContext* stream_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::string subscriber_id_ ABSL_GUARDED_BY(mu_);
  absl::Duration lease_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  std::map<uint64_t, HeldLease> leases_ ABSL_GUARDED_BY(mu_);
  std::deque<Pending> outbox_ ABSL_GUARDED_BY(mu_);
  size_t sending_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time sending_oldest_ ABSL_GUARDED_BY(mu_);  // oldest outcome of the call in flight
  bool renew_now_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mailroom
