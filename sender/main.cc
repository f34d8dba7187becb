// The sender: subscribes to the collector, renders and delivers each job (file, SMTP, SES or a
// webhook), never faster than the budget, and reports every outcome. Configuration: MAILROOM_*
// and AWS_* environment variables (see README). This file only reads the configuration and
// wires the components together; `sender render` previews the templates and `sender doctor`
// checks the configuration.

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/server_runtime.h"
#include "common/version.h"
#include "grpcpp/grpcpp.h"
#include "sender/config/config.h"
#include "sender/config/settings.h"
#include "sender/delivery/actions.h"
#include "sender/delivery/breaker.h"
#include "sender/delivery/engine.h"
#include "sender/delivery/failover.h"
#include "sender/delivery/retry.h"
#include "sender/doctor/doctor.h"
#include "sender/hangup_signal.h"
#include "sender/health_watcher.h"
#include "sender/lease/collector_credentials.h"
#include "sender/lease/lease_table.h"
#include "sender/lease/subscription.h"
#include "sender/metrics/sender_metrics.h"
#include "sender/pacing/budget.h"
#include "sender/pacing/budget_client.h"
#include "sender/pacing/grant_pacer.h"
#include "sender/render/renderer.h"
#include "sender/ses/ses_account.h"
#include "sender/startup.h"
#include "sender/transport/transport_factory.h"

ABSL_FLAG(std::string, action, "",
          "sender render: the action's name (activation, password_recovery, login_code, ... or "
          "one with templates in the template directory)");
ABSL_FLAG(std::string, locale, "",
          "sender render: a locale tag such as de-AT (default: the "
          "templates' default locale)");

ABSL_FLAG(int, code_length, 0,
          "sender render: the code's digits (6 to 12, password_recovery 5; default: the "
          "built-in action's, 6 for another)");
ABSL_FLAG(absl::Duration, expiry, absl::ZeroDuration(),
          "sender render: the token's lifetime, e.g. 15m or 2h (default: the built-in "
          "action's, 24h for another)");
ABSL_FLAG(bool, version, false, "print the version and the build, then exit");
ABSL_FLAG(std::string, send_test, "",
          "sender doctor: send one sample email to this address through the configured "
          "transport and say what happened (written --send-test)");

namespace mailroom {
namespace {

int ConfigError(const absl::Status& st) {
  std::fprintf(stderr, "config error: %s\n", std::string(st.message()).c_str());
  return 2;
}

// The templates and message settings of a validated configuration.
absl::StatusOr<Renderer> MakeRenderer(const SenderConfig& c) {
  auto templates = Templates::Load(c.template_dir);
  if (!templates.ok()) return templates.status();
  return Renderer::Create(*std::move(templates),
                          {c.from, c.product_name, c.link_base_url, c.template_dir},
                          RealClock::Get());
}

constexpr char kUsage[] = "usage: sender            (configured by MAILROOM_* variables)\n"
                          "       sender render --action=NAME [--locale=TAG] [--code-length=N]"
                          " [--expiry=DURATION]\n"
                          "       sender doctor     (checks the configuration, sends nothing)\n"
                          "       sender doctor --send-test ADDRESS  (sends one sample email)\n"
                          "       sender --version\n";

// `sender render --action=NAME [--locale=TAG] [--code-length=N] [--expiry=DURATION]`: prints
// the email a job for the action (built in or with templates in the template directory) would
// get, with sample data, from the configured templates. No collector and no database: the code
// length and expiry are the built-in action's as installed (DefaultActionRules) unless the flags
// give the database's (mailroom.action_rules) for a changed or an application's own action.
int RunRender() {
  auto usage = [](const std::string& why) { return UsageError("sender render", why, kUsage); };
  const std::string action_name = absl::GetFlag(FLAGS_action);
  const std::string locale = absl::GetFlag(FLAGS_locale);
  if (!ValidActionName(action_name)) {
    return usage("--action must name an action ([a-z][a-z0-9_]{0,62}), e.g. login_code");
  }
  if (!locale.empty() && NormalizeLocale(locale).empty()) {
    return usage(absl::StrCat("--locale: \"", locale, "\" is not a locale tag such as de-AT"));
  }
  ActionRules rules = DefaultActionRules(action_name);
  if (const int length = absl::GetFlag(FLAGS_code_length); length != 0) {
    if (length < 5 || length > 12) return usage("--code-length must be 5 to 12 digits");
    rules.code_length = length;
  }
  if (const absl::Duration expiry = absl::GetFlag(FLAGS_expiry); expiry != absl::ZeroDuration()) {
    if (expiry < absl::Seconds(1)) return usage("--expiry must be 1s or more, e.g. 15m");
    rules.expiry = expiry;
  }
  auto loaded = LoadSenderConfig(Env());
  if (!loaded.ok()) return ConfigError(loaded.status());
  auto renderer = MakeRenderer(*loaded);
  if (!renderer.ok()) return ConfigError(renderer.status());
  auto email = renderer->Preview(action_name, locale, rules);
  if (!email.ok()) return ConfigError(email.status());
  std::printf("templates: %s\nsubject: %s\n\n--- text ---\n%s\n--- html ---\n%s",
              loaded->template_dir.empty() ? "built-in" : loaded->template_dir.c_str(),
              email->subject.c_str(), email->text.c_str(), email->html.c_str());
  return 0;
}

// `sender doctor`: checks the configuration as the sender would use it (templates, transport,
// collector) and prints one line per check; exit 1 on any problem, 2 when it does not load.
// With --send-test ADDRESS it sends one sample email instead: exit 0 accepted, 1 refused, 2 a
// configuration or an address that cannot be used.
int RunDoctorCommand() {
  auto loaded = LoadSenderConfig(Env());
  if (!loaded.ok()) return ConfigError(loaded.status());
  const std::string address = absl::GetFlag(FLAGS_send_test);
  if (!address.empty()) return RunSendTest(*loaded, address, stdout, RealClock::Get());
  return RunDoctor(*loaded, stdout);
}

// The primary transport and, with failover configured, the secondary.
struct Transports {
  std::unique_ptr<Transport> primary, secondary;
};

absl::StatusOr<Transports> MakeTransports(const SenderConfig& c) {
  Transports t;
  auto primary = MakeTransport(TransportConfigOf(c));
  if (!primary.ok()) return primary.status();
  t.primary = *std::move(primary);
  // The secondary transport, used while the primary's breaker is open (sender/delivery/failover.h).
  if (c.failover.has_value()) {
    auto made = MakeTransport(*c.failover);
    if (!made.ok()) {
      // The factory names the primary's variables; these are the secondary's.
      return absl::Status(made.status().code(),
                          absl::StrCat("MAILROOM_FAILOVER_",
                                       absl::StripPrefix(made.status().message(), "MAILROOM_")));
    }
    t.secondary = *std::move(made);
  }
  return t;
}

// The one channel to the collector: the stream, acknowledgements, renewals, usage and budget
// grants all go over it.
absl::StatusOr<std::shared_ptr<grpc::Channel>> CollectorChannel(const SenderConfig& c) {
  auto creds = CollectorCredentials(
      {c.collector_tls, c.collector_ca_file, c.client_cert_file, c.client_key_file});
  if (!creds.ok()) return creds.status();
  if (!c.collector_tls && !IsLoopbackAddress(c.collector_address)) {
    LogWarn("plaintext gRPC to a network address: the bearer token and the signed tokens cross "
            "the network in clear",
            {{"address", c.collector_address}, {"variable", "MAILROOM_ALLOW_PLAINTEXT"}});
  }
  return MakeCollectorChannel(c.collector_address, *creds);
}

FailoverPolicy FailoverOf(const SenderConfig& c, bool configured) {
  FailoverPolicy failover;
  failover.configured = configured;
  failover.classes = c.failover_classes == "all" ? FailoverClasses::kAll
                                                 : FailoverClasses::kRecovery;
  failover.primary_price_micros = std::max<int64_t>(1, PriceMicros(c.price_per_1000));
  failover.secondary_price_micros = std::max<int64_t>(1, PriceMicros(c.failover_price_per_1000));
  return failover;
}

// The group's budget is the collector's (grants); MAILROOM_BUDGET, when set, is this sender's
// own cap on top of it, counted from its start, as is the provider's rate cap. With a
// secondary transport the cap counts every email at the higher of the two prices, so it stays
// a ceiling whichever provider sends.
BudgetConfig CapOf(const SenderConfig& c, const FailoverPolicy& failover) {
  return {c.monthly_budget,
          failover.configured ? std::max(c.price_per_1000, c.failover_price_per_1000)
                              : c.price_per_1000,
          c.burst, c.provider_rate};
}

Subscription::Options SubscriptionOptionsOf(const SenderConfig& c,
                                            std::shared_ptr<grpc::Channel> channel,
                                            const std::string& holder, LeaseTable* leases) {
  Subscription::Options so;
  so.address = c.collector_address;
  so.channel = std::move(channel);
  so.bearer = c.collector_token;
  so.group = c.group;
  so.max_in_flight = c.max_in_flight;
  so.ack_delay = c.ack_delay;
  so.name = c.name;
  so.budget_holder = holder;
  so.leases = leases;
  return so;
}

EngineOptions EngineOptionsOf(const SenderConfig& c, const Transports& t, Breaker* breaker,
                              Breaker* secondary_breaker, const FailoverPolicy& failover) {
  EngineOptions eo;
  eo.workers = std::max(t.primary->Concurrency(),
                        t.secondary != nullptr ? t.secondary->Concurrency() : 0);
  eo.expiry_margin = c.expiry_margin;
  eo.breaker = breaker;
  if (failover.configured) {
    eo.secondary = t.secondary.get();
    eo.secondary_breaker = secondary_breaker;
    eo.failover = failover;
  }
  return eo;
}

void LogStarting(const SenderConfig& c, const Transports& t, const std::string& holder) {
  LogInfo("sender starting",
          {{"collector", c.collector_address},
           {"group", c.group},
           {"transport", t.primary->Name()},
           {"connections", absl::StrCat(t.primary->Concurrency())},
           {"holder", holder},
           {"sender_cap",
            c.monthly_budget.has_value() ? absl::StrCat(*c.monthly_budget) : std::string("none")},
           {"price_per_1000", absl::StrCat(c.price_per_1000)},
           {"failover", t.secondary != nullptr ? t.secondary->Name() : std::string("off")}});
  if (t.secondary != nullptr) {
    LogInfo("secondary transport ready",
            {{"transport", t.secondary->Name()},
             {"classes", c.failover_classes},
             {"price_per_1000", absl::StrCat(c.failover_price_per_1000)}});
  }
}

// The sender's components, built from a validated configuration, in the order they are wired.
struct Components {
  Components(const SenderConfig& c, Transports transports, std::shared_ptr<grpc::Channel> channel)
      : config(c), t(std::move(transports)), failover(FailoverOf(c, t.secondary != nullptr)),
        cap(CapOf(c, failover), RealClock::Get()), holder(MakeHolderName(c.name)),
        budget_client(channel, c.group, holder, c.collector_token),
        retry(c.retry_base, c.retry_max, c.retry_max_attempts, bitgen),
        breaker({absl::Seconds(1), c.breaker_max_backoff, failover.configured ? "primary" : ""},
                RealClock::Get(), &metrics),
        // The secondary's own breaker (its state is published by the gauges).
        secondary_breaker({absl::Seconds(1), c.breaker_max_backoff, "secondary"}, RealClock::Get()),
        subscription(SubscriptionOptionsOf(c, std::move(channel), holder, &leases)) {}

  const SenderConfig& config;
  Transports t;
  FailoverPolicy failover;
  Budget cap;
  const std::string holder;
  CollectorBudgetClient budget_client;
  absl::BitGen bitgen;
  RetryPolicy retry;
  Metrics metrics;
  Breaker breaker;
  Breaker secondary_breaker;
  // With SES, the account's own limits (GetAccount) cap this sender too.
  std::unique_ptr<SesAccount> ses_account;
  std::unique_ptr<GrantPacer> budget;
  // The leases held and the outcomes to acknowledge: the subscription fills it, the engine
  // checks and reports through it.
  LeaseTable leases;
  Subscription subscription;
  std::unique_ptr<Engine> engine;

  // The transport in use: the primary, the secondary while the primary is down, or none.
  Route Active() { return ActiveRoute(failover, breaker.open(), secondary_breaker.open()); }
};

// Builds the pacer (grants under the caps) and the engine of `s`.
void BuildDelivery(Components& s, Renderer& renderer) {
  const SenderConfig& c = s.config;
  std::vector<Pacer*> caps = {&s.cap};
  if (c.transport.Holds<SesSettings>()) {
    s.ses_account = std::make_unique<SesAccount>(
        [tc = TransportConfigOf(c)] { return FetchSesAccount(tc); }, c.ses_account_interval,
        &s.breaker, &s.metrics, RealClock::Get());
    caps.push_back(s.ses_account.get());
  }
  GrantPacerOptions gpo;
  gpo.price_micros = s.failover.primary_price_micros;
  // A dearer secondary is sent with grants bought at its price (sender/delivery/failover.h).
  if (s.failover.configured) {
    gpo.price_now = [&s] { return s.failover.GrantPrice(s.breaker.open()); };
  }
  s.budget = std::make_unique<GrantPacer>(gpo, &s.budget_client, caps, RealClock::Get());
  s.engine = std::make_unique<Engine>(
      EngineOptionsOf(c, s.t, &s.breaker, &s.secondary_breaker, s.failover),
      [&renderer](const v1::Job& job) { return renderer.Render(job); }, s.t.primary.get(),
      s.budget.get(),
      [&s](const absl::Status& e, int failures) { return s.retry.Next(e, failures); }, &s.leases,
      &s.metrics);
}

// Publishes the gauges on every scrape and serves the metrics (when configured).
absl::Status ServeMetrics(Components& s, MetricsServer& server) {
  if (s.config.metrics_address.empty()) return absl::OkStatus();
  s.metrics.SetCollectHook([&s] {
    PublishSenderGauges({s.cap.spent_micros(), s.cap.remaining_micros(),
                         s.budget->pace_per_second(), s.cap.sent_this_month(),
                         s.leases.pending_acks(), s.subscription.connected(),
                         s.budget->held_emails(), s.budget->exhausted()},
                        s.metrics);
    const Route route = s.Active();
    s.metrics.Set(sender_metrics::kTransportActive, route == Route::kPrimary ? 1 : 0, {"primary"});
    if (s.failover.configured) {
      s.metrics.Set(sender_metrics::kTransportActive, route == Route::kSecondary ? 1 : 0,
                    {"secondary"});
      s.metrics.Set(sender_metrics::kFailoverBreakerOpen, s.secondary_breaker.open() ? 1 : 0);
    }
  });
  return server.Start(s.config.metrics_address, &s.metrics);
}

// Stops in order after a signal: no new jobs (the collector keeps our leases; nothing is
// handed out), the sends in progress finished and the queued jobs handed back (DEFER, no
// delay: another member gets them at once), unused grants returned, then a bounded wait until
// the collector has every outcome.
void ShutDown(Components& s, Startup& startup, HealthWatcher* watcher, grpc::Server* health) {
  s.subscription.StopReceiving();
  const bool started = startup.Stop();
  if (watcher != nullptr) watcher->Stop();
  if (health != nullptr) SetServing(*health, false);
  if (started) s.engine->Drain();
  s.budget->Stop();  // nothing is being sent any more: unused grants go back to the group
  if (s.ses_account != nullptr) s.ses_account->Stop();
  if (!s.leases.AwaitAcknowledged(absl::Seconds(15))) {
    LogWarn("collector unreachable; some outcomes were not recorded (their jobs are handed out "
            "again when their leases run out)",
            {{"pending", absl::StrCat(s.leases.pending_acks())}});
  }
  s.subscription.Stop();
  if (health != nullptr) health->Shutdown();
}

// Runs the sender until a termination signal.
int Serve(Components& s, TerminationSignals& signals) {
  const SenderConfig& c = s.config;
  std::unique_ptr<grpc::Server> health;
  if (!c.health_address.empty()) {
    auto hs = StartHealthServer(c.health_address);
    if (!hs.ok()) {
      LogError("cannot listen", {{"address", c.health_address}});
      return 1;
    }
    health = std::move(hs->server);
  }
  // SERVING only while started, subscribed and a provider (primary or secondary) is usable.
  std::atomic<bool> engine_started{false};
  std::unique_ptr<HealthWatcher> watcher;
  if (health != nullptr) {
    watcher = std::make_unique<HealthWatcher>(
        [&] {
          return engine_started.load() && s.subscription.connected() && s.Active() != Route::kHold;
        },
        [&](bool serving) { SetServing(*health, serving); });
  }
  MetricsServer metrics_server;
  if (absl::Status st = ServeMetrics(s, metrics_server); !st.ok()) {
    LogError("cannot serve metrics", {{"error", std::string(st.message())}});
    return 1;
  }
  if (s.ses_account != nullptr) {
    (void)s.ses_account->Refresh();  // the account's limits before the first send (logged if not)
    s.ses_account->Start();
  }
  // The acknowledger and renewer; the stream opens once the collector answers.
  s.subscription.Start();
  LogStarting(c, s.t, s.holder);
  // Nothing starts before the collector answers (the group's usage, logged); a signal during
  // start-up ends the process cleanly. The group's spend is the collector's to keep: each
  // email is charged by a grant before it is sent.
  Startup startup([&](absl::Duration timeout) { return s.subscription.Usage(timeout); },
                  [&](const v1::GetUsageResponse& usage) {
                    LogInfo("group usage", {{"month", usage.month()},
                                            {"sent", absl::StrCat(usage.sent())},
                                            {"spent_micros", absl::StrCat(usage.cost_micros())}});
                  },
                  [&] {
                    s.budget->Start();
                    s.engine->Start();
                    s.subscription.StartReceiving(s.engine.get());
                    engine_started = true;  // the health watcher turns SERVING once subscribed
                  });
  startup.Begin();

  LogInfo("shutting down", {{"signal", signals.Wait()}});
  ShutDown(s, startup, watcher.get(), health.get());
  metrics_server.Stop();
  LogInfo("stopped");
  return 0;
}

int Run() {
  auto loaded = LoadSenderConfig(Env());
  if (!loaded.ok()) return ConfigError(loaded.status());
  const SenderConfig& c = *loaded;
  SetLogLevel(ParseLogLevel(c.log_level).value_or(LogLevel::kInfo));
  TerminationSignals signals;  // before any thread starts
  HangupSignal hangup;         // so too: a thread started before it would die of a SIGHUP

  auto renderer = MakeRenderer(c);
  if (!renderer.ok()) return ConfigError(renderer.status());
  auto transports = MakeTransports(c);
  if (!transports.ok()) return ConfigError(transports.status());
  auto channel = CollectorChannel(c);
  if (!channel.ok()) return ConfigError(channel.status());
  Components s(c, *std::move(transports), *std::move(channel));
  BuildDelivery(s, *renderer);
  // SIGHUP reads the templates again; a broken file keeps the ones in use.
  hangup.Start([&] {
    absl::Status st = renderer->Reload();
    if (st.ok()) {
      LogInfo("templates reloaded",
              {{"actions", absl::StrCat(renderer->templates()->Actions().size())}});
    } else {
      LogError("templates not reloaded, the previous ones stay in use",
               {{"error", std::string(st.message())}});
    }
  });
  const int rc = Serve(s, signals);
  hangup.Stop();
  return rc;
}

// The subcommand and its flags: render takes --action, --locale, --code-length and --expiry, the
// others none; --version goes with none.
int Main(int argc, char** argv) {
  auto cl = ParseFlags(argc, argv);
  if (!cl.ok()) return UsageError("sender", cl.status().message(), kUsage);
  const std::string command = cl->args.empty() ? "" : cl->args[0];
  if (cl->help) {
    // The settings table as it is, without reading the environment.
    std::printf("%s\nflags of sender render:\n%s\nsettings (environment variables):\n%s", kUsage,
                FlagsHelp().c_str(), SettingsHelp(SenderSettings()).c_str());
    return 0;
  }
  if (absl::GetFlag(FLAGS_version)) {
    std::printf("%s", VersionText("sender").c_str());
    return 0;
  }
  if (cl->args.size() > 1) {
    return UsageError("sender", absl::StrCat("unexpected argument ", cl->args[1]), kUsage);
  }
  for (const std::string& flag : cl->given) {
    const bool doctors = flag == "send_test";
    if (command != (doctors ? "doctor" : "render")) {
      return UsageError(
          "sender",
          absl::StrCat("--", flag, " is a flag of sender ", doctors ? "doctor" : "render"), kUsage);
    }
  }
  if (cl->given.count("send_test") > 0 && absl::GetFlag(FLAGS_send_test).empty()) {
    return UsageError("sender doctor", "--send-test needs an address", kUsage);
  }
  if (command == "render") return RunRender();
  if (command == "doctor") return RunDoctorCommand();
  if (!command.empty()) {
    return UsageError("sender", absl::StrCat("unknown command ", command), kUsage);
  }
  return Run();
}

}  // namespace
}  // namespace mailroom

int main(int argc, char** argv) {
  // Debian builds abseil with mutex deadlock detection on: a graph update on every unlock.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return mailroom::Main(argc, argv);
}
