#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/worker_thread.h"
#include "grpcpp/grpcpp.h"
#include "proto/mailroom/v1/mailroom.grpc.pb.h"
#include "sender/lease/lease_table.h"
#include "sender/lease/leased_job.h"

namespace mailroom {

// The sender's side of the collector API, and only that: keeps one Subscribe stream open
// (reconnecting with capped exponential backoff and equal jitter forever), sends the outcomes the
// lease table holds in Acknowledge calls (each kept and retried until the collector has answered
// for it), and renews the leases the table holds. The leases themselves, the outcomes waiting for
// acknowledgement and every decision about them live in the LeaseTable (sender/lease/lease_table.h)
// it shares with the Engine. Outcomes and renewals name the lease a job came with, so they
// keep working after a reconnect (on any collector). Reconnect and retry backoffs and renewal
// periods run on `Options::clock` (RPC deadlines stay in real time: they bound the network).
// Thread-safe.
//
// It hands each job it receives, with its lease, to a JobSink (the Engine), and tells it the
// ids of jobs whose leases the collector reports lost.
class Subscription {
 public:
  struct Options {
    std::string address;                                    // host:port of the collector
    std::shared_ptr<grpc::ChannelCredentials> credentials;  // TLS or insecure
    std::string bearer;                                     // "" for none (mutual TLS)
    std::string group = "mailroom";
    int max_in_flight = 100;
    std::string name;  // shown in the collector's logs
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
    // The channel to the collector, shared with the sender's other calls to it (the budget
    // client; MakeCollectorChannel). Unset: one of its own to `address` with `credentials`.
    std::shared_ptr<grpc::Channel> channel;
    // Required, borrowed: the leases held and the outcomes to acknowledge.
    LeaseTable* leases = nullptr;
  };
  explicit Subscription(Options options);
  ~Subscription();

  // Starts the acknowledger and lease renewer threads.
  void Start();
  // Opens the stream (after Start): the jobs received go to `jobs` (borrowed; on the reader
  // thread), and so do the ids of jobs the collector reports as no longer ours (Drop).
  void StartReceiving(JobSink* jobs);
  // Stops taking jobs: ends the stream and does not reconnect. Acks keep flowing.
  void StopReceiving();
  // Stops everything (after StopReceiving and LeaseTable::AwaitAcknowledged for a graceful
  // exit); closes the lease table to acknowledgements.
  void Stop();
  // This month's usage of the group (for the budget), retried until the collector answers or
  // `timeout` passes. UNAUTHENTICATED/PERMISSION_DENIED/INVALID_ARGUMENT end it at once.
  // Returns early (kCancelled) once StopReceiving or Stop was called.
  absl::StatusOr<v1::GetUsageResponse> Usage(absl::Duration timeout);
  // True while a stream is open.
  bool connected() const { return connected_; }

 private:
  void ReadLoop();
  // Reads one stream until it ends; `*answered` tells whether the collector answered it.
  grpc::Status ReadStream(bool* answered);
  void AckLoop();
  // Sends one batch of outcomes; true when the collector answered for them (recorded, or
  // rejected for good); then `*ignored` holds the jobs whose outcomes the collector ignored
  // (their leases were no longer ours; not those it rejected as invalid).
  bool Acknowledge(LeaseTable::Batch* batch, std::vector<uint64_t>* ignored);
  void RenewLoop();
  void Authorize(grpc::ClientContext* ctx) const;
  // Renews every lease held; reports the lost ones to the JobSink.
  void RenewAll();
  // Waits `d` on the clock, or less once receiving stops (Stop included).
  void Backoff(absl::Duration d);
  // Waits `d` on the clock, or less once stopping or once a stream was answered since the
  // last Pause (the acknowledgements' backoff: a collector back is tried at once).
  void Pause(absl::Duration d);

  const Options opt_;
  Clock* const clock_;
  LeaseTable* const leases_;
  std::atomic<JobSink*> jobs_{nullptr};
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Collector::Stub> stub_;
  std::atomic<bool> receiving_{true}, stopping_{false}, connected_{false};
  // The stream's reader (blocked in a Read, ended by TryCancel) and the acknowledger (waiting
  // on the lease table's outcomes, ended by LeaseTable::Close); the renewer, which only waits
  // between rounds, is a WorkerThread below.
  std::thread reader_, acker_;
  // The reconnects' jitter (the reader thread's only).
  absl::BitGen reconnect_random_;

  mutable absl::Mutex mu_;
  grpc::ClientContext* stream_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  // A new stream was answered: an acknowledgement waiting out its backoff is sent at once (the
  // outcomes of jobs handed out again on it carry that stream's short leases).
  bool ack_now_ ABSL_GUARDED_BY(mu_) = false;
  // Renews the leases held every third of the lease, at once when woken (a new stream). Last:
  // stopped before the members it uses are destroyed.
  WorkerThread renewer_;
};

// A channel to the collector at `address` (keepalive, quick reconnects, messages up to
// 64 MiB): the one channel the sender's calls to it share.
std::shared_ptr<grpc::Channel> MakeCollectorChannel(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials);

}  // namespace mailroom
