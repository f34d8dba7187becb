#include "sender/config/settings.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace mailroom {
namespace {

constexpr bool kSecret = true;

// The primary transport's settings (the kind and each transport's own). The secondary's are
// the same rows under MAILROOM_FAILOVER_ (FailoverName), added to the table by SenderSettings.
SettingsTable TransportSettings() {
  return {
      {"MAILROOM_TRANSPORT", "file", "", "",
       "file, smtp, ses, http (a signed webhook to your own URL), postmark, sendgrid, mailgun, "
       "resend or sandbox (a provider simulator that sends nothing)"},
      {"MAILROOM_FILE_DIR", "./outbox", "", "", "file: directory the .eml files are written to"},
      {"MAILROOM_SMTP_URL", "", "", "",
       "smtp: smtp://host:587 (STARTTLS required) or smtps://host:465"},
      {"MAILROOM_SMTP_USERNAME", "", "", "", "smtp: AUTH user name (with the password or OAuth2)"},
      {"MAILROOM_SMTP_PASSWORD", "", "", "", "smtp: AUTH password", kSecret},
      {"MAILROOM_SMTP_OAUTH2_TOKEN_URL", "", "", "",
       "smtp: AUTH XOAUTH2 with tokens from this client-credentials endpoint"},
      {"MAILROOM_SMTP_OAUTH2_CLIENT_ID", "", "", "", "smtp: the application's id at the endpoint"},
      {"MAILROOM_SMTP_OAUTH2_CLIENT_SECRET", "", "", "",
       "smtp: the application's client secret at the endpoint", kSecret},
      {"MAILROOM_SMTP_OAUTH2_SCOPE", "https://outlook.office365.com/.default", "", "",
       "smtp: the scope asked for with MAILROOM_SMTP_OAUTH2_TOKEN_URL"},
      {"MAILROOM_SMTP_OAUTH2_TOKEN_FILE", "", "", "",
       "smtp: AUTH XOAUTH2 with the token in this file (re-read for each connection)"},
      {"MAILROOM_SMTP_ALLOW_PLAIN", "false", "", "", "smtp: allow a server without STARTTLS"},
      {"MAILROOM_SMTP_CA_FILE", "", "", "", "smtp: PEM CA for the server certificate"},
      {"MAILROOM_SMTP_INSECURE_SKIP_VERIFY", "false", "", "",
       "smtp: do not verify the server certificate (tests only)"},
      {"MAILROOM_SES_REGION", "us-east-1", "", "",
       "ses: region (default: AWS_REGION, else us-east-1)"},
      {"MAILROOM_SES_ENDPOINT", "", "", "", "ses: endpoint override (emulators, VPC endpoints)"},
      {"MAILROOM_SES_CONFIGURATION_SET", "", "", "", "ses: configuration set name"},
      {"AWS_ACCESS_KEY_ID", "", "", "", "ses: access key id (required)"},
      {"AWS_SECRET_ACCESS_KEY", "", "", "", "ses: secret access key (required)", kSecret},
      {"AWS_SESSION_TOKEN", "", "", "", "ses: session token", kSecret},
      {"MAILROOM_HTTP_URL", "", "", "", "http: the URL each email is POSTed to, https://..."},
      {"MAILROOM_HTTP_SECRET", "", "", "", "http: the signing secret, whsec_...", kSecret},
      {"MAILROOM_HTTP_AUTHORIZATION", "", "", "",
       "http: an Authorization header value sent with every request", kSecret},
      {"MAILROOM_HTTP_ALLOW_PLAIN", "false", "", "",
       "http: allow an http:// URL to a network address"},
      {"MAILROOM_HTTP_CA_FILE", "", "", "", "http: PEM CA that signed the receiver's certificate"},
      {"MAILROOM_POSTMARK_SERVER_TOKEN", "", "", "", "postmark: the server's API token (required)",
       kSecret},
      {"MAILROOM_POSTMARK_MESSAGE_STREAM", "outbound", "", "",
       "postmark: the transactional message stream's id"},
      {"MAILROOM_POSTMARK_API_URL", "", "", "", "postmark: API base URL (default: Postmark's)"},
      {"MAILROOM_SENDGRID_API_KEY", "", "", "", "sendgrid: an API key with mail.send (required)",
       kSecret},
      {"MAILROOM_SENDGRID_API_URL", "", "", "", "sendgrid: API base URL (default: SendGrid's)"},
      {"MAILROOM_MAILGUN_API_KEY", "", "", "", "mailgun: an API or domain sending key (required)",
       kSecret},
      {"MAILROOM_MAILGUN_DOMAIN", "", "", "", "mailgun: the sending domain (required)"},
      {"MAILROOM_MAILGUN_API_URL", "", "", "", "mailgun: API base URL (default: Mailgun's US one)"},
      {"MAILROOM_RESEND_API_KEY", "", "", "", "resend: an API key with sending access (required)",
       kSecret},
      {"MAILROOM_RESEND_API_URL", "", "", "", "resend: API base URL (default: Resend's)"},
      {"MAILROOM_SANDBOX_DOMAIN", "sandbox.mailroom.test", "", "",
       "sandbox: the simulator's domain (bounce@, softbounce@, complaint@, ... at it)"},
      {"MAILROOM_SANDBOX_DIR", "", "", "",
       "sandbox: also write each accepted message to this directory (unset: none)"},
      {"MAILROOM_SANDBOX_FEEDBACK_URL", "", "", "",
       "sandbox: the collector's /feedback/sandbox URL its events are posted to (unset: none)"},
      {"MAILROOM_SANDBOX_FEEDBACK_SECRET", "", "", "",
       "sandbox: the collector's MAILROOM_FEEDBACK_SANDBOX_SECRET, whsec_...", kSecret},
      {"MAILROOM_SANDBOX_EVENT_DELAY_MS", "1000", "0", "600000",
       "sandbox: wait (ms) after a send before posting its first event"},
  };
}

}  // namespace

std::string FailoverName(const std::string& name) {
  return absl::StrCat("MAILROOM_FAILOVER_", absl::StripPrefix(name, "MAILROOM_"));
}

const SettingsTable& SenderSettings() {
  // name, default, min, max (durations in ms), help[, kSecret]: see docs/configuration.md.
  static const SettingsTable* const kTable = [] {
    auto* t = new SettingsTable{
        {"MAILROOM_COLLECTOR_ADDRESS", "127.0.0.1:50051", "", "",
         "collector host:port (a DNS name with several addresses is fine)"},
        {"MAILROOM_COLLECTOR_TOKEN", "", "", "", "bearer token presented to the collector",
         kSecret},
        {"MAILROOM_COLLECTOR_TLS", "false", "", "",
         "connect with TLS (the certificate must name the host of MAILROOM_COLLECTOR_ADDRESS)"},
        {"MAILROOM_COLLECTOR_CA", "", "", "", "PEM CA that signed the collector's certificate"},
        {"MAILROOM_COLLECTOR_CLIENT_CERT", "", "", "", "client certificate and key for mutual TLS"},
        {"MAILROOM_COLLECTOR_CLIENT_KEY", "", "", "", "client certificate and key for mutual TLS"},
        {"MAILROOM_ALLOW_PLAINTEXT", "false", "", "",
         "connect without TLS to a MAILROOM_COLLECTOR_ADDRESS that is not loopback"},
        {"MAILROOM_CONSUMER_GROUP", "mailroom", "", "",
         "consumer group; every group receives every job once"},
        {"MAILROOM_MAX_IN_FLIGHT", "100", "1", "100000", "jobs held at once"},
        {"MAILROOM_ACK_DELAY_MS", "5", "0", "1000",
         "once an outcome is ready, wait up to this long (ms) to share an Acknowledge"},
        {"MAILROOM_FROM", "mailroom <no-reply@mailroom.localhost>", "", "",
         "From: address, addr or Name <addr>"},
        {"MAILROOM_LINK_BASE_URL", "http://localhost:8080", "", "",
         "links are BASE/activate?token=..., BASE/recover?token=..., BASE/action/NAME?token=..."},
        {"MAILROOM_TEMPLATE_DIR", "", "", "",
         "directory of the templates (default: the built-in ones)"},
        {"MAILROOM_PRODUCT_NAME", "mailroom", "", "", "{{product_name}} in the templates"},
        {"MAILROOM_CONNECTIONS", "4", "1", "256",
         "parallel SMTP connections / SES requests, kept open between messages"},
        {"MAILROOM_SEND_TIMEOUT_MS", "30000", "100", "600000",
         "timeout (ms) of one delivery attempt"},
        {"MAILROOM_PRICE_PER_1000", "0.10", absl::StrCat(kMinPricePer1000),
         absl::StrCat(kMaxPricePer1000), "price of 1000 emails (SES: 0.10)"},
        {"MAILROOM_FAILOVER_TRANSPORT", "off", "", "",
         "a secondary transport (any of MAILROOM_TRANSPORT's) while the primary's breaker is open"},
        {"MAILROOM_FAILOVER_PRICE_PER_1000", "", absl::StrCat(kMinPricePer1000),
         absl::StrCat(kMaxPricePer1000),
         "required with a secondary: price of 1000 emails it sends"},
        {"MAILROOM_FAILOVER_CLASSES", "recovery", "", "",
         "which emails the secondary sends: recovery (password recoveries only) or all"},
        {"MAILROOM_BUDGET", "unlimited", "0", "1e12",
         "optional cap of this sender alone, money per calendar month, or unlimited"},
        {"MAILROOM_BURST", "10", "1", "100000",
         "emails that may go at once above the per-sender cap's pace"},
        {"MAILROOM_PROVIDER_RATE_LIMIT", "", "0.001", "1e6",
         "provider cap in emails/s (unset: none)"},
        {"MAILROOM_RETRY_MAX_ATTEMPTS", "8", "1", "100",
         "delivery attempts before a retryable error becomes a failure"},
        {"MAILROOM_RETRY_BASE_MS", "1000", "1", "3600000",
         "first retry delay (ms); exponential backoff with equal jitter"},
        {"MAILROOM_RETRY_MAX_MS", "300000", "1", "86400000", "longest retry delay (ms)"},
        {"MAILROOM_EXPIRY_MARGIN_MS", "30000", "0", "3600000",
         "a token expiring sooner than this (ms) is acknowledged expired, never sent"},
        {"MAILROOM_SES_ACCOUNT_INTERVAL_MS", "300000", "1000", "86400000",
         "ses: how often (ms) the account's limits are read with GetAccount"},
        {"MAILROOM_BREAKER_MAX_BACKOFF", "60000", "1000", "3600000",
         "longest wait (ms) between probes while the provider is unavailable"},
        {"MAILROOM_METRICS_ADDRESS", "127.0.0.1:9465", "", "",
         "Prometheus /metrics listen address, or off"},
        {"MAILROOM_HEALTH_ADDRESS", "127.0.0.1:50052", "", "",
         "grpc.health.v1 listen address, or off"},
        {"MAILROOM_LOG_LEVEL", "info", "", "", "debug, info, warn or error"},
        {"MAILROOM_SENDER_NAME", "", "", "",
         "name shown in the collector's logs and owner column (default: the host name)"},

    };
    t->push_back(
        {"AWS_REGION", "us-east-1", "", "", "ses: region if MAILROOM_SES_REGION is unset"});
    for (const SettingSpec& s : TransportSettings()) t->push_back(s);
    for (SettingSpec s : TransportSettings()) {
      if (s.name == "MAILROOM_TRANSPORT") continue;  // MAILROOM_FAILOVER_TRANSPORT: above
      // AWS_REGION is the primary's fallback only: a secondary in another region says so.
      if (s.name == "MAILROOM_SES_REGION") s.help = "ses: region";
      s.help = absl::StrCat("secondary ", s.help);
      s.name = FailoverName(s.name);
      t->push_back(std::move(s));
    }
    return t;
  }();
  return *kTable;
}

const SettingSpec& SenderSetting(const std::string& name) {
  return FindSetting(SenderSettings(), name);
}

}  // namespace mailroom
