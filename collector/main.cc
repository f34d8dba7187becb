// The collector: `collector [serve]` runs the service; `collector migrate [up [N] | down N |
// status]` manages the schema (migrate_cli). Configuration comes from MAILROOM_* environment
// variables (config). This file only wires the components together, runs them and shuts them
// down.

#include <malloc.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "collector/auth.h"
#include "collector/budget_store.h"
#include "collector/config.h"
#include "collector/dispatcher.h"
#include "collector/feedback/feedback_server.h"
#include "collector/feedback/feedback_store.h"
#include "collector/feedback/https_get.h"
#include "collector/hub.h"
#include "collector/migrate.h"
#include "collector/migrate_cli.h"
#include "collector/feedback/reputation_guard.h"
#include "collector/retention.h"
#include "collector/service.h"
#include "collector/feedback/sns_verifier.h"
#include "collector/stats_gauges.h"
#include "collector/store.h"
#include "collector/tls_credentials.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/server_runtime.h"
#include "grpcpp/grpcpp.h"

namespace mailroom {
namespace {

// Raises the soft open-file limit to the hard one and returns it: connections, database
// sessions, fetches and CA file loads each need a descriptor, and the feedback endpoint sizes
// its share from it.
rlim_t RaiseOpenFileLimit() {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0) return 0;
  if (files.rlim_cur < files.rlim_max) {
    const rlim_t soft = files.rlim_cur;
    files.rlim_cur = files.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &files) != 0) files.rlim_cur = soft;
  }
  return files.rlim_cur;
}

int Serve() {
  const rlim_t open_files = RaiseOpenFileLimit();
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

  TerminationSignals signals;  // taken by signals.Wait() below, before any thread starts

  if (c.auto_migrate) {
    auto done = MigrateUp(c.direct_database_url, EmbeddedMigrations());
    if (!done.ok()) {
      LogError("migrate failed", {{"error", std::string(done.status().message())}});
      return 1;
    }
    if (!c.channel.empty()) (void)SetChannel(c.direct_database_url, c.channel);
  }

  Metrics metrics;
  DescribeCollectorMetrics(metrics);
  auto store = NewPgStore(c.dispatch.database_url, c.db_pool_size, c.tx_timeouts,
                          c.budget.monthly_budget_micros);
  Hub hub;
  // Without bearer tokens, mutual TLS (or the development switch) grants full access.
  Authenticator auth(c.credentials, c.insecure_no_auth || !c.tls_client_ca_file.empty());
  for (size_t i = 0; i < c.credentials.size(); ++i) {
    if (c.credentials[i].legacy) {
      LogWarn("deprecated: an unscoped bearer token has every role in every group; "
              "scope it as TOKEN@GROUPS:ROLE",
              {{"variable", "MAILROOM_SUBSCRIBER_TOKENS"}, {"entry", absl::StrCat(i + 1)}});
    }
    if (c.credentials[i].subscriber_named) {
      LogWarn("the role subscriber is a sender's: its jobs carry the signed tokens and codes "
              "that take over accounts; name it sender if this credential sends email, "
              "observer if it only watches",
              {{"variable", "MAILROOM_SUBSCRIBER_TOKENS"}, {"entry", absl::StrCat(i + 1)}});
    }
  }
  // Reputation (gauges, and the guard that pauses a group's dispatch) and SES feedback.
  auto feedback_store = NewPgFeedbackStore(c.dispatch.database_url, c.tx_timeouts);
  ReputationGuard guard(c.feedback.guard, &metrics);
  if (c.feedback.guard.enabled()) {
    c.dispatch.paused = [&guard](const std::string& group) { return guard.Paused(group); };
  }
  ReputationMonitor reputation(feedback_store.get(), c.feedback.reputation_window,
                               c.feedback.reputation_refresh, &guard, &metrics);
  const std::string sns_ca = c.feedback.sns.ca_file;
  const UrlFetcher https_get = [sns_ca](const std::string& url) { return HttpsGet(url, sns_ca); };
  SnsVerifier sns(c.feedback.sns, https_get, nullptr, [sns_ca](const std::string& url) {
    return HttpsGet(url, sns_ca, /*allow_http=*/true);
  });
  FeedbackHandler feedback(&sns, feedback_store.get(), https_get, c.feedback.sns.extra_hosts,
                           c.feedback.soft_bounce_limit, &metrics);
  FeedbackServer feedback_server;

  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<grpc::Server> health;  // MAILROOM_HEALTH_ADDRESS: probes that cannot do TLS
  std::atomic<bool> db_up{false};
  Dispatcher dispatcher(c.dispatch, store.get(), &hub, c.key, &metrics, [&](bool serving) {
    db_up = serving;
    metrics.Set("mailroom_collector_database_up", serving ? 1 : 0);
    if (server != nullptr) {
      // Overall ("") and per service, so probes may name either.
      SetServing(*server, serving, {"mailroom.v1.Collector"});
    }
    if (health != nullptr) SetServing(*health, serving, {"mailroom.v1.Collector"});
  });
  CollectorService service(store.get(), &hub, &dispatcher, &auth, &metrics,
                           ServiceLimits{c.dispatch.lease, c.max_cost_micros, c.max_in_flight_cap,
                                         c.max_streams_per_credential, c.min_price_micros});
  auto budgets = NewPgBudgetStore(c.dispatch.database_url, c.budget, BudgetIsolation{}, c.tx_timeouts);
  service.SetBudgetStore(budgets.get());

  EnableHealthAndReflection();
  grpc::ServerBuilder builder;
  auto creds = LoadServerCredentials({c.tls_cert_file, c.tls_key_file, c.tls_client_ca_file});
  if (!creds.ok()) {
    std::fprintf(stderr, "config error: %s\n", std::string(creds.status().message()).c_str());
    return 2;
  }
  int port = 0;
  builder.AddListeningPort(c.listen_address, *creds, &port);
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
  SetServing(*server, false, {"mailroom.v1.Collector"});
  int health_port = 0;
  if (!c.health_address.empty()) {
    auto hs = StartHealthServer(c.health_address);
    if (!hs.ok()) {
      LogError("cannot listen", {{"address", c.health_address}});
      return 1;
    }
    health_port = hs->port;
    SetServing(*hs->server, db_up, {"mailroom.v1.Collector"});
    health = std::move(hs->server);
  }
  if (c.tls_cert_file.empty() && !IsLoopbackAddress(c.listen_address)) {
    LogWarn("gRPC is plaintext on a network address: signed tokens and bearer tokens cross the "
            "network in clear",
            {{"address", c.listen_address}, {"variable", "MAILROOM_ALLOW_PLAINTEXT"}});
  }

  MetricsServer metrics_server;
  if (!c.metrics_address.empty()) {
    ExportQueueStatsOnScrape(store.get(), metrics);
    absl::Status st = metrics_server.Start(c.metrics_address, &metrics);
    if (!st.ok()) {
      LogError("cannot serve metrics", {{"address", c.metrics_address},
                                        {"error", std::string(st.message())}});
      return 1;
    }
  }
  if (!c.feedback.address.empty()) {
    absl::Status st = feedback_server.Start(c.feedback.address, &feedback, c.feedback.server);
    if (!st.ok()) {
      LogError("cannot serve the feedback endpoint", {{"address", c.feedback.address},
                                                     {"error", std::string(st.message())}});
      return 1;
    }
  }
  reputation.Start();
  LogInfo("collector started",
          {{"listen", absl::StrCat(c.listen_address.substr(0, c.listen_address.rfind(':')), ":",
                                   port)},
           {"metrics", c.metrics_address.empty()
                           ? std::string("off")
                           : absl::StrCat(c.metrics_address.substr(
                                              0, c.metrics_address.rfind(':')),
                                          ":", metrics_server.port())},
           {"health", c.health_address.empty()
                          ? std::string("off")
                          : absl::StrCat(c.health_address.substr(0, c.health_address.rfind(':')),
                                         ":", health_port)},
           {"tls", c.tls_cert_file.empty() ? "off" : (c.tls_client_ca_file.empty() ? "on" : "mutual")},
           {"auth", c.credentials.empty() ? (c.tls_client_ca_file.empty() ? "none (development)" : "client certificate")
                                                : "bearer"},
           {"batch_limit", absl::StrCat(c.dispatch.batch_limit)},
           {"dequeue_limit", absl::StrCat(c.dispatch.dequeue_limit)},
           {"batch_timeout_ms", absl::StrCat(absl::ToInt64Milliseconds(c.dispatch.batch_timeout))},
           {"healthcheck_interval_ms",
            absl::StrCat(absl::ToInt64Milliseconds(c.dispatch.healthcheck_interval))},
           {"lease_ms", absl::StrCat(absl::ToInt64Milliseconds(c.dispatch.lease))},
           {"max_in_flight_cap", absl::StrCat(c.max_in_flight_cap)},
           {"groups", absl::StrJoin(c.dispatch.groups, ",")},
           {"feedback", c.feedback.address.empty()
                            ? std::string("off")
                            : absl::StrCat(c.feedback.address.substr(
                                               0, c.feedback.address.rfind(':')),
                                           ":", feedback_server.port())},
           {"guard", c.feedback.guard.enabled() ? "on" : "off"},
           {"open_files", absl::StrCat(open_files)}});

  Retention retention(c.retention, &metrics, budgets.get());
  std::thread loop([&] { dispatcher.Run(); });
  std::thread pruner([&] { retention.Run(); });
  LogInfo("shutting down", {{"signal", signals.Wait()}});
  retention.Stop();
  dispatcher.Stop();
  loop.join();
  pruner.join();
  // Subscribers keep their leases: they finish what they hold and acknowledge it on another
  // collector (or on this one after a restart); unacknowledged jobs come back after the lease.
  hub.FinishAll(grpc::Status(grpc::StatusCode::UNAVAILABLE, "collector shutting down"));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (health != nullptr) health->Shutdown();
  feedback_server.Stop();
  reputation.Stop();
  metrics_server.Stop();
  LogInfo("stopped");
  return 0;
}

}  // namespace
}  // namespace mailroom

int main(int argc, char** argv) {
  // glibc gives each thread that contends for malloc an arena of its own (up to 8 per core);
  // two are enough for 2 busy threads here and keep about 1 MB less resident under load
  // (BENCHMARKS.md, memory). Before any thread starts.
  mallopt(M_ARENA_MAX, 2);
  // Debian builds abseil with mutex deadlock detection on: a graph update on every unlock.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Name our connections in pg_stat_activity unless the URL names them (libpq's fallback).
  setenv("PGAPPNAME", "mailroom-collector", /*overwrite=*/0);
  if (argc > 1 && std::strcmp(argv[1], "migrate") == 0) {
    return mailroom::RunMigrateCli(std::vector<std::string>(argv + 2, argv + argc),
                                   mailroom::Env(), stdout, stderr);
  }
  if (argc > 1 && std::strcmp(argv[1], "serve") != 0) {
    return mailroom::PrintCollectorUsage(stderr);
  }
  return mailroom::Serve();
}
