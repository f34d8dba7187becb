#include "sender/config/settings.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sender/delivery/breaker.h"    // Breaker::Options
#include "sender/delivery/engine.h"     // EngineOptions
#include "sender/lease/subscription.h"  // Subscription::Options
#include "sender/pacing/budget.h"       // BudgetConfig
#include "sender/transport/registry.h"
#include "sender/transport/transport.h"  // TransportConfig

namespace mailroom {
namespace {

constexpr bool kSecret = true;
std::string Ms(absl::Duration d) { return absl::StrCat(absl::ToInt64Milliseconds(d)); }

// How the sender reaches the collector.
SettingsTable CollectorConnectionRows() {
  return {
      {"MAILROOM_COLLECTOR_ADDRESS", "127.0.0.1:50051", "", "",
       "collector host:port (a DNS name with several addresses is fine)"},
      {"MAILROOM_COLLECTOR_TOKEN", "", "", "", "bearer token presented to the collector", kSecret},
      {"MAILROOM_COLLECTOR_TLS", "false", "", "",
       "connect with TLS (the certificate must name the host of MAILROOM_COLLECTOR_ADDRESS)"},
      {"MAILROOM_COLLECTOR_CA", "", "", "", "PEM CA that signed the collector's certificate"},
      {"MAILROOM_COLLECTOR_CLIENT_CERT", "", "", "", "client certificate and key for mutual TLS"},
      {"MAILROOM_COLLECTOR_CLIENT_KEY", "", "", "", "client certificate and key for mutual TLS"},
      {"MAILROOM_ALLOW_PLAINTEXT", "false", "", "",
       "connect without TLS to a MAILROOM_COLLECTOR_ADDRESS that is not loopback"},
  };
}

}  // namespace

const SettingsTable& SenderSettings() {
  // name, default, min, max (durations in ms), help[, kSecret]: see docs/configuration.md. A
  // default the code also needs without a configuration is the initializer of its component's
  // option and is read from there; every other default is written here only (.ci/defaults).
  static const SettingsTable* const kTable = [] {
    const Subscription::Options subscription;
    const TransportConfig transport;
    const BudgetConfig budget;
    const EngineOptions engine;
    const Breaker::Options breaker;
    auto* t = new SettingsTable(CollectorConnectionRows());
    const SettingsTable rows{
        {"MAILROOM_CONSUMER_GROUP", "mailroom", "", "",
         "consumer group; every group receives every job once"},
        {"MAILROOM_MAX_IN_FLIGHT", absl::StrCat(subscription.max_in_flight), "1", "100000",
         "jobs held at once"},
        {"MAILROOM_ACK_DELAY_MS", Ms(subscription.ack_delay), "0", "1000",
         "once an outcome is ready, wait up to this long (ms) to share an Acknowledge"},
        {"MAILROOM_FROM", "mailroom <no-reply@mailroom.localhost>", "", "",
         "From: address, addr or Name <addr>"},
        {"MAILROOM_LINK_BASE_URL", "http://localhost:8080", "", "",
         "links are BASE/activate?token=..., BASE/recover?token=..., BASE/action/NAME?token=..."},
        {"MAILROOM_TEMPLATE_DIR", "", "", "",
         "directory of the templates (default: the built-in ones)"},
        {"MAILROOM_PRODUCT_NAME", "mailroom", "", "", "{{product_name}} in the templates"},
        {"MAILROOM_CONNECTIONS", absl::StrCat(transport.connections), "1", "256",
         "parallel SMTP connections / SES requests, kept open between messages"},
        {"MAILROOM_SEND_TIMEOUT_MS", Ms(transport.timeout), "100", "600000",
         "timeout (ms) of one delivery attempt"},
        {"MAILROOM_PRICE_PER_1000", absl::StrFormat("%.2f", budget.price_per_1000),
         absl::StrCat(kMinPricePer1000), absl::StrCat(kMaxPricePer1000),
         "price of 1000 emails (SES: 0.10)"},
        {"MAILROOM_FAILOVER_TRANSPORT", "off", "", "",
         "a secondary transport (any of MAILROOM_TRANSPORT's) while the primary's breaker is open"},
        {"MAILROOM_FAILOVER_PRICE_PER_1000", "", absl::StrCat(kMinPricePer1000),
         absl::StrCat(kMaxPricePer1000),
         "required with a secondary: price of 1000 emails it sends"},
        {"MAILROOM_FAILOVER_CLASSES", "recovery", "", "",
         "which emails the secondary sends: recovery (password recoveries only) or all"},
        {"MAILROOM_BUDGET", "unlimited", "0", "1e12",
         "optional cap of this sender alone, money per calendar month, or unlimited"},
        {"MAILROOM_BURST", absl::StrCat(budget.burst), "1", "100000",
         "emails that may go at once above the per-sender cap's pace"},
        {"MAILROOM_PROVIDER_RATE_LIMIT", "", "0.001", "1e6",
         "provider cap in emails/s (unset: none)"},
        {"MAILROOM_RETRY_MAX_ATTEMPTS", "8", "1", "100",
         "delivery attempts before a retryable error becomes a failure"},
        {"MAILROOM_RETRY_BASE_MS", "1000", "1", "3600000",
         "first retry delay (ms); exponential backoff with equal jitter"},
        {"MAILROOM_RETRY_MAX_MS", "300000", "1", "86400000", "longest retry delay (ms)"},
        {"MAILROOM_EXPIRY_MARGIN_MS", Ms(engine.expiry_margin), "0", "3600000",
         "a token expiring sooner than this (ms) is acknowledged expired, never sent"},
        {"MAILROOM_SES_ACCOUNT_INTERVAL_MS", "300000", "1000", "86400000",
         "ses: how often (ms) the account's limits are read with GetAccount"},
        {"MAILROOM_BREAKER_MAX_BACKOFF", Ms(breaker.max_backoff), "1000", "3600000",
         "longest wait (ms) between probes while the provider is unavailable"},
        {"MAILROOM_METRICS_ADDRESS", "127.0.0.1:9465", "", "",
         "Prometheus /metrics listen address, or off"},
        {"MAILROOM_HEALTH_ADDRESS", "127.0.0.1:50052", "", "",
         "grpc.health.v1 listen address, or off"},
        {"MAILROOM_LOG_LEVEL", "info", "", "", "debug, info, warn or error"},
        {"MAILROOM_SENDER_NAME", "", "", "",
         "name shown in the collector's logs and owner column (default: the host name)"},
    };
    t->insert(t->end(), rows.begin(), rows.end());
    // The transports' own: MAILROOM_TRANSPORT and each transport's, then the secondary's.
    for (bool failover : {false, true}) {
      for (SettingSpec& s : TransportSettingsRows(TransportVars(failover))) {
        t->push_back(std::move(s));
      }
    }
    return t;
  }();
  return *kTable;
}

const SettingSpec& SenderSetting(const std::string& name) {
  return FindSetting(SenderSettings(), name);
}

}  // namespace mailroom
