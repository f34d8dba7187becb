#include "common/server_runtime.h"

#include <pthread.h>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "proto/grpc/health/v1/health.pb.h"

namespace mailroom {

TerminationSignals::TerminationSignals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

const char* TerminationSignals::Wait() {
  int sig = 0;
  while (sigwait(&set_, &sig) != 0) {
  }
  return sig == SIGTERM ? "SIGTERM" : "SIGINT";
}

void EnableHealthAndReflection() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // gRPC's built-in health service carries no protobuf descriptor; linking ours lets
  // reflection resolve grpc.health.v1.Health.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
}

void SetServing(grpc::Server& server, bool serving, std::initializer_list<const char*> services) {
  grpc::HealthCheckServiceInterface* health = server.GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus(serving);
  for (const char* s : services) health->SetServingStatus(s, serving);
}

absl::StatusOr<HealthServer> StartHealthServer(const std::string& address) {
  EnableHealthAndReflection();
  HealthServer out;
  grpc::ServerBuilder b;
  b.AddListeningPort(address, grpc::InsecureServerCredentials(), &out.port);
  b.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  out.server = b.BuildAndStart();
  if (out.server == nullptr || out.port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  SetServing(*out.server, false);
  return out;
}

}  // namespace mailroom
