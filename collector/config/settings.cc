#include "collector/config/settings.h"

#include "absl/strings/str_cat.h"
#include "collector/api/service.h"  // kDefaultMaxInFlightCap, kMaxInFlight, kDefaultMaxCost...
#include "collector/dispatch/dispatcher.h"          // DispatcherOptions, kDefaultLease
#include "collector/feedback/feedback_server.h"     // FeedbackServerOptions
#include "collector/feedback/reputation_guard.h"    // GuardOptions
#include "collector/feedback/webhook_signatures.h"  // kDefaultFeedbackMaxAge
#include "collector/maintenance/retention.h"        // RetentionOptions
#include "collector/store/budget_store.h"           // BudgetDefaults, kDefaultMinPriceMicros
#include "collector/store/store.h"                  // kDefaultDbPoolSize

namespace mailroom {

namespace {
constexpr bool kSecret = true;
std::string Ms(absl::Duration d) { return absl::StrCat(absl::ToInt64Milliseconds(d)); }
}  // namespace

// A table, one row per setting.
// NOLINTNEXTLINE(readability-function-size)
const SettingsTable& CollectorSettings() {
  // name, default, min, max (durations in ms), help[, kSecret]: see docs/configuration.md. A
  // default the code also needs without a configuration is the initializer of its member (or a
  // named constant) and is read from there.
  const DispatcherOptions d;
  const RetentionOptions r;
  const BudgetDefaults budget;
  const GuardOptions guard;
  static const SettingsTable* const kTable = new SettingsTable{
      {"MAILROOM_DATABASE_URL", "", "", "",
       "required: libpq connection URL or key=value string of the database", kSecret},
      {"MAILROOM_BATCH_LIMIT", absl::StrCat(d.batch_limit), "1", "10000",
       "dispatch as soon as this many NOTIFY wake-ups arrived"},
      {"MAILROOM_DEQUEUE_LIMIT", absl::StrCat(d.dequeue_limit), "1", "10000",
       "the most jobs one dequeue hands one subscriber"},
      {"MAILROOM_BATCH_TIMEOUT", Ms(d.batch_timeout), "0", "3600000",
       "dispatch at the latest this many ms after the first notification since the last one"},
      {"MAILROOM_HEALTHCHECK_INTERVAL", Ms(d.healthcheck_interval), "1000", "86400000",
       "SELECT 1 on the LISTEN connection after this many ms of idle time"},
      {"MAILROOM_POLL_INTERVAL", Ms(d.poll_interval), "10", "3600000",
       "catch-up poll (ms): dequeue even without a notification"},
      {"MAILROOM_BUSY_POLL_INTERVAL", "2", "0", "1000",
       "poll interval (ms) while the collector is busy (commits stop notifying)"},
      {"MAILROOM_LEASE_MS", Ms(kDefaultLease), "100", "86400000",
       "how long (ms) a subscriber holds a job (renewable) before another member gets it"},
      {"MAILROOM_RECONNECT_MAX_BACKOFF", Ms(d.reconnect_max_backoff), "100", "3600000",
       "cap (ms) of the exponential backoff between database reconnects"},
      {"MAILROOM_STATEMENT_TIMEOUT", Ms(d.statement_timeout), "100", "3600000",
       "statement_timeout (ms) of the collector's connections"},
      {"MAILROOM_DIRECT_DATABASE_URL", "", "", "",
       "the same database reached directly, not through a pooler (migrations, LISTEN, retention)",
       kSecret},
      {"MAILROOM_MAX_IN_FLIGHT", "", "", "",
       "the sender's window: refused here (the collector's is MAILROOM_MAX_IN_FLIGHT_CAP)"},
      {"MAILROOM_MAX_IN_FLIGHT_CAP", absl::StrCat(kDefaultMaxInFlightCap), "1",
       absl::StrCat(kMaxInFlight), "cap on a subscriber's max_in_flight"},
      {"MAILROOM_MAX_STREAMS_PER_CREDENTIAL", absl::StrCat(kDefaultMaxStreamsPerCredential), "1",
       "100000", "Subscribe streams one credential may hold open at once"},
      {"MAILROOM_GROUPS", "", "", "", "comma-separated consumer groups created at start"},
      {"MAILROOM_CHANNEL", "", "", "", "NOTIFY channel; set only to override the database setting"},
      {"MAILROOM_SECRET_KEY", "", "", "", "required: HMAC-SHA256 signing key, 64 hex characters",
       kSecret},
      {"MAILROOM_LISTEN_ADDRESS", "127.0.0.1:50051", "", "",
       "gRPC listen address (0.0.0.0:50051 in a container)"},
      {"MAILROOM_TLS_CERT", "", "", "", "PEM server certificate (with MAILROOM_TLS_KEY)"},
      {"MAILROOM_TLS_KEY", "", "", "", "PEM server certificate and key"},
      {"MAILROOM_TLS_CLIENT_CA", "", "", "", "PEM CA: require and verify client certificates"},
      {"MAILROOM_ALLOW_PLAINTEXT", "false", "", "",
       "serve plaintext gRPC on a non-loopback MAILROOM_LISTEN_ADDRESS"},
      {"MAILROOM_HEALTH_ADDRESS", "off", "", "",
       "listen address of a plaintext grpc.health.v1 server, or off"},
      {"MAILROOM_SUBSCRIBER_TOKENS", "", "", "",
       "comma-separated bearer tokens with their scope, TOKEN@GROUPS:ROLE (see Credentials)",
       kSecret},
      {"MAILROOM_INSECURE_NO_AUTH", "false", "", "",
       "development only: without tokens, accept unauthenticated callers with full access"},
      {"MAILROOM_METRICS_ADDRESS", "127.0.0.1:9464", "", "",
       "Prometheus /metrics listen address, or off"},
      {"MAILROOM_AUTO_MIGRATE", "false", "", "", "apply pending migrations at start"},
      {"MAILROOM_DB_POOL_SIZE", absl::StrCat(kDefaultDbPoolSize), "2", "64",
       "connections for dequeue/ack/operator calls"},
      {"MAILROOM_MAX_COST_MICROS", absl::StrCat(kDefaultMaxCostMicros), "1", "100000000",
       "largest cost_micros one SENT outcome may report"},
      {"MAILROOM_MIN_PRICE_MICROS", absl::StrCat(kDefaultMinPriceMicros), "1", "1000000",
       "smallest price_micros an AcquireBudget may name (at most MAILROOM_MAX_COST_MICROS)"},
      {"MAILROOM_DEFAULT_GROUP_BUDGET", "unlimited", "0.01", "1e9",
       "money per calendar month of every group without a budget of its own, or unlimited"},
      {"MAILROOM_RECOVERY_RESERVE_PERCENT", absl::StrCat(budget.recovery_reserve_percent), "0",
       "90", "share of a group's monthly budget only password recoveries may use"},
      {"MAILROOM_BUDGET_GRANT_LEASE_MS", Ms(budget.grant_lease), "1000", "600000",
       "how long (ms) a sender may use a budget grant"},
      {"MAILROOM_RETENTION", Ms(r.retention), "0", absl::StrCat(3650LL * 86400000),
       "how long (ms) finished deliveries, spent tokens and old grants are kept; 0 keeps all"},
      {"MAILROOM_RETENTION_INTERVAL", Ms(r.interval), "100", "86400000",
       "time (ms) between two pruning passes"},
      {"MAILROOM_CONSOLE_ADDRESS", "off", "", "",
       "host:port of the operator's console (plain HTTP behind a TLS proxy), or off"},
      {"MAILROOM_FEEDBACK_ADDRESS", "off", "", "",
       "host:port of the SES feedback endpoint (plain HTTP behind a TLS proxy), or off"},
      {"MAILROOM_FEEDBACK_SNS_HOSTS", "", "", "",
       "tests only: extra hosts allowed to serve SNS signing certificates (comma-separated)"},
      {"MAILROOM_FEEDBACK_TOPIC_ARNS", "", "", "",
       "comma-separated SNS topic ARNs (arn:aws:sns:REGION:ACCOUNT:NAME) the endpoint acts on"},
      {"MAILROOM_FEEDBACK_WORKERS", absl::StrCat(FeedbackServerOptions::kDefaultWorkers), "1",
       "1024", "requests the feedback endpoint handles at once"},
      {"MAILROOM_FEEDBACK_REQUEST_TIMEOUT",
       absl::StrCat(FeedbackServerOptions::kDefaultRequestTimeoutMs), "600", "60000",
       "a feedback request not received whole within this many ms is dropped"},
      {"MAILROOM_FEEDBACK_CA_FILE", "", "", "",
       "PEM CAs that SNS signing certificates must chain to (also for their HTTPS fetches)"},
      {"MAILROOM_FEEDBACK_POSTMARK_CREDENTIALS", "", "", "",
       "user:password of Postmark's webhook URL (basic auth); turns on /feedback/postmark",
       kSecret},
      {"MAILROOM_FEEDBACK_POSTMARK_CREDENTIALS_FILE", "", "", "",
       "file holding MAILROOM_FEEDBACK_POSTMARK_CREDENTIALS"},
      {"MAILROOM_FEEDBACK_SENDGRID_PUBLIC_KEY", "", "", "",
       "SendGrid's Signed Event Webhook verification key; turns on /feedback/sendgrid"},
      {"MAILROOM_FEEDBACK_SENDGRID_PUBLIC_KEY_FILE", "", "", "",
       "file holding MAILROOM_FEEDBACK_SENDGRID_PUBLIC_KEY"},
      {"MAILROOM_FEEDBACK_MAILGUN_SIGNING_KEY", "", "", "",
       "Mailgun's webhook signing key; turns on /feedback/mailgun", kSecret},
      {"MAILROOM_FEEDBACK_MAILGUN_SIGNING_KEY_FILE", "", "", "",
       "file holding MAILROOM_FEEDBACK_MAILGUN_SIGNING_KEY"},
      {"MAILROOM_FEEDBACK_RESEND_SECRET", "", "", "",
       "Resend's webhook signing secret(s), whsec_...; turns on /feedback/resend", kSecret},
      {"MAILROOM_FEEDBACK_RESEND_SECRET_FILE", "", "", "",
       "file holding MAILROOM_FEEDBACK_RESEND_SECRET"},
      {"MAILROOM_FEEDBACK_HTTP_SECRET", "", "", "",
       "secret(s) your delivery reports are signed with, whsec_...; turns on /feedback/http",
       kSecret},
      {"MAILROOM_FEEDBACK_HTTP_SECRET_FILE", "", "", "",
       "file holding MAILROOM_FEEDBACK_HTTP_SECRET"},
      {"MAILROOM_FEEDBACK_HTTP_GROUP_SECRETS", "", "", "",
       "GROUP:whsec_... entries (comma-separated): a report signed with one names only GROUP's "
       "deliveries; turns on /feedback/http",
       kSecret},
      {"MAILROOM_FEEDBACK_HTTP_GROUP_SECRETS_FILE", "", "", "",
       "file holding MAILROOM_FEEDBACK_HTTP_GROUP_SECRETS"},
      {"MAILROOM_FEEDBACK_SANDBOX_SECRET", "", "", "",
       "secret(s) the sender's sandbox transport signs its events with, whsec_...; turns on "
       "/feedback/sandbox",
       kSecret},
      {"MAILROOM_FEEDBACK_SANDBOX_SECRET_FILE", "", "", "",
       "file holding MAILROOM_FEEDBACK_SANDBOX_SECRET"},
      {"MAILROOM_FEEDBACK_SUPPRESS_UNMATCHED", "", "", "",
       "providers (ses, postmark, sendgrid, mailgun, resend, http; comma-separated) whose events "
       "for no known delivery still suppress their recipients"},
      {"MAILROOM_FEEDBACK_MAX_AGE", Ms(kDefaultFeedbackMaxAge), "60000", "86400000",
       "feedback (SNS or a provider's) older than this (ms) is refused"},
      {"MAILROOM_SOFT_BOUNCE_LIMIT", "3", "1", "1000",
       "transient bounces of one address within 7 days that suppress it"},
      {"MAILROOM_REPUTATION_WINDOW", absl::StrCat(7LL * 24 * 3600000), "3600000",
       absl::StrCat(90LL * 24 * 3600000),
       "rolling window (ms) of the reputation gauges and the guard"},
      {"MAILROOM_REPUTATION_REFRESH", "30000", "100", "3600000",
       "how often (ms) the reputation gauges and the guard are recomputed"},
      {"MAILROOM_GUARD_MAX_BOUNCE_RATE", "0", "0", "1",
       "pause a group's sending when its bounce rate reaches this fraction (e.g. 0.02)"},
      {"MAILROOM_GUARD_MAX_COMPLAINT_RATE", "0", "0", "1",
       "pause a group's sending when its complaint rate reaches this fraction (e.g. 0.0005)"},
      {"MAILROOM_GUARD_MIN_SENT", absl::StrCat(guard.min_sent), "1", "1000000000",
       "the guard decides only for a group with at least this many emails sent in the window"},
      {"MAILROOM_LOG_LEVEL", "info", "", "", "debug, info, warn or error"},

  };
  return *kTable;
}

const SettingSpec& CollectorSetting(const char* name) {
  return FindSetting(CollectorSettings(), name);
}

}  // namespace mailroom
