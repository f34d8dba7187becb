// The sender: subscribes to the collector, renders and delivers each job (file, SMTP or SES),
// never faster than the budget, and reports every outcome. Configuration: MAILROOM_* and AWS_*
// environment variables (see README).
#include "absl/synchronization/mutex.h"
#include <signal.h>

#include <cmath>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/metrics.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "proto/grpc/health/v1/health.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "sender/breaker.h"
#include "sender/budget.h"
#include "sender/config.h"
#include "sender/engine.h"
#include "sender/health_watcher.h"
#include "sender/message.h"
#include "sender/retry.h"
#include "sender/subscription.h"
#include "sender/transport.h"

namespace mailroom {
namespace {

int ConfigError(const absl::Status& st) {
  std::fprintf(stderr, "config error: %s\n", std::string(st.message()).c_str());
  return 2;
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void DescribeMetrics(Metrics& m) {
  using T = Metrics::Type;
  m.Describe("mailroom_sender_jobs_total", T::kCounter, "Jobs finished, by action and outcome.");
  m.Describe("mailroom_sender_failures_total", T::kCounter, "Permanent failures, by reason.");
  m.Describe("mailroom_sender_retries_total", T::kCounter, "Deliveries handed back for a retry.");
  m.Describe("mailroom_sender_held_total", T::kCounter,
             "Deliveries handed back uncounted because the provider was unavailable.");
  m.Describe("mailroom_sender_rate_limit_wait_seconds_total", T::kCounter,
             "Time spent waiting for the budget or provider pace.");
  m.Describe("mailroom_sender_budget_deferrals_total", T::kCounter,
             "Times queued jobs were handed back because the budget was spent for now.");
  m.Describe("mailroom_sender_send_seconds_total", T::kCounter, "Time spent in transport sends.");
  m.Describe("mailroom_sender_spent_micros_total", T::kCounter,
             "Money spent by this process, in millionths.");
  m.Describe("mailroom_sender_queued_jobs", T::kGauge, "Jobs held and not yet being sent.");
  m.Describe("mailroom_sender_budget_spent_micros", T::kGauge, "Spent this month (millionths).");
  m.Describe("mailroom_sender_budget_remaining_micros", T::kGauge,
             "Left this month (millionths; -1 unlimited).");
  m.Describe("mailroom_sender_budget_pace_per_second", T::kGauge, "Current budget pace.");
  m.Describe("mailroom_sender_sent_this_month", T::kGauge, "Emails paid for this month.");
  m.Describe("mailroom_sender_pending_acks", T::kGauge, "Outcomes not yet recorded.");
  m.Describe("mailroom_sender_connected", T::kGauge, "1 while subscribed to a collector.");
}

int Run() {
  auto loaded = LoadSenderConfig(Env());
  if (!loaded.ok()) return ConfigError(loaded.status());
  const SenderConfig& c = *loaded;
  SetLogLevel(c.log_level == "debug" ? LogLevel::kDebug
              : c.log_level == "warn" ? LogLevel::kWarn
              : c.log_level == "error" ? LogLevel::kError
                                       : LogLevel::kInfo);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto templates = Templates::Load(c.template_dir);
  if (!templates.ok()) return ConfigError(templates.status());
  auto from = ParseMailbox(c.from);
  if (!from.ok()) return ConfigError(absl::InvalidArgumentError(
      absl::StrCat("MAILROOM_FROM: ", from.status().message())));
  const std::string from_address = from->second;
  const std::string id_domain = from_address.substr(from_address.find('@') + 1);

  TransportConfig tc;
  tc.kind = c.transport;
  tc.connections = c.connections;
  tc.timeout = c.send_timeout;
  tc.file_dir = c.file_dir;
  tc.smtp_url = c.smtp_url;
  tc.smtp_username = c.smtp_username;
  tc.smtp_password = c.smtp_password;
  tc.smtp_require_tls = !c.smtp_allow_plain;
  tc.smtp_ca_file = c.smtp_ca_file;
  tc.smtp_insecure_skip_verify = c.smtp_insecure_skip_verify;
  tc.ses_region = c.ses_region;
  tc.ses_endpoint = c.ses_endpoint;
  tc.aws_access_key_id = c.aws_access_key_id;
  tc.aws_secret_access_key = c.aws_secret_access_key;
  tc.aws_session_token = c.aws_session_token;
  tc.ses_configuration_set = c.ses_configuration_set;
  auto transport = MakeTransport(tc);
  if (!transport.ok()) return ConfigError(transport.status());

  Budget budget({c.monthly_budget, c.price_per_1000, c.burst, c.provider_rate},
                RealClock::Get());
  absl::BitGen bitgen;
  RetryPolicy retry(c.retry_base, c.retry_max, c.retry_max_attempts, bitgen);
  Metrics metrics;
  DescribeMetrics(metrics);

  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (c.collector_tls) {
    grpc::SslCredentialsOptions ssl;
    if (!c.collector_ca_file.empty()) ssl.pem_root_certs = Slurp(c.collector_ca_file);
    if (!c.client_cert_file.empty()) {
      ssl.pem_cert_chain = Slurp(c.client_cert_file);
      ssl.pem_private_key = Slurp(c.client_key_file);
    }
    creds = grpc::SslCredentials(ssl);
  }

  Subscription* subscription = nullptr;
  Renderer render = [&](const v1::Job& job) -> absl::StatusOr<OutgoingEmail> {
    absl::Status st = ValidateAddress(job.email());
    if (!st.ok()) return st;
    TemplateVars vars{job.login(), job.email(), job.token(), job.code(), c.product_name,
                      c.link_base_url, absl::FromUnixSeconds(job.expires_at())};
    auto rendered = templates->Render(job.action(), vars);
    if (!rendered.ok()) return rendered.status();
    Message m{c.from, job.email(), job.login(), rendered->subject, rendered->text,
              rendered->html, NewMessageId(id_domain), absl::Now()};
    auto mime = BuildMime(m);
    if (!mime.ok()) return mime.status();
    return OutgoingEmail{from_address, job.email(), *std::move(mime), m.message_id};
  };
  EngineOptions eo;
  eo.workers = (*transport)->Concurrency();
  eo.expiry_margin = c.expiry_margin;
  eo.lease = [&](uint64_t id) { return subscription->Check(id); };
  Breaker breaker({absl::Seconds(1), c.breaker_max_backoff}, RealClock::Get(), &metrics);
  eo.breaker = &breaker;
  Engine engine(
      eo, render, transport->get(), &budget,
      [&](const absl::Status& e, int failures) { return retry.Next(e, failures); },
      [&](v1::JobOutcome o) { subscription->Report(std::move(o)); }, &metrics);
  Subscription::Options so;
  so.address = c.collector_address;
  so.credentials = creds;
  so.bearer = c.collector_token;
  so.group = c.group;
  so.max_in_flight = c.max_in_flight;
  so.name = c.name;
  Subscription sub(
      so, [&](std::vector<v1::Job> jobs) { engine.Submit(std::move(jobs)); },
      [&](const std::vector<uint64_t>& lost) { engine.Drop(lost); });
  subscription = &sub;

  std::unique_ptr<grpc::Server> health;
  if (!c.health_address.empty()) {
    grpc::EnableDefaultHealthCheckService(true);
    // Reflection is a sync service: without one, gRPC refuses a server whose only service is
    // the default health check ("completion queues must be frequently polled"). It also lets
    // grpcurl list the health service.
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    // gRPC's built-in health service carries no protobuf descriptor; linking ours lets
    // reflection (grpcurl describe/list, buf curl) resolve grpc.health.v1.Health.
    (void)grpc::health::v1::HealthCheckRequest::descriptor();
    grpc::ServerBuilder b;
    b.AddListeningPort(c.health_address, grpc::InsecureServerCredentials());
    b.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    health = b.BuildAndStart();
    if (health == nullptr) {
      LogError("cannot listen", {{"address", c.health_address}});
      return 1;
    }
    health->GetHealthCheckService()->SetServingStatus(false);
  }
  // SERVING only while started, subscribed and the provider is usable.
  std::atomic<bool> engine_started{false};
  std::unique_ptr<HealthWatcher> watcher;
  if (health != nullptr) {
    watcher = std::make_unique<HealthWatcher>(
        [&] { return engine_started.load() && sub.connected() && !breaker.open(); },
        [&](bool serving) { health->GetHealthCheckService()->SetServingStatus(serving); });
  }
  MetricsServer metrics_server;
  if (!c.metrics_address.empty()) {
    metrics.SetCollectHook([&] {
      metrics.Set("mailroom_sender_budget_spent_micros", budget.spent_micros());
      metrics.Set("mailroom_sender_budget_remaining_micros", budget.remaining_micros());
      double pace = budget.pace_per_second();
      metrics.Set("mailroom_sender_budget_pace_per_second", std::isinf(pace) ? -1 : pace);
      metrics.Set("mailroom_sender_sent_this_month", budget.sent_this_month());
      metrics.Set("mailroom_sender_pending_acks", sub.pending_acks());
      metrics.Set("mailroom_sender_connected", sub.connected() ? 1 : 0);
    });
    absl::Status st = metrics_server.Start(c.metrics_address, &metrics);
    if (!st.ok()) {
      LogError("cannot serve metrics", {{"error", std::string(st.message())}});
      return 1;
    }
  }

  // The month's spend lives with the acknowledgements: nothing is sent before it is known.
  sub.Start();  // acknowledger and renewer; the stream opens after the usage is known
  LogInfo("sender starting", {{"collector", c.collector_address}, {"group", c.group},
                              {"transport", (*transport)->Name()},
                              {"connections", absl::StrCat((*transport)->Concurrency())},
                              {"budget", c.monthly_budget.has_value()
                                             ? absl::StrCat(*c.monthly_budget)
                                             : std::string("unlimited")},
                              {"price_per_1000", absl::StrCat(c.price_per_1000)}});
  // Start-up waits for the month's usage; a signal during it ends the process cleanly (the
  // engine and the stream are started under `phase_mu` only if no shutdown began).
  absl::Mutex phase_mu;
  bool shutting_down = false, started = false;
  std::thread restore([&] {
    absl::Duration backoff = absl::Milliseconds(200);
    while (true) {
      {
        absl::MutexLock lock(&phase_mu);
        if (shutting_down) return;
      }
      auto usage = sub.Usage(absl::Seconds(5));
      if (usage.ok()) {
        budget.Restore(usage->month(), usage->sent(), usage->cost_micros());
        LogInfo("budget restored", {{"month", usage->month()},
                                    {"sent", absl::StrCat(usage->sent())},
                                    {"spent_micros", absl::StrCat(usage->cost_micros())},
                                    {"pace_per_second", absl::StrCat(budget.pace_per_second())}});
        break;
      }
      if (absl::IsCancelled(usage.status())) return;
      const bool refused = absl::IsUnauthenticated(usage.status()) ||
                           absl::IsPermissionDenied(usage.status()) ||
                           absl::IsInvalidArgument(usage.status());
      // A refusal is a configuration problem: say so and retry slowly, never in a busy loop.
      if (refused) backoff = absl::Seconds(30);
      (refused ? LogError : LogWarn)(
          refused ? "the collector refuses this sender" : "waiting for the collector",
          {{"error", std::string(usage.status().message())},
           {"retry_in_ms", absl::StrCat(absl::ToInt64Milliseconds(backoff))}});
      absl::MutexLock lock(&phase_mu);
      phase_mu.AwaitWithTimeout(absl::Condition(&shutting_down), backoff);
      backoff = std::min(backoff * 2, absl::Seconds(30));
    }
    absl::MutexLock lock(&phase_mu);
    if (shutting_down) return;
    engine.Start();
    sub.StartReceiving();
    started = true;
    engine_started = true;  // the health watcher turns SERVING once subscribed
  });

  int sig = 0;
  sigwait(&signals, &sig);
  LogInfo("shutting down", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
  {
    absl::MutexLock lock(&phase_mu);
    shutting_down = true;
  }
  sub.StopReceiving();  // no new jobs (the collector keeps our leases; nothing is handed out)
  restore.join();
  if (watcher != nullptr) watcher->Stop();
  if (health != nullptr) health->GetHealthCheckService()->SetServingStatus(false);
  // Finish the sends in progress and hand the queued jobs back (DEFER, no delay: another
  // member gets them at once), then wait, bounded, until the collector has every outcome.
  if (started) engine.Drain();
  if (!sub.Flush(absl::Seconds(15))) {
    LogWarn("collector unreachable; some outcomes were not recorded (their jobs are handed out "
            "again when their leases run out)",
            {{"pending", absl::StrCat(sub.pending_acks())}});
  }
  sub.Stop();
  if (health != nullptr) health->Shutdown();
  metrics_server.Stop();
  LogInfo("stopped");
  return 0;
}

}  // namespace
}  // namespace mailroom

int main() {
  // Debian builds abseil with mutex deadlock detection on: a graph update on every unlock.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return mailroom::Run();
}
