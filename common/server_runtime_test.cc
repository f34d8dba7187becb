#include "common/server_runtime.h"

#include <signal.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"

namespace mailroom {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

HealthCheckResponse::ServingStatus Check(int port, const std::string& service = "") {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  HealthCheckRequest req;
  req.set_service(service);
  HealthCheckResponse resp;
  grpc::Status st = stub->Check(&ctx, req, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return resp.status();
}

TEST(ServerRuntime, HealthServerStartsNotServingAndFollowsSetServing) {
  auto hs = StartHealthServer("127.0.0.1:0");
  ASSERT_TRUE(hs.ok()) << hs.status();
  ASSERT_GT(hs->port, 0);
  EXPECT_EQ(Check(hs->port), HealthCheckResponse::NOT_SERVING);
  SetServing(*hs->server, true, {"mailroom.v1.Sender"});
  EXPECT_EQ(Check(hs->port), HealthCheckResponse::SERVING);
  EXPECT_EQ(Check(hs->port, "mailroom.v1.Sender"), HealthCheckResponse::SERVING);
  SetServing(*hs->server, false, {"mailroom.v1.Sender"});
  EXPECT_EQ(Check(hs->port), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Check(hs->port, "mailroom.v1.Sender"), HealthCheckResponse::NOT_SERVING);
  hs->server->Shutdown();
}

TEST(ServerRuntime, HealthServerOnATakenPortFails) {
  auto first = StartHealthServer("127.0.0.1:0");
  ASSERT_TRUE(first.ok());
  auto second = StartHealthServer(absl::StrCat("127.0.0.1:", first->port));
  EXPECT_FALSE(second.ok());
  first->server->Shutdown();
}

TEST(ServerRuntime, TerminationSignalsAreTakenByWait) {
  TerminationSignals signals;
  // Blocked: the signal stays pending for Wait() instead of ending the process.
  ASSERT_EQ(raise(SIGTERM), 0);
  EXPECT_STREQ(signals.Wait(), "SIGTERM");
  ASSERT_EQ(raise(SIGINT), 0);
  EXPECT_STREQ(signals.Wait(), "SIGINT");
}

}  // namespace
}  // namespace mailroom
