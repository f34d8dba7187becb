#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/mailroom.grpc.pb.h"

namespace mailroom {

// The sender's side of the collector API: keeps one Subscribe stream open (reconnecting with
// capped exponential backoff forever), reports outcomes in batches (each kept and retried until
// the collector has recorded it), and renews the leases of jobs still held. Thread-safe.
class Subscription {
 public:
  struct Options {
    std::string address;                                  // host:port of the collector
    std::shared_ptr<grpc::ChannelCredentials> credentials;  // TLS or insecure
    std::string bearer;                                   // "" for none (mutual TLS)
    std::string group = "mailroom";
    int max_in_flight = 100;
    std::string name;                                     // shown in the collector's logs
    absl::Duration max_backoff = absl::Seconds(30);
    absl::Duration ack_interval = absl::Milliseconds(20);
  };
  // `on_jobs` receives every batch (on the reader thread); `held` returns the ids the sender
  // still holds, for lease renewal.
  Subscription(Options options, std::function<void(std::vector<v1::Job>)> on_jobs,
               std::function<std::vector<uint64_t>()> held);
  ~Subscription();

  // Starts the acknowledger and lease renewer threads.
  void Start();
  // Opens the stream (after Start): jobs start flowing to `on_jobs`.
  void StartReceiving();
  // Queues an outcome for the next Acknowledge call.
  void Report(v1::JobOutcome outcome);
  // Stops taking jobs: ends the stream and does not reconnect. Acks keep flowing.
  void StopReceiving();
  // Waits until every reported outcome was recorded (or timeout); true when all were.
  bool Flush(absl::Duration timeout);
  // Stops everything (after StopReceiving/Flush for a graceful exit).
  void Stop();
  // This month's usage of the group (for the budget), retried until the collector answers or
  // `timeout` passes.
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

  const Options opt_;
  std::function<void(std::vector<v1::Job>)> on_jobs_;
  std::function<std::vector<uint64_t>()> held_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Collector::Stub> stub_;
  std::atomic<bool> receiving_{true}, stopping_{false}, connected_{false};
  std::thread reader_, acker_, renewer_;

  mutable absl::Mutex mu_;
  grpc::ClientContext* stream_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::string subscriber_id_ ABSL_GUARDED_BY(mu_);
  absl::Duration lease_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  std::vector<v1::JobOutcome> outbox_ ABSL_GUARDED_BY(mu_);
  size_t sending_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mailroom
