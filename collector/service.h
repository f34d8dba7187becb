#pragma once

#include <string>

#include "collector/auth.h"
#include "collector/common/metrics.h"
#include "collector/dispatcher.h"
#include "collector/hub.h"
#include "collector/store.h"
#include "proto/mailroom.grpc.pb.h"

namespace mailroom {

// Limits on request sizes, shared with tests.
inline constexpr int kMaxInFlight = 100000;
inline constexpr int kMaxIdsPerCall = 10000;

// True for a valid consumer group name: ^[a-z][a-z0-9_-]{0,62}$.
bool ValidGroupName(const std::string& name);

// The mailroom.v1.Collector service. Subscribe is a callback-API stream (one reactor per
// subscriber, no thread per stream); the unary calls are synchronous handlers that may block on
// PostgreSQL (they run on gRPC's sync thread pool, never inside a reaction). Every call is
// authenticated first. Thread-safe.
class CollectorService : public v1::Collector::WithCallbackMethod_Subscribe<v1::Collector::Service> {
 public:
  CollectorService(Store* store, Hub* hub, Dispatcher* dispatcher, const Authenticator* auth,
                   Metrics* metrics, absl::Duration lease);

  grpc::ServerWriteReactor<v1::SubscribeResponse>* Subscribe(
      grpc::CallbackServerContext* context, const v1::SubscribeRequest* request) override;
  grpc::Status Acknowledge(grpc::ServerContext* context, const v1::AcknowledgeRequest* request,
                           v1::AcknowledgeResponse* response) override;
  grpc::Status RenewLeases(grpc::ServerContext* context, const v1::RenewLeasesRequest* request,
                           v1::RenewLeasesResponse* response) override;
  grpc::Status GetQueueStats(grpc::ServerContext* context,
                             const v1::GetQueueStatsRequest* request,
                             v1::GetQueueStatsResponse* response) override;
  grpc::Status ListFailures(grpc::ServerContext* context, const v1::ListFailuresRequest* request,
                            v1::ListFailuresResponse* response) override;
  grpc::Status Requeue(grpc::ServerContext* context, const v1::RequeueRequest* request,
                       v1::RequeueResponse* response) override;
  grpc::Status GetUsage(grpc::ServerContext* context, const v1::GetUsageRequest* request,
                        v1::GetUsageResponse* response) override;

 private:
  Store* const store_;
  Hub* const hub_;
  Dispatcher* const dispatcher_;
  const Authenticator* const auth_;
  Metrics* const metrics_;
  const absl::Duration lease_;
};

// Maps a Store error to the gRPC status a client should see.
grpc::Status ToGrpc(const absl::Status& status);

}  // namespace mailroom
