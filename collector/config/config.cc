#include "collector/config/config.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <regex>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "collector/api/service.h"  // kMaxInFlight
#include "collector/config/settings.h"
#include "collector/db/conninfo.h"
#include "common/log.h"
#include "common/names.h"

namespace mailroom {
namespace {

bool ValidChannel(const std::string& c) {
  if (c.empty() || c.size() > 63) return false;
  if (!((c[0] >= 'a' && c[0] <= 'z') || c[0] == '_')) return false;
  for (char ch : c) {
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_')) return false;
  }
  return true;
}

// A secret from `name`, or from the file `name`_FILE (a mounted Secret; its trailing newline
// dropped); "" when neither is set. Never echoed: errors name the variable only.
absl::StatusOr<std::string> SecretSetting(const Env& env, const std::string& name) {
  const std::string file_var = name + "_FILE";
  std::optional<std::string> value = env.Get(name.c_str());
  std::string path;
  MAILROOM_ASSIGN_OR_RETURN(path, env.File(file_var.c_str()));
  if (value.has_value() && !path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": set either it or ", file_var, ", not both"));
  }
  if (path.empty()) return value.value_or("");
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (!in.good() && !in.eof()) return absl::InvalidArgumentError(file_var + ": cannot read");
  if (text.empty()) return absl::InvalidArgumentError(file_var + ": the file is empty");
  return text;
}

// MAILROOM_FEEDBACK_HTTP_GROUP_SECRETS: GROUP:whsec_... entries, a group given again for
// another of its secrets (a rotation).
absl::Status LoadGroupSecrets(const Env& env, ProviderFeedbackOptions* p) {
  std::string group_secrets;
  MAILROOM_ASSIGN_OR_RETURN(group_secrets,
                            SecretSetting(env, "MAILROOM_FEEDBACK_HTTP_GROUP_SECRETS"));
  for (absl::string_view entry : absl::StrSplit(group_secrets, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    const size_t colon = entry.find(':');
    const std::string group(colon == absl::string_view::npos ? "" : entry.substr(0, colon));
    const size_t position = p->http_group_keys.size() + 1;
    if (!ValidGroupName(group)) {
      // The entry's position only: its text may be a secret with the colon left out.
      return absl::InvalidArgumentError(absl::StrCat(
          "MAILROOM_FEEDBACK_HTTP_GROUP_SECRETS: entry ", position,
          " must be GROUP:whsec_... with a consumer group name (", kGroupNamePattern, ")"));
    }
    auto keys = ParseWebhookSecrets(entry.substr(colon + 1));
    if (!keys.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("MAILROOM_FEEDBACK_HTTP_GROUP_SECRETS: entry ",
                                                     position, " (group ", group,
                                                     "): ", keys.status().message()));
    }
    p->http_group_keys.push_back({group, *std::move(keys)});
  }
  return absl::OkStatus();
}

// MAILROOM_FEEDBACK_SUPPRESS_UNMATCHED.
absl::Status LoadSuppressUnmatched(const Env& env, ProviderFeedbackOptions* p) {
  // The providers whose events for no known delivery still suppress (an opt-in: by default an
  // event suppresses only the recipient of the delivery it names).
  p->suppress_unmatched = env.List("MAILROOM_FEEDBACK_SUPPRESS_UNMATCHED");
  for (const std::string& name : p->suppress_unmatched) {
    const bool known = name == "ses" ||
                       std::find(std::begin(kFeedbackProviders), std::end(kFeedbackProviders),
                                 absl::string_view(name)) != std::end(kFeedbackProviders);
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MAILROOM_FEEDBACK_SUPPRESS_UNMATCHED: \"", absl::CEscape(name),
          "\" is not a feedback provider (ses, postmark, sendgrid, mailgun, resend, http)"));
    }
    // The sandbox posts an event again under a new id while it matches no delivery yet: with
    // the opt-in each of those posts would suppress.
    if (name == "sandbox") {
      return absl::InvalidArgumentError(
          "MAILROOM_FEEDBACK_SUPPRESS_UNMATCHED: sandbox cannot be named (its events are posted "
          "again until they match a delivery)");
    }
  }
  return absl::OkStatus();
}

// The providers' feedback paths: each on when its secret is set.
absl::Status LoadProviderFeedback(const Env& env, ProviderFeedbackOptions* p) {
  MAILROOM_ASSIGN_OR_RETURN(p->postmark_credentials,
                            SecretSetting(env, "MAILROOM_FEEDBACK_POSTMARK_CREDENTIALS"));
  const std::string& pm = p->postmark_credentials;
  const size_t colon = pm.find(':');
  if (!pm.empty() && (colon == 0 || colon == std::string::npos || pm.size() - colon - 1 < 16 ||
                      std::any_of(pm.begin(), pm.end(), [](char ch) {
                        return static_cast<unsigned char>(ch) < 0x21 || ch == 0x7f;
                      }))) {
    return absl::InvalidArgumentError(
        "MAILROOM_FEEDBACK_POSTMARK_CREDENTIALS: must be user:password, a password of at least "
        "16 characters, no spaces or control characters (the basic auth of Postmark's webhook "
        "URL)");
  }
  std::string sendgrid;
  MAILROOM_ASSIGN_OR_RETURN(sendgrid, SecretSetting(env, "MAILROOM_FEEDBACK_SENDGRID_PUBLIC_KEY"));
  if (!sendgrid.empty()) {
    auto key = ParseSendgridKey(sendgrid);
    if (!key.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("MAILROOM_FEEDBACK_SENDGRID_PUBLIC_KEY: ", key.status().message()));
    }
    p->sendgrid_key = *key;
  }
  MAILROOM_ASSIGN_OR_RETURN(p->mailgun_signing_key,
                            SecretSetting(env, "MAILROOM_FEEDBACK_MAILGUN_SIGNING_KEY"));
  for (auto [name, keys] : {std::pair{"MAILROOM_FEEDBACK_RESEND_SECRET", &p->resend_keys},
                            std::pair{"MAILROOM_FEEDBACK_HTTP_SECRET", &p->http_keys},
                            std::pair{"MAILROOM_FEEDBACK_SANDBOX_SECRET", &p->sandbox_keys}}) {
    std::string secrets;
    MAILROOM_ASSIGN_OR_RETURN(secrets, SecretSetting(env, name));
    if (secrets.empty()) continue;
    auto parsed = ParseWebhookSecrets(secrets);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", parsed.status().message()));
    }
    *keys = *std::move(parsed);
  }
  if (absl::Status st = LoadGroupSecrets(env, p); !st.ok()) return st;
  return LoadSuppressUnmatched(env, p);
}

// The feedback endpoint, reputation window and guard (see FeedbackSettings).
absl::StatusOr<FeedbackSettings> LoadFeedbackSettings(const Env& env) {
  FeedbackSettings f;
  f.address = env.String(CollectorSetting("MAILROOM_FEEDBACK_ADDRESS"));
  if (f.address == "off") {
    f.address.clear();
  } else {
    MAILROOM_ASSIGN_OR_RETURN(f.address,
                              env.HostPort(CollectorSetting("MAILROOM_FEEDBACK_ADDRESS")));
  }
  f.sns.extra_hosts = env.List("MAILROOM_FEEDBACK_SNS_HOSTS");
  for (const std::string& h : f.sns.extra_hosts) {
    if (h.find_first_of("/@?# ") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("MAILROOM_FEEDBACK_SNS_HOSTS: \"", absl::CEscape(h),
                       "\" is not a host or host:port (comma-separated; for tests only)"));
    }
  }
  f.sns.topic_arns = env.List("MAILROOM_FEEDBACK_TOPIC_ARNS");
  static const std::regex kTopicArn(
      R"(^arn:aws(-[a-z]+)*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_.-]{1,256}$)");
  for (const std::string& t : f.sns.topic_arns) {
    if (!std::regex_match(t, kTopicArn)) {
      return absl::InvalidArgumentError(
          absl::StrCat("MAILROOM_FEEDBACK_TOPIC_ARNS: \"", absl::CEscape(t),
                       "\" is not an SNS topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)"));
    }
  }
  absl::Status providers = LoadProviderFeedback(env, &f.providers);
  if (!providers.ok()) return providers;
  // Anyone can create a topic and publish correctly signed messages: the SNS path acts only on
  // the operator's own topics, so it is off without them; the endpoint does not start with no
  // path on at all.
  if (!f.address.empty() && f.sns.topic_arns.empty() && f.providers.Enabled().empty()) {
    return absl::InvalidArgumentError(
        "MAILROOM_FEEDBACK_TOPIC_ARNS: required when MAILROOM_FEEDBACK_ADDRESS is set and no "
        "provider path is (the SNS topics whose messages the feedback endpoint acts on; or set "
        "MAILROOM_FEEDBACK_POSTMARK_CREDENTIALS, _SENDGRID_PUBLIC_KEY, _MAILGUN_SIGNING_KEY, "
        "_RESEND_SECRET, _HTTP_SECRET, _HTTP_GROUP_SECRETS or _SANDBOX_SECRET)");
  }
  int64_t workers;
  MAILROOM_ASSIGN_OR_RETURN(workers, env.Int(CollectorSetting("MAILROOM_FEEDBACK_WORKERS")));
  f.server.workers = static_cast<int>(workers);
  MAILROOM_ASSIGN_OR_RETURN(f.server.request_timeout,
                            env.Millis(CollectorSetting("MAILROOM_FEEDBACK_REQUEST_TIMEOUT")));
  MAILROOM_ASSIGN_OR_RETURN(f.sns.ca_file, env.File("MAILROOM_FEEDBACK_CA_FILE"));
  MAILROOM_ASSIGN_OR_RETURN(f.sns.max_age,
                            env.Millis(CollectorSetting("MAILROOM_FEEDBACK_MAX_AGE")));
  f.providers.max_age = f.sns.max_age;
  int64_t soft;
  MAILROOM_ASSIGN_OR_RETURN(soft, env.Int(CollectorSetting("MAILROOM_SOFT_BOUNCE_LIMIT")));
  f.soft_bounce_limit = static_cast<int>(soft);
  MAILROOM_ASSIGN_OR_RETURN(f.reputation_window,
                            env.Millis(CollectorSetting("MAILROOM_REPUTATION_WINDOW")));
  MAILROOM_ASSIGN_OR_RETURN(f.reputation_refresh,
                            env.Millis(CollectorSetting("MAILROOM_REPUTATION_REFRESH")));
  MAILROOM_ASSIGN_OR_RETURN(f.guard.max_bounce_rate,
                            env.Double(CollectorSetting("MAILROOM_GUARD_MAX_BOUNCE_RATE")));
  MAILROOM_ASSIGN_OR_RETURN(f.guard.max_complaint_rate,
                            env.Double(CollectorSetting("MAILROOM_GUARD_MAX_COMPLAINT_RATE")));
  int64_t min_sent;
  MAILROOM_ASSIGN_OR_RETURN(min_sent, env.Int(CollectorSetting("MAILROOM_GUARD_MIN_SENT")));
  f.guard.min_sent = static_cast<uint64_t>(min_sent);
  return f;
}

// The database: the URLs (and their connection defaults) and the dispatcher's wake-ups, batches
// and timeouts.
absl::Status LoadDatabaseAndDispatch(const Env& env, CollectorConfig* c) {
  MAILROOM_ASSIGN_OR_RETURN(c->database_url, env.Required("MAILROOM_DATABASE_URL"));
  if (!ValidConninfo(c->database_url)) {
    // libpq's own message quotes the string, which may hold a password: not repeated here.
    return absl::InvalidArgumentError(
        "MAILROOM_DATABASE_URL: not a PostgreSQL connection URL or key=value string "
        "(postgresql://user:password@host:5432/database)");
  }
  int64_t limit;
  MAILROOM_ASSIGN_OR_RETURN(limit, env.Int(CollectorSetting("MAILROOM_BATCH_LIMIT")));
  c->dispatch.batch_limit = static_cast<int>(limit);
  MAILROOM_ASSIGN_OR_RETURN(limit, env.Int(CollectorSetting("MAILROOM_DEQUEUE_LIMIT")));
  c->dispatch.dequeue_limit = static_cast<int>(limit);
  MAILROOM_ASSIGN_OR_RETURN(c->dispatch.batch_timeout,
                            env.Millis(CollectorSetting("MAILROOM_BATCH_TIMEOUT")));
  MAILROOM_ASSIGN_OR_RETURN(c->dispatch.healthcheck_interval,
                            env.Millis(CollectorSetting("MAILROOM_HEALTHCHECK_INTERVAL")));
  MAILROOM_ASSIGN_OR_RETURN(c->dispatch.poll_interval,
                            env.Millis(CollectorSetting("MAILROOM_POLL_INTERVAL")));
  MAILROOM_ASSIGN_OR_RETURN(c->dispatch.busy_poll_interval,
                            env.Millis(CollectorSetting("MAILROOM_BUSY_POLL_INTERVAL")));
  MAILROOM_ASSIGN_OR_RETURN(c->dispatch.lease, env.Millis(CollectorSetting("MAILROOM_LEASE_MS")));
  MAILROOM_ASSIGN_OR_RETURN(c->dispatch.reconnect_max_backoff,
                            env.Millis(CollectorSetting("MAILROOM_RECONNECT_MAX_BACKOFF")));
  MAILROOM_ASSIGN_OR_RETURN(c->dispatch.statement_timeout,
                            env.Millis(CollectorSetting("MAILROOM_STATEMENT_TIMEOUT")));
  c->direct_database_url = env.String(CollectorSetting("MAILROOM_DIRECT_DATABASE_URL"));
  if (c->direct_database_url.empty()) c->direct_database_url = c->database_url;
  if (!ValidConninfo(c->direct_database_url)) {
    return absl::InvalidArgumentError(
        "MAILROOM_DIRECT_DATABASE_URL: not a PostgreSQL connection URL or key=value string "
        "(postgresql://user:password@host:5432/database)");
  }
  c->tx_timeouts = {c->dispatch.statement_timeout, IdleInTransactionTimeout(c->dispatch.lease)};
  // Query connections (possibly through a transaction-pooling pgbouncer) carry no session
  // settings: their timeouts are set per transaction (collector/db/pg_tx.h). The sessions that
  // need a server session of their own go direct and keep them as session settings.
  c->dispatch.database_url = WithKeepaliveDefaults(c->database_url);
  c->dispatch.listen_database_url = WithConnectionDefaults(c->direct_database_url,
                                                           c->tx_timeouts.statement_timeout,
                                                           c->tx_timeouts.idle_in_transaction);
  return absl::OkStatus();
}

// The subscribers' limits, the consumer groups and the channel.
absl::Status LoadStreamLimits(const Env& env, CollectorConfig* c) {
  // The sender's window under its own name would otherwise be ignored here without a word.
  if (env.Get("MAILROOM_MAX_IN_FLIGHT").has_value()) {
    return absl::InvalidArgumentError(
        "MAILROOM_MAX_IN_FLIGHT: not a collector setting: MAILROOM_MAX_IN_FLIGHT is the sender's "
        "window; the collector's cap is MAILROOM_MAX_IN_FLIGHT_CAP");
  }
  int64_t max_in_flight_cap;
  MAILROOM_ASSIGN_OR_RETURN(max_in_flight_cap,
                            env.Int(CollectorSetting("MAILROOM_MAX_IN_FLIGHT_CAP")));
  c->max_in_flight_cap = static_cast<int>(max_in_flight_cap);
  int64_t streams;
  MAILROOM_ASSIGN_OR_RETURN(streams,
                            env.Int(CollectorSetting("MAILROOM_MAX_STREAMS_PER_CREDENTIAL")));
  c->max_streams_per_credential = static_cast<int>(streams);
  if (env.Get("MAILROOM_GROUPS").has_value()) {
    c->dispatch.groups = env.List("MAILROOM_GROUPS");
    if (c->dispatch.groups.empty()) {
      return absl::InvalidArgumentError(
          "MAILROOM_GROUPS: no group named (comma-separated consumer group names)");
    }
    for (const std::string& g : c->dispatch.groups) {
      if (!ValidGroupName(g)) {
        return absl::InvalidArgumentError(
            absl::StrCat("MAILROOM_GROUPS: \"", absl::CEscape(g),
                         "\" is not a consumer group name (^[a-z][a-z0-9_-]{0,62}$)"));
      }
    }
  }

  c->channel = env.String(CollectorSetting("MAILROOM_CHANNEL"));
  if (!c->channel.empty() && !ValidChannel(c->channel)) {
    return absl::InvalidArgumentError(
        "MAILROOM_CHANNEL: must match ^[a-z_][a-z0-9_]{0,62}$ (a plain PostgreSQL identifier)");
  }
  return absl::OkStatus();
}

// The signing key, the gRPC listener's TLS and the subscribers' credentials.
absl::Status LoadCredentialsAndTls(const Env& env, CollectorConfig* c) {
  auto key = env.Get("MAILROOM_SECRET_KEY");
  if (!key.has_value()) {
    return absl::InvalidArgumentError(
        "MAILROOM_SECRET_KEY: required but not set (64 hex characters: `openssl rand -hex 32`)");
  }
  auto parsed = ParseSigningKey(*key);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("MAILROOM_SECRET_KEY: ", parsed.status().message()));
  }
  c->key = *std::move(parsed);

  MAILROOM_ASSIGN_OR_RETURN(c->listen_address,
                            env.HostPort(CollectorSetting("MAILROOM_LISTEN_ADDRESS")));
  MAILROOM_ASSIGN_OR_RETURN(c->tls_cert_file, env.File("MAILROOM_TLS_CERT"));
  MAILROOM_ASSIGN_OR_RETURN(c->tls_key_file, env.File("MAILROOM_TLS_KEY"));
  MAILROOM_ASSIGN_OR_RETURN(c->tls_client_ca_file, env.File("MAILROOM_TLS_CLIENT_CA"));
  if (c->tls_cert_file.empty() != c->tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        c->tls_cert_file.empty() ? "MAILROOM_TLS_CERT: required when MAILROOM_TLS_KEY is set"
                                 : "MAILROOM_TLS_KEY: required when MAILROOM_TLS_CERT is set");
  }
  if (!c->tls_client_ca_file.empty() && c->tls_cert_file.empty()) {
    return absl::InvalidArgumentError(
        "MAILROOM_TLS_CLIENT_CA: mutual TLS needs MAILROOM_TLS_CERT and MAILROOM_TLS_KEY too");
  }
  MAILROOM_ASSIGN_OR_RETURN(c->allow_plaintext,
                            env.Bool(CollectorSetting("MAILROOM_ALLOW_PLAINTEXT")));
  if (c->tls_cert_file.empty() && !c->allow_plaintext && !IsLoopbackAddress(c->listen_address)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MAILROOM_LISTEN_ADDRESS: \"", absl::CEscape(c->listen_address),
        "\" is reachable from the network and gRPC would be plaintext (signed tokens and bearer "
        "tokens in clear); set MAILROOM_TLS_CERT and MAILROOM_TLS_KEY, listen on a loopback "
        "address, or set MAILROOM_ALLOW_PLAINTEXT=true"));
  }
  c->health_address = env.String(CollectorSetting("MAILROOM_HEALTH_ADDRESS"));
  if (c->health_address == "off") {
    c->health_address.clear();
  } else {
    MAILROOM_ASSIGN_OR_RETURN(c->health_address,
                              env.HostPort(CollectorSetting("MAILROOM_HEALTH_ADDRESS")));
  }
  MAILROOM_ASSIGN_OR_RETURN(c->credentials, ParseCredentials(env.List("MAILROOM_SUBSCRIBER_TOKENS"),
                                                             "MAILROOM_SUBSCRIBER_TOKENS"));
  // Refused here rather than at each Subscribe: an observer that shares a group with the
  // senders is a configuration mistake, and one that is found only when it subscribes
  // looks like a broken observer.
  if (absl::Status apart = CheckObserversApart(c->credentials, "MAILROOM_SUBSCRIBER_TOKENS");
      !apart.ok()) {
    return apart;
  }
  MAILROOM_ASSIGN_OR_RETURN(c->insecure_no_auth,
                            env.Bool(CollectorSetting("MAILROOM_INSECURE_NO_AUTH")));
  if (c->credentials.empty() && c->tls_client_ca_file.empty() && !c->insecure_no_auth) {
    return absl::InvalidArgumentError(
        "MAILROOM_SUBSCRIBER_TOKENS: subscribers must authenticate; set bearer tokens (comma-"
        "separated TOKEN@GROUPS:ROLE entries), or MAILROOM_TLS_CLIENT_CA for mutual TLS, or "
        "MAILROOM_INSECURE_NO_AUTH=true "
        "for local development only");
  }
  return absl::OkStatus();
}

// The price limits and the groups' default budget and reserve.
absl::Status LoadBudgetSettings(const Env& env, CollectorConfig* c) {
  // 0 would refuse every AcquireBudget (all jobs wait until they expire); beyond 100 money
  // units per email one sender's report could take a group's month at once.
  MAILROOM_ASSIGN_OR_RETURN(c->max_cost_micros,
                            env.Int(CollectorSetting("MAILROOM_MAX_COST_MICROS")));
  // The collector owns the budget: a sender naming a price below this floor could draw many
  // times the group's money in emails. 1 (the old floor) must be chosen explicitly.
  MAILROOM_ASSIGN_OR_RETURN(c->min_price_micros,
                            env.Int("MAILROOM_MIN_PRICE_MICROS", kDefaultMinPriceMicros, 1,
                                    c->max_cost_micros));
  const std::string budget = absl::AsciiStrToLower(
      env.String(CollectorSetting("MAILROOM_DEFAULT_GROUP_BUDGET")));
  if (budget != "unlimited") {
    // A default of 0 silently stops every group without a budget of its own (one group is
    // stopped with SetGroupBudget); a billion a month is a typo.
    double money;
    MAILROOM_ASSIGN_OR_RETURN(money, env.Double(CollectorSetting("MAILROOM_DEFAULT_GROUP_BUDGET")));
    c->budget.monthly_budget_micros = static_cast<int64_t>(std::floor(money * 1e6));
  }
  // 100 would keep every activation of every group without a reserve of its own unsent.
  int64_t reserve;
  MAILROOM_ASSIGN_OR_RETURN(reserve,
                            env.Int(CollectorSetting("MAILROOM_RECOVERY_RESERVE_PERCENT")));
  c->budget.recovery_reserve_percent = static_cast<int>(reserve);
  MAILROOM_ASSIGN_OR_RETURN(c->budget.grant_lease,
                            env.Millis(CollectorSetting("MAILROOM_BUDGET_GRANT_LEASE_MS")));
  return absl::OkStatus();
}

}  // namespace

std::string FeedbackPaths(const FeedbackSettings& f) {
  std::vector<std::string> on = f.providers.Enabled();
  if (!f.sns.topic_arns.empty()) on.insert(on.begin(), "sns");
  return on.empty() ? "none" : absl::StrJoin(on, ",");
}

absl::StatusOr<CollectorConfig> LoadCollectorConfig(const Env& env) {
  CollectorConfig c;
  absl::Status st = LoadDatabaseAndDispatch(env, &c);
  if (st.ok()) st = LoadStreamLimits(env, &c);
  if (st.ok()) st = LoadCredentialsAndTls(env, &c);
  if (!st.ok()) return st;
  c.metrics_address = env.String(CollectorSetting("MAILROOM_METRICS_ADDRESS"));
  if (c.metrics_address != "off") {
    MAILROOM_ASSIGN_OR_RETURN(c.metrics_address,
                              env.HostPort(CollectorSetting("MAILROOM_METRICS_ADDRESS")));
  } else {
    c.metrics_address.clear();
  }
  c.console_address = env.String(CollectorSetting("MAILROOM_CONSOLE_ADDRESS"));
  if (c.console_address != "off") {
    MAILROOM_ASSIGN_OR_RETURN(c.console_address,
                              env.HostPort(CollectorSetting("MAILROOM_CONSOLE_ADDRESS")));
    if (c.credentials.empty()) {
      return absl::InvalidArgumentError(
          "MAILROOM_CONSOLE_ADDRESS: the console's sign-in takes an operator token of "
          "MAILROOM_SUBSCRIBER_TOKENS, and none is set");
    }
    // Operator tokens are posted to it: plain HTTP only on loopback (a TLS proxy beside it).
    if (!c.allow_plaintext && !IsLoopbackAddress(c.console_address)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MAILROOM_CONSOLE_ADDRESS: \"", absl::CEscape(c.console_address),
          "\" is reachable from the network and the console is plain HTTP (operator tokens in "
          "clear); listen on a loopback address behind its TLS proxy (deploy/nginx/console.conf), "
          "or set MAILROOM_ALLOW_PLAINTEXT=true"));
    }
  } else {
    c.console_address.clear();
  }
  MAILROOM_ASSIGN_OR_RETURN(c.auto_migrate, env.Bool(CollectorSetting("MAILROOM_AUTO_MIGRATE")));
  int64_t pool;
  MAILROOM_ASSIGN_OR_RETURN(pool, env.Int(CollectorSetting("MAILROOM_DB_POOL_SIZE")));
  c.db_pool_size = static_cast<int>(pool);
  st = LoadBudgetSettings(env, &c);
  if (!st.ok()) return st;
  MAILROOM_ASSIGN_OR_RETURN(c.feedback, LoadFeedbackSettings(env));
  // Up to ten years; 0 keeps everything.
  MAILROOM_ASSIGN_OR_RETURN(c.retention.retention,
                            env.Millis(CollectorSetting("MAILROOM_RETENTION")));
  MAILROOM_ASSIGN_OR_RETURN(c.retention.interval,
                            env.Millis(CollectorSetting("MAILROOM_RETENTION_INTERVAL")));
  c.retention.database_url = c.dispatch.listen_database_url;
  c.log_level = env.String(CollectorSetting("MAILROOM_LOG_LEVEL"));
  if (!ParseLogLevel(c.log_level)) {
    return absl::InvalidArgumentError("MAILROOM_LOG_LEVEL: must be debug, info, warn or error");
  }
  return c;
}

}  // namespace mailroom
