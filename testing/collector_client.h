#pragma once

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/mailroom/v1/mailroom.grpc.pb.h"

namespace mailroom::testing {

// A subscriber for tests and benchmarks: opens a Subscribe stream and collects every job it
// receives on a background thread. Acknowledging is up to the caller. Thread-safe.
class TestSubscriber {
 public:
  TestSubscriber(std::shared_ptr<grpc::Channel> channel, const std::string& bearer,
                 const std::string& group, int max_in_flight, const std::string& name = "test");
  ~TestSubscriber();

  // Waits for the first (welcome) message; false on timeout or stream error.
  bool WaitSubscribed(absl::Duration timeout);
  // Waits until at least `n` jobs arrived in total (or timeout); returns the count.
  size_t WaitForJobs(size_t n, absl::Duration timeout);
  // Jobs received so far (copy).
  std::vector<v1::Job> Jobs() const;
  // Jobs received and not yet taken by Take(); then forgets them.
  std::vector<v1::Job> Take();
  size_t Received() const;
  // Acknowledges `ids` with `outcome` (reason required for FAILED), under this subscription's
  // id and the attempt each job was last received with. `response` (optional) gets the reply.
  grpc::Status Ack(const std::vector<uint64_t>& ids, v1::Outcome outcome,
                   const std::string& reason = "", int64_t cost_micros = 0,
                   v1::AcknowledgeResponse* response = nullptr);
  // The attempt `id` was last received with (0: never received).
  uint32_t AttemptOf(uint64_t id) const;
  // Ends the stream from the client side.
  void Cancel();
  // The stream's final status once it ended (OK-constructed until then).
  grpc::Status Finished(absl::Duration timeout);
  std::string subscriber_id() const;
  // Wall-clock arrival time of each job, in receive order (for latency figures).
  std::vector<std::pair<uint64_t, absl::Time>> Arrivals() const;

 private:
  void ReadLoop();
  std::unique_ptr<v1::Collector::Stub> stub_;
  std::string bearer_, group_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::SubscribeResponse>> reader_;
  std::thread thread_;
  mutable absl::Mutex mu_;
  bool subscribed_ = false, done_ = false;
  grpc::Status status_;
  std::string subscriber_id_;
  std::vector<v1::Job> jobs_;
  size_t taken_ = 0;
  std::vector<std::pair<uint64_t, absl::Time>> arrivals_;
  std::map<uint64_t, uint32_t> attempts_;
};

// Adds `authorization: Bearer <token>` to a client context (no-op for an empty token).
void Authorize(grpc::ClientContext* ctx, const std::string& bearer);

}  // namespace mailroom::testing
