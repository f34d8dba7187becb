#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/env.h"
#include "sender/config/settings.h"
#include "sender/transport/transport.h"

namespace mailroom {

// Everything the sender is configured with, from MAILROOM_* (and AWS_*) environment variables;
// see the README's table. Validated once at start; secrets are held, never printed.
struct SenderConfig {
  // The collector.
  std::string collector_address;  // MAILROOM_COLLECTOR_ADDRESS
  std::string collector_token;    // MAILROOM_COLLECTOR_TOKEN (secret)
  bool collector_tls = false;     // MAILROOM_COLLECTOR_TLS
  bool allow_plaintext = false;   // MAILROOM_ALLOW_PLAINTEXT: plaintext to a network address
  std::string collector_ca_file;  // MAILROOM_COLLECTOR_CA
  std::string client_cert_file;   // MAILROOM_COLLECTOR_CLIENT_CERT
  std::string client_key_file;    // MAILROOM_COLLECTOR_CLIENT_KEY
  std::string group;              // MAILROOM_CONSUMER_GROUP
  int max_in_flight = 0;          // MAILROOM_MAX_IN_FLIGHT
  absl::Duration ack_delay;       // MAILROOM_ACK_DELAY_MS

  // Messages.
  std::string from;           // MAILROOM_FROM
  std::string link_base_url;  // MAILROOM_LINK_BASE_URL
  std::string template_dir;   // MAILROOM_TEMPLATE_DIR
  std::string product_name;   // MAILROOM_PRODUCT_NAME

  // Transport: MAILROOM_TRANSPORT's kind and that transport's own settings (read by its
  // registry entry, sender/transport/registry.h), MAILROOM_CONNECTIONS (parallel sends),
  // MAILROOM_SEND_TIMEOUT_MS, and the consumer group. Carries secrets: do not log it.
  TransportConfig transport;
  absl::Duration ses_account_interval;  // MAILROOM_SES_ACCOUNT_INTERVAL_MS: GetAccount readings

  // Failover: a secondary transport used while the primary's circuit breaker is open. Its
  // settings are the primary's names after MAILROOM_FAILOVER_ (MAILROOM_FAILOVER_SMTP_URL,
  // MAILROOM_FAILOVER_AWS_ACCESS_KEY_ID, ...); MAILROOM_CONNECTIONS and MAILROOM_SEND_TIMEOUT_MS
  // apply to both. Carries secrets: do not log it.
  std::optional<TransportConfig> failover;    // MAILROOM_FAILOVER_TRANSPORT (unset/"off": none)
  double failover_price_per_1000 = 0;         // MAILROOM_FAILOVER_PRICE_PER_1000 (required with it)
  std::string failover_classes = "recovery";  // MAILROOM_FAILOVER_CLASSES: recovery | all

  // Budget and retries.
  std::optional<double> monthly_budget;  // MAILROOM_BUDGET (unset/"unlimited": no limit)
  double price_per_1000 = 0;             // MAILROOM_PRICE_PER_1000
  int burst = 0;                         // MAILROOM_BURST
  std::optional<double> provider_rate;   // MAILROOM_PROVIDER_RATE_LIMIT (emails/s)
  int retry_max_attempts = 0;            // MAILROOM_RETRY_MAX_ATTEMPTS
  absl::Duration retry_base;             // MAILROOM_RETRY_BASE_MS
  absl::Duration retry_max;              // MAILROOM_RETRY_MAX_MS
  absl::Duration expiry_margin;          // MAILROOM_EXPIRY_MARGIN_MS
  absl::Duration breaker_max_backoff;    // MAILROOM_BREAKER_MAX_BACKOFF (ms)

  // Operations.
  std::string metrics_address;  // MAILROOM_METRICS_ADDRESS ("" = off)
  std::string health_address;   // MAILROOM_HEALTH_ADDRESS (gRPC health; "" = off)
  std::string log_level;        // MAILROOM_LOG_LEVEL
  std::string name;             // MAILROOM_SENDER_NAME (default: host name)
};

// Reads and validates the configuration; errors name the variable, never a secret's value.
absl::StatusOr<SenderConfig> LoadSenderConfig(const Env& env);

// The transport part of a validated configuration (MakeTransport's input): `config.transport`.
// Carries the SMTP password, API keys and AWS secrets: do not log it.
TransportConfig TransportConfigOf(const SenderConfig& config);

}  // namespace mailroom
