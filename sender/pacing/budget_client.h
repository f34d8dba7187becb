#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "proto/mailroom/v1/mailroom.grpc.pb.h"

namespace mailroom {

// The sender's side of the group budget (AcquireBudget / ReturnBudget), so the grant pacer
// (sender/pacing/grant_pacer.h) can be tested without a collector. Thread-safe implementations
// only.
class BudgetClient {
 public:
  virtual ~BudgetClient() = default;
  // Asks for up to `emails` emails at `price_micros` each (a recovery may use the reserve).
  // Errors are the RPC's, as a Status.
  virtual absl::StatusOr<v1::AcquireBudgetResponse> Acquire(int emails, bool recovery,
                                                            int64_t price_micros) = 0;
  // Gives back `emails` unused emails of `grant_id`; returns how many were credited.
  virtual absl::StatusOr<int> Return(uint64_t grant_id, int emails) = 0;
};

// A BudgetClient over gRPC to the collector, as holder `holder` in `group`, with the bearer
// token (may be empty) on every call; each call has a deadline of `timeout`.
class CollectorBudgetClient : public BudgetClient {
 public:
  CollectorBudgetClient(std::shared_ptr<grpc::Channel> channel, std::string group,
                        std::string holder, std::string bearer,
                        absl::Duration timeout = absl::Seconds(5));

  absl::StatusOr<v1::AcquireBudgetResponse> Acquire(int emails, bool recovery,
                                                    int64_t price_micros) override;
  absl::StatusOr<int> Return(uint64_t grant_id, int emails) override;

 private:
  void Prepare(grpc::ClientContext* ctx) const;

  std::unique_ptr<v1::Collector::Stub> stub_;
  const std::string group_, holder_, bearer_;
  const absl::Duration timeout_;
};

// A holder name for this process: `name` (the sender's MAILROOM_SENDER_NAME), '-', and 12
// random hex digits, so a restarted sender never returns its predecessor's grants.
std::string MakeHolderName(const std::string& name);

}  // namespace mailroom
