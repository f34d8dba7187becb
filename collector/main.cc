// The collector: `collector [serve]` runs the service; `collector migrate [up [N] | down N |
// status]` manages the schema (migrate_cli). Configuration comes from MAILROOM_* environment
// variables (config). This file only wires the components together, runs them and shuts them
// down.

#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
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
#include "collector/api/auth.h"
#include "collector/api/service.h"
#include "collector/api/tls_credentials.h"
#include "collector/config/config.h"
#include "collector/config/settings.h"
#include "collector/console/console.h"
#include "collector/console/sessions.h"
#include "collector/dispatch/dispatcher.h"
#include "collector/dispatch/hub.h"
#include "collector/feedback/feedback_server.h"
#include "collector/feedback/feedback_store.h"
#include "collector/feedback/https_get.h"
#include "collector/feedback/provider_feedback.h"
#include "collector/feedback/reputation_guard.h"
#include "collector/feedback/sns_verifier.h"
#include "collector/maintenance/retention.h"
#include "collector/metrics/collector_metrics.h"
#include "collector/schema/migrate.h"
#include "collector/schema/migrate_cli.h"
#include "collector/store/budget_store.h"
#include "collector/store/operator_store.h"
#include "collector/store/stats_gauges.h"
#include "collector/store/store.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/server_runtime.h"
#include "common/version.h"
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

// "host:port" of `address` with the port a server got ("off" when it is not served).
std::string Listening(const std::string& address, int port) {
  if (address.empty()) return "off";
  return absl::StrCat(address.substr(0, address.rfind(':')), ":", port);
}

// Warns about each bearer token whose scope or role invites a mistake.
void WarnAboutCredentials(const std::vector<Credential>& credentials) {
  for (size_t i = 0; i < credentials.size(); ++i) {
    if (credentials[i].legacy) {
      LogWarn("deprecated: an unscoped bearer token has every role in every group; "
              "scope it as TOKEN@GROUPS:ROLE",
              {{"variable", "MAILROOM_SUBSCRIBER_TOKENS"}, {"entry", absl::StrCat(i + 1)}});
    }
    if (credentials[i].subscriber_named) {
      LogWarn("the role subscriber is a sender's: its jobs carry the signed tokens and codes "
              "that take over accounts; name it sender if this credential sends email, "
              "observer if it only watches",
              {{"variable", "MAILROOM_SUBSCRIBER_TOKENS"}, {"entry", absl::StrCat(i + 1)}});
    }
  }
}

// The dispatcher's options, paused for the groups the reputation guard pauses when it is on.
DispatcherOptions GuardedDispatch(DispatcherOptions options, const GuardOptions& guard_options,
                                  ReputationGuard* guard) {
  if (guard_options.enabled()) {
    options.paused = [guard](const std::string& group) { return guard->Paused(group); };
  }
  return options;
}

// The collector's components, built from its configuration in the order they depend on each
// other, started, and stopped in reverse.
class Collector {
 public:
  // `c` and `metrics` must outlive the collector.
  Collector(const CollectorConfig& c, Metrics* metrics)
      : c_(c), metrics_(metrics), store_(NewPgStore(c.dispatch.database_url, c.db_pool_size,
                                                    c.tx_timeouts, c.budget.monthly_budget_micros)),
        budgets_(
            NewPgBudgetStore(c.dispatch.database_url, c.budget, BudgetIsolation{}, c.tx_timeouts)),
        feedback_store_(NewPgFeedbackStore(c.dispatch.database_url, c.tx_timeouts)),
        operators_(NewPgOperatorStore(c.dispatch.database_url, /*connections=*/4, c.tx_timeouts)),
        // Without bearer tokens, mutual TLS (or the development switch) grants full access.
        auth_(c.credentials, c.insecure_no_auth || !c.tls_client_ca_file.empty()),
        guard_(c.feedback.guard, metrics_),
        reputation_(feedback_store_.get(), c.feedback.reputation_window,
                    c.feedback.reputation_refresh, &guard_, metrics_),
        https_get_(
            [ca = c.feedback.sns.ca_file](const std::string& url) { return HttpsGet(url, ca); }),
        sns_(c.feedback.sns, https_get_, nullptr,
             [ca = c.feedback.sns.ca_file](const std::string& url) {
               return HttpsGet(url, ca, /*allow_http=*/true);
             }),
        feedback_(&sns_, feedback_store_.get(), https_get_, c.feedback.sns.extra_hosts,
                  c.feedback.soft_bounce_limit, metrics_,
                  std::find(c.feedback.providers.suppress_unmatched.begin(),
                            c.feedback.providers.suppress_unmatched.end(),
                            "ses") != c.feedback.providers.suppress_unmatched.end()),
        providers_(c.feedback.providers, feedback_store_.get(), c.feedback.soft_bounce_limit,
                   metrics_),
        // SNS's path is on with the operator's topics only; each provider's with its secret.
        feedback_routes_(c.feedback.sns.topic_arns.empty() ? nullptr : &feedback_, &providers_),
        console_sessions_(ConsoleSessions::kDefaultTtl, ConsoleSessions::kDefaultCapacity,
                          RealClock::Get()),
        console_(&auth_, operators_.get(), budgets_.get(), &console_sessions_, RealClock::Get()),
        dispatcher_(GuardedDispatch(c.dispatch, c.feedback.guard, &guard_), store_.get(), &hub_,
                    c.key, metrics_, [this](bool serving) { SetDatabaseUp(serving); }),
        service_(store_.get(), &hub_, &dispatcher_, &auth_, metrics_,
                 ServiceLimits{c.dispatch.lease, c.max_cost_micros, c.max_in_flight_cap,
                               c.max_streams_per_credential, c.min_price_micros}) {
    service_.SetBudgetStore(budgets_.get());
    service_.SetOperatorStore(operators_.get());
  }

  // Starts every server; 0, or the exit code (1: cannot listen, 2: bad TLS files).
  int Start() {
    if (int code = StartGrpc(); code != 0) return code;
    if (int code = StartHealth(); code != 0) return code;
    if (c_.tls_cert_file.empty() && !IsLoopbackAddress(c_.listen_address)) {
      LogWarn("gRPC is plaintext on a network address: signed tokens and bearer tokens cross "
              "the network in clear",
              {{"address", c_.listen_address}, {"variable", "MAILROOM_ALLOW_PLAINTEXT"}});
    }
    if (int code = StartHttp(); code != 0) return code;
    reputation_.Start();
    return 0;
  }

  void LogStarted(rlim_t open_files) {
    const CollectorConfig& c = c_;
    LogInfo("collector started",
            {{"listen", Listening(c.listen_address, port_)},
             {"metrics", Listening(c.metrics_address, metrics_server_.port())},
             {"health", Listening(c.health_address, health_port_)},
             {"tls", c.tls_cert_file.empty()        ? "off"
                     : c.tls_client_ca_file.empty() ? "on"
                                                    : "mutual"},
             {"auth", !c.credentials.empty()         ? "bearer"
                      : c.tls_client_ca_file.empty() ? "none (development)"
                                                     : "client certificate"},
             {"batch_limit", absl::StrCat(c.dispatch.batch_limit)},
             {"dequeue_limit", absl::StrCat(c.dispatch.dequeue_limit)},
             {"batch_timeout_ms",
              absl::StrCat(absl::ToInt64Milliseconds(c.dispatch.batch_timeout))},
             {"healthcheck_interval_ms",
              absl::StrCat(absl::ToInt64Milliseconds(c.dispatch.healthcheck_interval))},
             {"lease_ms", absl::StrCat(absl::ToInt64Milliseconds(c.dispatch.lease))},
             {"max_in_flight_cap", absl::StrCat(c.max_in_flight_cap)},
             {"groups", absl::StrJoin(c.dispatch.groups, ",")},
             {"feedback", Listening(c.feedback.address, feedback_server_.port())},
             {"console", Listening(c.console_address, console_server_.port())},
             {"feedback_paths", FeedbackPaths(c.feedback)},
             {"feedback_suppress_unmatched",
              c.feedback.providers.suppress_unmatched.empty()
                  ? "none"
                  : absl::StrJoin(c.feedback.providers.suppress_unmatched, ",")},
             {"guard", c.feedback.guard.enabled() ? "on" : "off"},
             {"open_files", absl::StrCat(open_files)}});
  }

  // Runs the dispatcher, the retention passes and the events' publisher until SIGTERM or
  // SIGINT, then shuts down.
  void RunUntilSignalled(TerminationSignals& signals) {
    Retention retention(c_.retention, metrics_, budgets_.get());
    retention.Start();
    std::thread loop([&] { dispatcher_.Run(); });
    LogInfo("shutting down", {{"signal", signals.Wait()}});
    retention.Stop();
    dispatcher_.Stop();
    loop.join();
    // Subscribers keep their leases: they finish what they hold and acknowledge it on another
    // collector (or on this one after a restart); unacknowledged jobs come back after the
    // lease.
    hub_.FinishAll(grpc::Status(grpc::StatusCode::UNAVAILABLE, "collector shutting down"));
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    if (health_ != nullptr) health_->Shutdown();
    feedback_server_.Stop();
    console_server_.Stop();
    reputation_.Stop();
    metrics_server_.Stop();
    LogInfo("stopped");
  }

 private:
  // The dispatcher's view of the database, on /metrics and in the health services.
  void SetDatabaseUp(bool serving) {
    db_up_ = serving;
    metrics_->Set(collector_metrics::kDatabaseUp, serving ? 1 : 0);
    // Overall ("") and per service, so probes may name either.
    if (server_ != nullptr) SetServing(*server_, serving, {"mailroom.v1.Collector"});
    if (health_ != nullptr) SetServing(*health_, serving, {"mailroom.v1.Collector"});
  }

  int StartGrpc() {
    EnableHealthAndReflection();
    auto creds = LoadServerCredentials({c_.tls_cert_file, c_.tls_key_file, c_.tls_client_ca_file});
    if (!creds.ok()) {
      std::fprintf(stderr, "config error: %s\n", std::string(creds.status().message()).c_str());
      return 2;
    }
    grpc::ServerBuilder builder;
    builder.AddListeningPort(c_.listen_address, *creds, &port_);
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    builder.SetMaxSendMessageSize(64 << 20);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      LogError("cannot listen", {{"address", c_.listen_address}});
      return 1;
    }
    SetServing(*server_, false, {"mailroom.v1.Collector"});
    return 0;
  }

  // MAILROOM_HEALTH_ADDRESS: health for probes that cannot do TLS.
  int StartHealth() {
    if (c_.health_address.empty()) return 0;
    auto hs = StartHealthServer(c_.health_address);
    if (!hs.ok()) {
      LogError("cannot listen", {{"address", c_.health_address}});
      return 1;
    }
    health_port_ = hs->port;
    SetServing(*hs->server, db_up_, {"mailroom.v1.Collector"});
    health_ = std::move(hs->server);
    return 0;
  }

  // /metrics and the feedback endpoint, each when configured.
  int StartHttp() {
    if (!c_.metrics_address.empty()) {
      ExportQueueStatsOnScrape(store_.get(), *metrics_);
      absl::Status st = metrics_server_.Start(c_.metrics_address, metrics_);
      if (!st.ok()) {
        LogError("cannot serve metrics",
                 {{"address", c_.metrics_address}, {"error", std::string(st.message())}});
        return 1;
      }
    }
    if (!c_.feedback.address.empty()) {
      absl::Status st = feedback_server_.Start(c_.feedback.address, &feedback_routes_,
                                               c_.feedback.server);
      if (!st.ok()) {
        LogError("cannot serve the feedback endpoint",
                 {{"address", c_.feedback.address}, {"error", std::string(st.message())}});
        return 1;
      }
    }
    if (!c_.console_address.empty()) {
      FeedbackServerOptions o = c_.feedback.server;
      o.allow_get = true;
      o.workers = 4;  // a few operators; the operator store has 4 connections
      absl::Status st = console_server_.Start(c_.console_address, &console_, o);
      if (!st.ok()) {
        LogError("cannot serve the console",
                 {{"address", c_.console_address}, {"error", std::string(st.message())}});
        return 1;
      }
    }
    return 0;
  }

  const CollectorConfig& c_;
  Metrics* const metrics_;
  Hub hub_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<BudgetStore> budgets_;
  // Reputation (gauges, and the guard that pauses a group's dispatch) and SES feedback.
  std::unique_ptr<FeedbackStore> feedback_store_;
  // The operator's lookups and the audit of operator calls.
  std::unique_ptr<OperatorStore> operators_;
  Authenticator auth_;
  ReputationGuard guard_;
  ReputationMonitor reputation_;
  const UrlFetcher https_get_;
  SnsVerifier sns_;
  FeedbackHandler feedback_;
  ProviderFeedbackHandler providers_;
  FeedbackRoutes feedback_routes_;
  FeedbackServer feedback_server_;
  // The operator's console (MAILROOM_CONSOLE_ADDRESS), on a server of its own.
  ConsoleSessions console_sessions_;
  ConsoleHandler console_;
  FeedbackServer console_server_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Server> health_;  // MAILROOM_HEALTH_ADDRESS
  std::atomic<bool> db_up_{false};
  Dispatcher dispatcher_;
  CollectorService service_;
  MetricsServer metrics_server_;
  int port_ = 0;
  int health_port_ = 0;
};

int Serve() {
  const rlim_t open_files = RaiseOpenFileLimit();
  auto config = LoadCollectorConfig(Env());
  if (!config.ok()) {
    std::fprintf(stderr, "config error: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  const CollectorConfig& c = *config;
  SetLogLevel(ParseLogLevel(c.log_level).value_or(LogLevel::kInfo));

  TerminationSignals signals;  // taken by signals.Wait(), before any thread starts

  if (c.auto_migrate) {
    auto done = MigrateUp(c.direct_database_url, EmbeddedMigrations());
    if (!done.ok()) {
      LogError("migrate failed", {{"error", std::string(done.status().message())}});
      return 1;
    }
    if (!c.channel.empty()) (void)SetChannel(c.direct_database_url, c.channel);
  }
  // A role that cannot run mailroom (the application's URL by mistake) would fail every pass
  // for ever: it stops the start, naming what it lacks. A database that cannot be reached does
  // not: the dispatcher waits for it.
  if (absl::Status rights = CheckCollectorRights(c.dispatch.database_url);
      absl::IsFailedPrecondition(rights)) {
    std::fprintf(stderr, "config error: MAILROOM_DATABASE_URL: %s\n",
                 std::string(rights.message()).c_str());
    return 2;
  }
  WarnAboutCredentials(c.credentials);

  Metrics metrics;
  Collector collector(c, &metrics);
  if (int code = collector.Start(); code != 0) return code;
  collector.LogStarted(open_files);
  collector.RunUntilSignalled(signals);
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
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    // The settings table as it is, without reading the environment.
    std::printf("usage: collector [serve]\n       collector migrate [up [VERSION] | down VERSION |"
                " status]\n       collector --version\n\nsettings (environment variables):\n%s",
                mailroom::SettingsHelp(mailroom::CollectorSettings()).c_str());
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("%s", mailroom::VersionText("collector").c_str());
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "migrate") == 0) {
    return mailroom::RunMigrateCli(std::vector<std::string>(argv + 2, argv + argc), mailroom::Env(),
                                   stdout, stderr);
  }
  if (argc > 1 && std::strcmp(argv[1], "serve") != 0) {
    return mailroom::PrintCollectorUsage(stderr);
  }
  return mailroom::Serve();
}
