// The sender: subscribes to the collector, renders and delivers each job (file, SMTP, SES or a
// webhook), never faster than the budget, and reports every outcome. Configuration: MAILROOM_*
// and AWS_* environment variables (see README). This file only reads the configuration and
// wires the components together; `sender render` previews the templates and `sender doctor`
// checks the configuration.

#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/server_runtime.h"
#include "grpcpp/grpcpp.h"
#include "sender/breaker.h"
#include "sender/budget.h"
#include "sender/budget_client.h"
#include "sender/collector_credentials.h"
#include "sender/config.h"
#include "sender/doctor.h"
#include "sender/engine.h"
#include "sender/failover.h"
#include "sender/grant_pacer.h"
#include "sender/health_watcher.h"
#include "sender/renderer.h"
#include "sender/retry.h"
#include "sender/ses_account.h"
#include "sender/settings.h"
#include "sender/sender_metrics.h"
#include "sender/startup.h"
#include "sender/subscription.h"
#include "sender/transport/transport_factory.h"

ABSL_FLAG(std::string, action, "", "sender render: activation or password_recovery");
ABSL_FLAG(std::string, locale, "", "sender render: a locale tag such as de-AT (default: the "
                                   "templates' default locale)");

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
  return Renderer::Create(*std::move(templates), {c.from, c.product_name, c.link_base_url},
                          RealClock::Get());
}

constexpr char kUsage[] =
    "usage: sender            (configured by MAILROOM_* variables)\n"
    "       sender render --action=activation|password_recovery [--locale=TAG]\n"
    "       sender doctor     (checks the configuration, sends nothing)\n";

// `sender render --action=activation|password_recovery [--locale=TAG]`: prints the email a job
// would get, with sample data, from the configured templates. No collector needed.
int RunRender() {
  auto usage = [](const std::string& why) { return UsageError("sender render", why, kUsage); };
  const std::string action_name = absl::GetFlag(FLAGS_action);
  const std::string locale = absl::GetFlag(FLAGS_locale);
  v1::Action action;
  if (action_name == "activation") {
    action = v1::ACTION_ACTIVATION;
  } else if (action_name == "password_recovery") {
    action = v1::ACTION_PASSWORD_RECOVERY;
  } else {
    return usage("--action must be activation or password_recovery");
  }
  if (!locale.empty() && NormalizeLocale(locale).empty()) {
    return usage(absl::StrCat("--locale: \"", locale, "\" is not a locale tag such as de-AT"));
  }
  auto loaded = LoadSenderConfig(Env());
  if (!loaded.ok()) return ConfigError(loaded.status());
  auto renderer = MakeRenderer(*loaded);
  if (!renderer.ok()) return ConfigError(renderer.status());
  auto email = renderer->Preview(action, locale);
  if (!email.ok()) return ConfigError(email.status());
  std::printf("templates: %s\nsubject: %s\n\n--- text ---\n%s\n--- html ---\n%s",
              loaded->template_dir.empty() ? "built-in" : loaded->template_dir.c_str(),
              email->subject.c_str(), email->text.c_str(), email->html.c_str());
  return 0;
}

// `sender doctor`: checks the configuration as the sender would use it (templates, transport,
// collector) and prints one line per check; exit 1 on any problem, 2 when it does not load.
int RunDoctorCommand() {
  auto loaded = LoadSenderConfig(Env());
  if (!loaded.ok()) return ConfigError(loaded.status());
  return RunDoctor(*loaded, stdout);
}

int Run() {
  auto loaded = LoadSenderConfig(Env());
  if (!loaded.ok()) return ConfigError(loaded.status());
  const SenderConfig& c = *loaded;
  SetLogLevel(c.log_level == "debug" ? LogLevel::kDebug
              : c.log_level == "warn" ? LogLevel::kWarn
              : c.log_level == "error" ? LogLevel::kError
                                       : LogLevel::kInfo);
  TerminationSignals signals;  // before any thread starts

  auto renderer = MakeRenderer(c);
  if (!renderer.ok()) return ConfigError(renderer.status());
  auto transport = MakeTransport(TransportConfigOf(c));
  if (!transport.ok()) return ConfigError(transport.status());
  // The secondary transport, used while the primary's breaker is open (sender/failover.h).
  std::unique_ptr<Transport> secondary;
  if (c.failover.has_value()) {
    auto made = MakeTransport(*c.failover);
    if (!made.ok()) {
      // The factory names the primary's variables; these are the secondary's.
      return ConfigError(absl::Status(
          made.status().code(),
          absl::StrCat("MAILROOM_FAILOVER_",
                       absl::StripPrefix(made.status().message(), "MAILROOM_"))));
    }
    secondary = *std::move(made);
  }
  auto creds = CollectorCredentials(
      {c.collector_tls, c.collector_ca_file, c.client_cert_file, c.client_key_file});
  if (!creds.ok()) return ConfigError(creds.status());
  if (!c.collector_tls && !IsLoopbackAddress(c.collector_address)) {
    LogWarn("plaintext gRPC to a network address: the bearer token and the signed tokens cross "
            "the network in clear",
            {{"address", c.collector_address}, {"variable", "MAILROOM_ALLOW_PLAINTEXT"}});
  }

  FailoverPolicy failover;
  failover.configured = secondary != nullptr;
  failover.classes =
      c.failover_classes == "all" ? FailoverClasses::kAll : FailoverClasses::kRecovery;
  failover.primary_price_micros = std::max<int64_t>(1, PriceMicros(c.price_per_1000));
  failover.secondary_price_micros = std::max<int64_t>(1, PriceMicros(c.failover_price_per_1000));
  // The group's budget is the collector's (grants); MAILROOM_BUDGET, when set, is this
  // sender's own cap on top of it, counted from its start, as is the provider's rate cap.
  // With a secondary transport the cap counts every email at the higher of the two prices,
  // so it stays a ceiling whichever provider sends.
  Budget cap({c.monthly_budget,
              failover.configured ? std::max(c.price_per_1000, c.failover_price_per_1000)
                                  : c.price_per_1000,
              c.burst, c.provider_rate},
             RealClock::Get());
  const std::string holder = MakeHolderName(c.name);
  CollectorBudgetClient budget_client(grpc::CreateChannel(c.collector_address, *creds), c.group,
                                      holder, c.collector_token);
  absl::BitGen bitgen;
  RetryPolicy retry(c.retry_base, c.retry_max, c.retry_max_attempts, bitgen);
  Metrics metrics;
  Breaker breaker({absl::Seconds(1), c.breaker_max_backoff, failover.configured ? "primary" : ""},
                  RealClock::Get(), &metrics);
  // The secondary's own breaker (its state is published by the collect hook below).
  Breaker secondary_breaker({absl::Seconds(1), c.breaker_max_backoff, "secondary"},
                            RealClock::Get());
  // With SES, the account's own limits (GetAccount) cap this sender too.
  std::unique_ptr<SesAccount> ses_account;
  std::vector<Pacer*> caps = {&cap};
  if (c.transport == "ses") {
    ses_account = std::make_unique<SesAccount>(
        [tc = TransportConfigOf(c)] { return FetchSesAccount(tc); }, c.ses_account_interval,
        &breaker, &metrics, RealClock::Get());
    caps.push_back(ses_account.get());
  }
  GrantPacerOptions gpo;
  gpo.price_micros = failover.primary_price_micros;
  // A dearer secondary is sent with grants bought at its price (sender/failover.h).
  if (failover.configured) {
    gpo.price_now = [&] { return failover.GrantPrice(breaker.open()); };
  }
  GrantPacer budget(gpo, &budget_client, caps, RealClock::Get());

  Subscription::Options so;
  so.address = c.collector_address;
  so.credentials = *creds;
  so.bearer = c.collector_token;
  so.group = c.group;
  so.max_in_flight = c.max_in_flight;
  so.ack_delay = c.ack_delay;
  so.name = c.name;
  so.budget_holder = holder;
  Subscription sub(so);
  // The subscription holds the leases the engine checks and reports under; the engine
  // receives the jobs once the stream opens (sub.StartReceiving below).
  EngineOptions eo;
  eo.workers = std::max((*transport)->Concurrency(),
                        secondary != nullptr ? secondary->Concurrency() : 0);
  eo.expiry_margin = c.expiry_margin;
  eo.breaker = &breaker;
  if (failover.configured) {
    eo.secondary = secondary.get();
    eo.secondary_breaker = &secondary_breaker;
    eo.failover = failover;
  }
  Engine engine(
      eo, [&](const v1::Job& job) { return renderer->Render(job); }, transport->get(), &budget,
      [&](const absl::Status& e, int failures) { return retry.Next(e, failures); }, &sub,
      &metrics);

  std::unique_ptr<grpc::Server> health;
  if (!c.health_address.empty()) {
    auto hs = StartHealthServer(c.health_address);
    if (!hs.ok()) {
      LogError("cannot listen", {{"address", c.health_address}});
      return 1;
    }
    health = std::move(hs->server);
  }
  // The transport in use: the primary, the secondary while the primary is down, or none.
  auto active = [&] { return ActiveRoute(failover, breaker.open(), secondary_breaker.open()); };
  // SERVING only while started, subscribed and a provider (primary or secondary) is usable.
  std::atomic<bool> engine_started{false};
  std::unique_ptr<HealthWatcher> watcher;
  if (health != nullptr) {
    watcher = std::make_unique<HealthWatcher>(
        [&] { return engine_started.load() && sub.connected() && active() != Route::kHold; },
        [&](bool serving) { SetServing(*health, serving); });
  }
  MetricsServer metrics_server;
  if (!c.metrics_address.empty()) {
    metrics.SetCollectHook([&] {
      PublishSenderGauges({cap.spent_micros(), cap.remaining_micros(),
                           budget.pace_per_second(), cap.sent_this_month(),
                           sub.pending_acks(), sub.connected(), budget.held_emails(),
                           budget.exhausted()},
                          metrics);
      const Route route = active();
      metrics.Set(sender_metrics::kTransportActive, route == Route::kPrimary ? 1 : 0, {"primary"});
      if (failover.configured) {
        metrics.Set(sender_metrics::kTransportActive, route == Route::kSecondary ? 1 : 0,
                    {"secondary"});
        metrics.Set(sender_metrics::kFailoverBreakerOpen, secondary_breaker.open() ? 1 : 0);
      }
    });
    absl::Status st = metrics_server.Start(c.metrics_address, &metrics);
    if (!st.ok()) {
      LogError("cannot serve metrics", {{"error", std::string(st.message())}});
      return 1;
    }
  }

  if (ses_account != nullptr) {
    (void)ses_account->Refresh();  // the account's limits before the first send (logged if not)
    ses_account->Start();
  }
  sub.Start();  // acknowledger and renewer; the stream opens once the collector answers
  LogInfo("sender starting", {{"collector", c.collector_address}, {"group", c.group},
                              {"transport", (*transport)->Name()},
                              {"connections", absl::StrCat((*transport)->Concurrency())},
                              {"holder", holder},
                              {"sender_cap", c.monthly_budget.has_value()
                                                 ? absl::StrCat(*c.monthly_budget)
                                                 : std::string("none")},
                              {"price_per_1000", absl::StrCat(c.price_per_1000)},
                              {"failover", secondary != nullptr ? secondary->Name()
                                                                : std::string("off")}});
  if (secondary != nullptr) {
    LogInfo("secondary transport ready",
            {{"transport", secondary->Name()}, {"classes", c.failover_classes},
             {"price_per_1000", absl::StrCat(c.failover_price_per_1000)}});
  }
  // Nothing starts before the collector answers (the group's usage, logged); a signal during
  // start-up ends the process cleanly. The group's spend is the collector's to keep: each
  // email is charged by a grant before it is sent.
  Startup startup(
      [&](absl::Duration timeout) { return sub.Usage(timeout); },
      [&](const v1::GetUsageResponse& usage) {
        LogInfo("group usage", {{"month", usage.month()},
                                {"sent", absl::StrCat(usage.sent())},
                                {"spent_micros", absl::StrCat(usage.cost_micros())}});
      },
      [&] {
        budget.Start();
        engine.Start();
        sub.StartReceiving(&engine);
        engine_started = true;  // the health watcher turns SERVING once subscribed
      });
  startup.Begin();

  LogInfo("shutting down", {{"signal", signals.Wait()}});
  sub.StopReceiving();  // no new jobs (the collector keeps our leases; nothing is handed out)
  const bool started = startup.Stop();
  if (watcher != nullptr) watcher->Stop();
  if (health != nullptr) SetServing(*health, false);
  // Finish the sends in progress and hand the queued jobs back (DEFER, no delay: another
  // member gets them at once), then wait, bounded, until the collector has every outcome.
  if (started) engine.Drain();
  budget.Stop();  // nothing is being sent any more: unused grants go back to the group
  if (ses_account != nullptr) ses_account->Stop();
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

// The subcommand and its flags: render takes --action and --locale, the others none.
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
  if (cl->args.size() > 1) {
    return UsageError("sender", absl::StrCat("unexpected argument ", cl->args[1]), kUsage);
  }
  if (command != "render" && !cl->given.empty()) {
    return UsageError(
        "sender", absl::StrCat("--", *cl->given.begin(), " is a flag of sender render"), kUsage);
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
