#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collector/api/auth.h"
#include "collector/api/service.h"
#include "collector/dispatch/dispatcher.h"
#include "collector/dispatch/signing.h"
#include "collector/feedback/feedback_server.h"
#include "collector/feedback/provider_feedback.h"
#include "collector/feedback/reputation_guard.h"
#include "collector/feedback/sns_verifier.h"
#include "collector/maintenance/retention.h"
#include "collector/store/budget_store.h"
#include "common/env.h"

namespace mailroom {

// SES feedback through SNS and reputation.
struct FeedbackSettings {
  std::string address;  // MAILROOM_FEEDBACK_ADDRESS: the endpoint's host:port ("" = off)
  // MAILROOM_FEEDBACK_SNS_HOSTS (extra_hosts), MAILROOM_FEEDBACK_TOPIC_ARNS (topic_arns),
  // MAILROOM_FEEDBACK_CA_FILE (ca_file, also for the HTTPS fetches), MAILROOM_FEEDBACK_MAX_AGE.
  SnsVerifierOptions sns;
  // MAILROOM_FEEDBACK_WORKERS (workers), MAILROOM_FEEDBACK_REQUEST_TIMEOUT (request_timeout).
  FeedbackServerOptions server;
  // The providers' paths: MAILROOM_FEEDBACK_POSTMARK_CREDENTIALS, _SENDGRID_PUBLIC_KEY,
  // _MAILGUN_SIGNING_KEY, _RESEND_SECRET, _HTTP_SECRET, _HTTP_GROUP_SECRETS, _SANDBOX_SECRET
  // (each also as a file, *_FILE; secret), MAILROOM_FEEDBACK_SUPPRESS_UNMATCHED
  // (suppress_unmatched, which may also name ses, never sandbox) and MAILROOM_FEEDBACK_MAX_AGE.
  ProviderFeedbackOptions providers;
  int soft_bounce_limit = 0;          // MAILROOM_SOFT_BOUNCE_LIMIT
  absl::Duration reputation_window;   // MAILROOM_REPUTATION_WINDOW
  absl::Duration reputation_refresh;  // MAILROOM_REPUTATION_REFRESH
  GuardOptions guard;  // MAILROOM_GUARD_MAX_BOUNCE_RATE, _MAX_COMPLAINT_RATE, _MIN_SENT
};

// Everything the collector is configured with, from MAILROOM_* environment variables (see the
// README's table). Validated once at start; secrets are held but never printed. The settings
// table (settings.cc) takes its defaults from these members' initializers and from the named
// kDefault* constants, so each default is written once; config_test checks that they agree.
struct CollectorConfig {
  std::string database_url;  // MAILROOM_DATABASE_URL as given
  // MAILROOM_DIRECT_DATABASE_URL as given (default MAILROOM_DATABASE_URL): the connections
  // that need a server session of their own (migrations, LISTEN, retention's lock).
  std::string direct_database_url;
  TxTimeouts tx_timeouts;          // every query transaction's timeouts (SET LOCAL)
  DispatcherOptions dispatch;      // database URLs (+ connection defaults), wake-ups, ...
  std::string channel;             // MAILROOM_CHANNEL: applied by `migrate` when set
  SigningKey key;                  // MAILROOM_SECRET_KEY (secret)
  std::string listen_address;      // MAILROOM_LISTEN_ADDRESS
  std::string tls_cert_file;       // MAILROOM_TLS_CERT
  std::string tls_key_file;        // MAILROOM_TLS_KEY
  std::string tls_client_ca_file;  // MAILROOM_TLS_CLIENT_CA: require client certificates
  // MAILROOM_ALLOW_PLAINTEXT: serve gRPC without TLS on a non-loopback listen address (tokens
  // and bearer credentials cross the network in clear). Without it such a start is refused.
  bool allow_plaintext = false;
  std::string health_address;           // MAILROOM_HEALTH_ADDRESS: plaintext health only ("" = off)
  std::vector<Credential> credentials;  // MAILROOM_SUBSCRIBER_TOKENS (secret), with scopes
  int max_in_flight_cap =
      kDefaultMaxInFlightCap;  // MAILROOM_MAX_IN_FLIGHT_CAP: caps a Subscribe's own
  int max_streams_per_credential =
      kDefaultMaxStreamsPerCredential;    // MAILROOM_MAX_STREAMS_PER_CREDENTIAL
  bool insecure_no_auth = false;          // MAILROOM_INSECURE_NO_AUTH: development only
  std::string metrics_address;            // MAILROOM_METRICS_ADDRESS ("" disables)
  std::string console_address;            // MAILROOM_CONSOLE_ADDRESS ("" disables)
  bool auto_migrate = false;              // MAILROOM_AUTO_MIGRATE
  int db_pool_size = kDefaultDbPoolSize;  // MAILROOM_DB_POOL_SIZE
  // MAILROOM_MAX_COST_MICROS: per SENT outcome.
  int64_t max_cost_micros = kDefaultMaxCostMicros;
  // MAILROOM_MIN_PRICE_MICROS: of an AcquireBudget.
  int64_t min_price_micros = kDefaultMinPriceMicros;
  std::string log_level;  // MAILROOM_LOG_LEVEL
  // Group budgets: MAILROOM_DEFAULT_GROUP_BUDGET (money per month, "unlimited"),
  // MAILROOM_RECOVERY_RESERVE_PERCENT, MAILROOM_BUDGET_GRANT_LEASE_MS.
  BudgetDefaults budget;
  FeedbackSettings feedback;   // MAILROOM_FEEDBACK_*, _REPUTATION_*, _GUARD_*
  RetentionOptions retention;  // MAILROOM_RETENTION, MAILROOM_RETENTION_INTERVAL
};

// Reads and validates the configuration. Errors name the variable and the problem, never a
// secret's value.
absl::StatusOr<CollectorConfig> LoadCollectorConfig(const Env& env);

// The feedback endpoint's paths that are on, for the start-up log: "sns" (with topics) and each
// provider with its secret, comma-separated; "none" when none is.
std::string FeedbackPaths(const FeedbackSettings& f);

}  // namespace mailroom
