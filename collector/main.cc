// The collector: `collector [serve]` runs the service; `collector migrate [up [N] | down N |
// status]` manages the schema. Configuration comes from MAILROOM_* environment variables.
#include "absl/synchronization/mutex.h"
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collector/auth.h"
#include "common/log.h"
#include "common/metrics.h"
#include "collector/config.h"
#include "collector/dispatcher.h"
#include "collector/hub.h"
#include "collector/migrate.h"
#include "collector/service.h"
#include "collector/store.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "proto/grpc/health/v1/health.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"

namespace mailroom {
namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: collector [serve]\n"
               "       collector migrate [up [VERSION] | down VERSION | status]\n"
               "Configuration: MAILROOM_* environment variables (see README).\n");
  return 2;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int Migrate(int argc, char** argv) {
  Env env;
  auto url = env.Required("MAILROOM_DATABASE_URL");
  if (!url.ok()) {
    std::fprintf(stderr, "config error: %s\n", std::string(url.status().message()).c_str());
    return 2;
  }
  if (!ValidConninfo(*url)) {
    std::fprintf(stderr,
                 "config error: MAILROOM_DATABASE_URL: not a PostgreSQL connection URL or "
                 "key=value string (postgresql://user:password@host:5432/database)\n");
    return 2;
  }
  std::string cmd = argc > 2 ? argv[2] : "up";
  if (cmd == "status") {
    auto v = AppliedVersions(*url);
    if (!v.ok()) {
      std::fprintf(stderr, "migrate: %s\n", std::string(v.status().message()).c_str());
      return 1;
    }
    std::printf("applied: [%s]; available: %zu\n", absl::StrJoin(*v, ", ").c_str(),
                EmbeddedMigrations().size());
    return 0;
  }
  std::optional<int> target;
  if (argc > 3) {
    int t;
    if (!absl::SimpleAtoi(argv[3], &t) || t < 0) return Usage();
    target = t;
  }
  absl::StatusOr<std::vector<int>> done;
  if (cmd == "up") {
    done = MigrateUp(*url, EmbeddedMigrations(), target);
  } else if (cmd == "down" && target.has_value()) {
    done = MigrateDown(*url, EmbeddedMigrations(), *target);
  } else {
    return Usage();
  }
  if (!done.ok()) {
    LogError("migrate failed", {{"error", std::string(done.status().message())}});
    return 1;
  }
  LogInfo(cmd == "up" ? "migrations applied" : "migrations reverted",
          {{"versions", absl::StrCat("[", absl::StrJoin(*done, ","), "]")}});
  const std::string channel = env.String("MAILROOM_CHANNEL", "");
  if (cmd == "up" && !channel.empty()) {
    absl::Status st = SetChannel(*url, channel);
    if (!st.ok()) {
      LogError("setting the channel failed", {{"error", std::string(st.message())}});
      return 1;
    }
    LogInfo("channel set", {{"channel", channel}});
  }
  return 0;
}

void DescribeMetrics(Metrics& m) {
  using T = Metrics::Type;
  m.Describe("mailroom_collector_wakeups_total", T::kCounter, "NOTIFY wake-ups received.");
  m.Describe("mailroom_collector_dequeues_total", T::kCounter, "Dequeue statements run.");
  m.Describe("mailroom_collector_batches_total", T::kCounter, "Non-empty batches streamed.");
  m.Describe("mailroom_collector_jobs_dispatched_total", T::kCounter, "Jobs streamed.");
  m.Describe("mailroom_collector_acknowledged_total", T::kCounter,
             "Job outcomes recorded, by outcome.");
  m.Describe("mailroom_collector_malformed_total", T::kCounter,
             "Token rows that could not be signed (failed).");
  m.Describe("mailroom_collector_reconnects_total", T::kCounter, "Database reconnect attempts.");
  m.Describe("mailroom_collector_subscribers", T::kGauge, "Connected subscribers.");
  m.Describe("mailroom_collector_database_up", T::kGauge, "1 while PostgreSQL is reachable.");
  m.Describe("mailroom_queue_depth", T::kGauge, "Tokens not yet handed out, per group.");
  m.Describe("mailroom_queue_lag_seconds", T::kGauge, "Age of the oldest queued token.");
  m.Describe("mailroom_queue_jobs", T::kGauge, "Jobs per group and state.");
}

int Serve() {
  auto config = LoadCollectorConfig(Env());
  if (!config.ok()) {
    std::fprintf(stderr, "config error: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  CollectorConfig& c = *config;
  SetLogLevel(c.log_level == "debug" ? LogLevel::kDebug
              : c.log_level == "warn" ? LogLevel::kWarn
              : c.log_level == "error" ? LogLevel::kError
                                       : LogLevel::kInfo);

  // Signals are taken by sigwait below, not by whichever thread happens to run.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (c.auto_migrate) {
    auto done = MigrateUp(c.database_url, EmbeddedMigrations());
    if (!done.ok()) {
      LogError("migrate failed", {{"error", std::string(done.status().message())}});
      return 1;
    }
    if (!c.channel.empty()) (void)SetChannel(c.database_url, c.channel);
  }

  Metrics metrics;
  DescribeMetrics(metrics);
  auto store = NewPgStore(c.dispatch.database_url, c.db_pool_size);
  Hub hub;
  // Without bearer tokens, mutual TLS (or the development switch) grants full access.
  Authenticator auth(c.credentials, c.insecure_no_auth || !c.tls_client_ca_file.empty());
  for (size_t i = 0; i < c.credentials.size(); ++i) {
    if (c.credentials[i].legacy) {
      LogWarn("deprecated: an unscoped bearer token has every role in every group; "
              "scope it as TOKEN@GROUPS:ROLE",
              {{"variable", "MAILROOM_SUBSCRIBER_TOKENS"}, {"entry", absl::StrCat(i + 1)}});
    }
  }
  std::unique_ptr<grpc::Server> server;
  std::atomic<bool> db_up{false};
  Dispatcher dispatcher(c.dispatch, store.get(), &hub, c.key, &metrics, [&](bool serving) {
    db_up = serving;
    metrics.Set("mailroom_collector_database_up", serving ? 1 : 0);
    if (server != nullptr) {
      // Overall ("") and per service, so probes may name either.
      server->GetHealthCheckService()->SetServingStatus(serving);
      server->GetHealthCheckService()->SetServingStatus("mailroom.v1.Collector", serving);
    }
  });
  CollectorService service(store.get(), &hub, &dispatcher, &auth, &metrics,
                           ServiceLimits{c.dispatch.lease, c.max_cost_micros, c.max_in_flight});

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // gRPC's built-in health service carries no protobuf descriptor; linking ours lets
  // reflection (grpcurl describe/list, buf curl) resolve grpc.health.v1.Health.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!c.tls_cert_file.empty()) {
    grpc::SslServerCredentialsOptions ssl(
        c.tls_client_ca_file.empty()
            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    auto cert = ReadFile(c.tls_cert_file);
    auto key = ReadFile(c.tls_key_file);
    if (!cert.ok() || !key.ok()) {
      std::fprintf(stderr, "config error: MAILROOM_TLS_CERT/MAILROOM_TLS_KEY: cannot read\n");
      return 2;
    }
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    if (!c.tls_client_ca_file.empty()) {
      auto ca = ReadFile(c.tls_client_ca_file);
      if (!ca.ok()) {
        std::fprintf(stderr, "config error: MAILROOM_TLS_CLIENT_CA: cannot read\n");
        return 2;
      }
      ssl.pem_root_certs = *ca;
    }
    creds = grpc::SslServerCredentials(ssl);
  }
  int port = 0;
  builder.AddListeningPort(c.listen_address, creds, &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.SetMaxSendMessageSize(64 << 20);
  builder.RegisterService(&service);
  server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    LogError("cannot listen", {{"address", c.listen_address}});
    return 1;
  }
  server->GetHealthCheckService()->SetServingStatus("mailroom.v1.Collector", false);
  server->GetHealthCheckService()->SetServingStatus(false);

  MetricsServer metrics_server;
  if (!c.metrics_address.empty()) {
    metrics.SetCollectHook([&] {
      auto stats = store->Stats("");
      if (!stats.ok()) return;
      metrics.Clear("mailroom_queue_depth");
      metrics.Clear("mailroom_queue_lag_seconds");
      metrics.Clear("mailroom_queue_jobs");
      for (const auto& s : *stats) {
        const Labels g = {{"group", s.group}};
        metrics.Set("mailroom_queue_depth", s.depth, g);
        metrics.Set("mailroom_queue_lag_seconds", s.lag_seconds, g);
        const std::pair<const char*, uint64_t> states[] = {
            {"in_flight", s.in_flight}, {"waiting_retry", s.waiting_retry}, {"sent", s.sent},
            {"failed", s.failed},       {"expired", s.expired},           {"cancelled", s.cancelled}};
        for (const auto& [state, n] : states) {
          metrics.Set("mailroom_queue_jobs", n, {{"group", s.group}, {"state", state}});
        }
      }
    });
    absl::Status st = metrics_server.Start(c.metrics_address, &metrics);
    if (!st.ok()) {
      LogError("cannot serve metrics", {{"address", c.metrics_address},
                                        {"error", std::string(st.message())}});
      return 1;
    }
  }
  LogInfo("collector started",
          {{"listen", absl::StrCat(c.listen_address.substr(0, c.listen_address.rfind(':')), ":",
                                   port)},
           {"metrics", c.metrics_address.empty()
                           ? std::string("off")
                           : absl::StrCat(c.metrics_address.substr(
                                              0, c.metrics_address.rfind(':')),
                                          ":", metrics_server.port())},
           {"tls", c.tls_cert_file.empty() ? "off" : (c.tls_client_ca_file.empty() ? "on" : "mutual")},
           {"auth", c.credentials.empty() ? (c.tls_client_ca_file.empty() ? "none (development)" : "client certificate")
                                                : "bearer"},
           {"batch_limit", absl::StrCat(c.dispatch.batch_limit)},
           {"batch_timeout_ms", absl::StrCat(absl::ToInt64Milliseconds(c.dispatch.batch_timeout))},
           {"healthcheck_interval_ms",
            absl::StrCat(absl::ToInt64Milliseconds(c.dispatch.healthcheck_interval))},
           {"lease_ms", absl::StrCat(absl::ToInt64Milliseconds(c.dispatch.lease))},
           {"max_in_flight", absl::StrCat(c.max_in_flight)},
           {"groups", absl::StrJoin(c.dispatch.groups, ",")}});

  std::thread loop([&] { dispatcher.Run(); });
  int sig = 0;
  sigwait(&signals, &sig);
  LogInfo("shutting down", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
  dispatcher.Stop();
  loop.join();
  // Subscribers keep their leases: they finish what they hold and acknowledge it on another
  // collector (or on this one after a restart); unacknowledged jobs come back after the lease.
  hub.FinishAll(grpc::Status(grpc::StatusCode::UNAVAILABLE, "collector shutting down"));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  metrics_server.Stop();
  LogInfo("stopped");
  return 0;
}

}  // namespace
}  // namespace mailroom

int main(int argc, char** argv) {
  // Debian builds abseil with mutex deadlock detection on: a graph update on every unlock.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Name our connections in pg_stat_activity unless the URL names them (libpq's fallback).
  setenv("PGAPPNAME", "mailroom-collector", /*overwrite=*/0);
  if (argc > 1 && std::strcmp(argv[1], "migrate") == 0) return mailroom::Migrate(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], "serve") != 0) return mailroom::Usage();
  return mailroom::Serve();
}
