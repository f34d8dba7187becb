#pragma once

// What both services' main() need around their gRPC servers: termination signals taken by one
// thread, gRPC's health service and reflection (with grpc.health.v1 resolvable), serving
// status for the server and its services, and the sender's health-only server.

#include <initializer_list>
#include <memory>
#include <string>

#include <signal.h>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace mailroom {

// Blocks SIGTERM and SIGINT in the calling thread and every thread it starts afterwards, so
// that Wait() (not whichever thread happens to run) takes them. Construct it first in main().
class TerminationSignals {
 public:
  TerminationSignals();
  // Waits for SIGTERM or SIGINT; returns its name ("SIGTERM" / "SIGINT").
  const char* Wait();

 private:
  sigset_t set_;
};

// Turns on gRPC's default health service and server reflection for every server built after
// this call, and links the grpc.health.v1 descriptor so reflection (grpcurl, buf curl) can
// resolve the health service.
void EnableHealthAndReflection();

// Sets the health status of the whole server ("") and of each of `services`.
void SetServing(grpc::Server& server, bool serving,
                std::initializer_list<const char*> services = {});

// A server with only health and reflection, on `address` (host:port; port 0 picks one),
// NOT_SERVING until told otherwise. Reflection is what makes gRPC accept a server whose only
// service is the default health check ("completion queues must be frequently polled").
struct HealthServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};
absl::StatusOr<HealthServer> StartHealthServer(const std::string& address);

}  // namespace mailroom
