#include "collector/config.h"

#include <arpa/inet.h>
#include <postgresql/libpq-fe.h>  // Debian: libpq-dev

#include <algorithm>
#include <cmath>
#include <memory>
#include <regex>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collector/service.h"  // kMaxInFlight
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

// The feedback endpoint, reputation window and guard (see FeedbackSettings).
absl::StatusOr<FeedbackSettings> LoadFeedbackSettings(const Env& env) {
  FeedbackSettings f;
  f.address = env.String("MAILROOM_FEEDBACK_ADDRESS", "off");
  if (f.address == "off") {
    f.address.clear();
  } else {
    MAILROOM_ASSIGN_OR_RETURN(f.address, env.HostPort("MAILROOM_FEEDBACK_ADDRESS", ""));
  }
  f.sns.extra_hosts = env.List("MAILROOM_FEEDBACK_SNS_HOSTS");
  for (const std::string& h : f.sns.extra_hosts) {
    if (h.find_first_of("/@?# ") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MAILROOM_FEEDBACK_SNS_HOSTS: \"", absl::CEscape(h),
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
  // Anyone can create a topic and publish correctly signed messages: the endpoint acts only on
  // the operator's own topics, so it does not start without them.
  if (!f.address.empty() && f.sns.topic_arns.empty()) {
    return absl::InvalidArgumentError(
        "MAILROOM_FEEDBACK_TOPIC_ARNS: required when MAILROOM_FEEDBACK_ADDRESS is set (the SNS "
        "topics whose messages the feedback endpoint acts on)");
  }
  int64_t workers;
  MAILROOM_ASSIGN_OR_RETURN(workers, env.Int("MAILROOM_FEEDBACK_WORKERS",
                                             FeedbackServerOptions::kDefaultWorkers, 1, 1024));
  f.server.workers = static_cast<int>(workers);
  MAILROOM_ASSIGN_OR_RETURN(
      f.server.request_timeout,
      env.Millis("MAILROOM_FEEDBACK_REQUEST_TIMEOUT",
                 FeedbackServerOptions::kDefaultRequestTimeoutMs, 600, 60000));
  MAILROOM_ASSIGN_OR_RETURN(f.sns.ca_file, env.File("MAILROOM_FEEDBACK_CA_FILE"));
  MAILROOM_ASSIGN_OR_RETURN(f.sns.max_age,
                            env.Millis("MAILROOM_FEEDBACK_MAX_AGE", 3600000, 60000, 86400000));
  int64_t soft;
  MAILROOM_ASSIGN_OR_RETURN(soft, env.Int("MAILROOM_SOFT_BOUNCE_LIMIT", 3, 1, 1000));
  f.soft_bounce_limit = static_cast<int>(soft);
  MAILROOM_ASSIGN_OR_RETURN(
      f.reputation_window,
      env.Millis("MAILROOM_REPUTATION_WINDOW", 7LL * 24 * 3600000, 3600000, 90LL * 24 * 3600000));
  MAILROOM_ASSIGN_OR_RETURN(f.reputation_refresh,
                            env.Millis("MAILROOM_REPUTATION_REFRESH", 30000, 100, 3600000));
  MAILROOM_ASSIGN_OR_RETURN(f.guard.max_bounce_rate,
                            env.Double("MAILROOM_GUARD_MAX_BOUNCE_RATE", 0, 0, 1));
  MAILROOM_ASSIGN_OR_RETURN(f.guard.max_complaint_rate,
                            env.Double("MAILROOM_GUARD_MAX_COMPLAINT_RATE", 0, 0, 1));
  int64_t min_sent;
  MAILROOM_ASSIGN_OR_RETURN(min_sent, env.Int("MAILROOM_GUARD_MIN_SENT", 100, 1, 1000000000));
  f.guard.min_sent = static_cast<uint64_t>(min_sent);
  return f;
}

}  // namespace

bool ValidConninfo(const std::string& conninfo) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
  if (err != nullptr) PQfreemem(err);
  if (opts == nullptr) return false;
  PQconninfoFree(opts);
  return true;
}

absl::Duration IdleInTransactionTimeout(absl::Duration lease) {
  return std::clamp(lease / 4, absl::Milliseconds(100), absl::Seconds(5));
}

namespace {

// `conninfo` with the keepalive defaults added and, when `timeouts` is given, the session
// timeouts in `options` (see WithConnectionDefaults).
std::string AddDefaults(const std::string& conninfo, const TxTimeouts* timeouts) {
  char* err = nullptr;
  std::unique_ptr<PQconninfoOption, void (*)(PQconninfoOption*)> opts(
      PQconninfoParse(conninfo.c_str(), &err), PQconninfoFree);
  if (err != nullptr) PQfreemem(err);
  if (opts == nullptr) return conninfo;
  // Only explicitly given options come back with a value; libpq's environment fallbacks
  // (PGHOST, PGAPPNAME, ...) still apply to what we leave out.
  std::string out;
  auto add = [&out](absl::string_view key, absl::string_view value) {
    if (!out.empty()) out += ' ';
    absl::StrAppend(&out, key, "='");
    for (char ch : value) {
      if (ch == '\\' || ch == '\'') out += '\\';
      out += ch;
    }
    out += '\'';
  };
  std::set<std::string> given;
  std::string options;
  for (PQconninfoOption* o = opts.get(); o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    given.insert(o->keyword);
    if (std::string(o->keyword) == "options") {
      options = o->val;
      continue;
    }
    add(o->keyword, o->val);
  }
  const std::pair<const char*, std::string> defaults[] = {
      {"keepalives", "1"},
      {"keepalives_idle", "10"},
      {"keepalives_interval", "5"},
      {"keepalives_count", "3"},
      {"tcp_user_timeout", "30000"},
  };
  for (const auto& [key, value] : defaults) {
    if (given.count(key) == 0) add(key, value);
  }
  if (timeouts != nullptr && !absl::StrContains(options, "statement_timeout")) {
    if (!options.empty()) options += ' ';
    absl::StrAppend(&options, "-c statement_timeout=",
                    absl::ToInt64Milliseconds(timeouts->statement_timeout));
  }
  if (timeouts != nullptr && !absl::StrContains(options, "idle_in_transaction_session_timeout")) {
    if (!options.empty()) options += ' ';
    absl::StrAppend(&options, "-c idle_in_transaction_session_timeout=",
                    absl::ToInt64Milliseconds(timeouts->idle_in_transaction));
  }
  if (!options.empty()) add("options", options);
  return out;
}

}  // namespace

std::string WithConnectionDefaults(const std::string& conninfo, absl::Duration statement_timeout,
                                   absl::Duration idle_in_transaction_timeout) {
  const TxTimeouts timeouts{statement_timeout, idle_in_transaction_timeout};
  return AddDefaults(conninfo, &timeouts);
}

std::string WithKeepaliveDefaults(const std::string& conninfo) {
  return AddDefaults(conninfo, nullptr);
}

absl::StatusOr<CollectorConfig> LoadCollectorConfig(const Env& env) {
  CollectorConfig c;
  MAILROOM_ASSIGN_OR_RETURN(c.database_url, env.Required("MAILROOM_DATABASE_URL"));
  if (!ValidConninfo(c.database_url)) {
    // libpq's own message quotes the string, which may hold a password: not repeated here.
    return absl::InvalidArgumentError(
        "MAILROOM_DATABASE_URL: not a PostgreSQL connection URL or key=value string "
        "(postgresql://user:password@host:5432/database)");
  }
  int64_t limit;
  MAILROOM_ASSIGN_OR_RETURN(limit, env.Int("MAILROOM_BATCH_LIMIT", 10, 1, 10000));
  c.dispatch.batch_limit = static_cast<int>(limit);
  MAILROOM_ASSIGN_OR_RETURN(limit, env.Int("MAILROOM_DEQUEUE_LIMIT", 1000, 1, 10000));
  c.dispatch.dequeue_limit = static_cast<int>(limit);
  MAILROOM_ASSIGN_OR_RETURN(c.dispatch.batch_timeout,
                            env.Millis("MAILROOM_BATCH_TIMEOUT", 5000, 0, 3600000));
  MAILROOM_ASSIGN_OR_RETURN(c.dispatch.healthcheck_interval,
                            env.Millis("MAILROOM_HEALTHCHECK_INTERVAL", 270000, 1000, 86400000));
  MAILROOM_ASSIGN_OR_RETURN(c.dispatch.poll_interval,
                            env.Millis("MAILROOM_POLL_INTERVAL", 2000, 10, 3600000));
  MAILROOM_ASSIGN_OR_RETURN(c.dispatch.busy_poll_interval,
                            env.Millis("MAILROOM_BUSY_POLL_INTERVAL", 2, 0, 1000));
  MAILROOM_ASSIGN_OR_RETURN(c.dispatch.lease, env.Millis("MAILROOM_LEASE_MS", 60000, 100, 86400000));
  MAILROOM_ASSIGN_OR_RETURN(c.dispatch.reconnect_max_backoff,
                            env.Millis("MAILROOM_RECONNECT_MAX_BACKOFF", 30000, 100, 3600000));
  MAILROOM_ASSIGN_OR_RETURN(c.dispatch.statement_timeout,
                            env.Millis("MAILROOM_STATEMENT_TIMEOUT", 30000, 100, 3600000));
  c.direct_database_url = env.String("MAILROOM_DIRECT_DATABASE_URL", "");
  if (c.direct_database_url.empty()) c.direct_database_url = c.database_url;
  if (!ValidConninfo(c.direct_database_url)) {
    return absl::InvalidArgumentError(
        "MAILROOM_DIRECT_DATABASE_URL: not a PostgreSQL connection URL or key=value string "
        "(postgresql://user:password@host:5432/database)");
  }
  c.tx_timeouts = {c.dispatch.statement_timeout, IdleInTransactionTimeout(c.dispatch.lease)};
  // Query connections (possibly through a transaction-pooling pgbouncer) carry no session
  // settings: their timeouts are set per transaction (collector/db/pg_tx.h). The sessions that
  // need a server session of their own go direct and keep them as session settings.
  c.dispatch.database_url = WithKeepaliveDefaults(c.database_url);
  c.dispatch.listen_database_url =
      WithConnectionDefaults(c.direct_database_url, c.tx_timeouts.statement_timeout,
                             c.tx_timeouts.idle_in_transaction);
  // The sender's window under its own name would otherwise be ignored here without a word.
  if (env.Get("MAILROOM_MAX_IN_FLIGHT").has_value()) {
    return absl::InvalidArgumentError(
        "MAILROOM_MAX_IN_FLIGHT: not a collector setting: MAILROOM_MAX_IN_FLIGHT is the sender's "
        "window; the collector's cap is MAILROOM_MAX_IN_FLIGHT_CAP");
  }
  int64_t max_in_flight_cap;
  MAILROOM_ASSIGN_OR_RETURN(
      max_in_flight_cap,
      env.Int("MAILROOM_MAX_IN_FLIGHT_CAP", kDefaultMaxInFlightCap, 1, kMaxInFlight));
  c.max_in_flight_cap = static_cast<int>(max_in_flight_cap);
  int64_t streams;
  MAILROOM_ASSIGN_OR_RETURN(streams, env.Int("MAILROOM_MAX_STREAMS_PER_CREDENTIAL", 64, 1, 100000));
  c.max_streams_per_credential = static_cast<int>(streams);
  if (env.Get("MAILROOM_GROUPS").has_value()) {
    c.dispatch.groups = env.List("MAILROOM_GROUPS");
    if (c.dispatch.groups.empty()) {
      return absl::InvalidArgumentError(
          "MAILROOM_GROUPS: no group named (comma-separated consumer group names)");
    }
    for (const std::string& g : c.dispatch.groups) {
      if (!ValidGroupName(g)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "MAILROOM_GROUPS: \"", absl::CEscape(g),
            "\" is not a consumer group name (^[a-z][a-z0-9_-]{0,62}$)"));
      }
    }
  }

  c.channel = env.String("MAILROOM_CHANNEL", "");
  if (!c.channel.empty() && !ValidChannel(c.channel)) {
    return absl::InvalidArgumentError(
        "MAILROOM_CHANNEL: must match ^[a-z_][a-z0-9_]{0,62}$ (a plain PostgreSQL identifier)");
  }

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
  c.key = *std::move(parsed);

  MAILROOM_ASSIGN_OR_RETURN(c.listen_address,
                            env.HostPort("MAILROOM_LISTEN_ADDRESS", "127.0.0.1:50051"));
  MAILROOM_ASSIGN_OR_RETURN(c.tls_cert_file, env.File("MAILROOM_TLS_CERT"));
  MAILROOM_ASSIGN_OR_RETURN(c.tls_key_file, env.File("MAILROOM_TLS_KEY"));
  MAILROOM_ASSIGN_OR_RETURN(c.tls_client_ca_file, env.File("MAILROOM_TLS_CLIENT_CA"));
  if (c.tls_cert_file.empty() != c.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        c.tls_cert_file.empty() ? "MAILROOM_TLS_CERT: required when MAILROOM_TLS_KEY is set"
                                : "MAILROOM_TLS_KEY: required when MAILROOM_TLS_CERT is set");
  }
  if (!c.tls_client_ca_file.empty() && c.tls_cert_file.empty()) {
    return absl::InvalidArgumentError(
        "MAILROOM_TLS_CLIENT_CA: mutual TLS needs MAILROOM_TLS_CERT and MAILROOM_TLS_KEY too");
  }
  MAILROOM_ASSIGN_OR_RETURN(c.allow_plaintext, env.Bool("MAILROOM_ALLOW_PLAINTEXT", false));
  if (c.tls_cert_file.empty() && !c.allow_plaintext && !IsLoopbackAddress(c.listen_address)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MAILROOM_LISTEN_ADDRESS: \"", absl::CEscape(c.listen_address),
        "\" is reachable from the network and gRPC would be plaintext (signed tokens and bearer "
        "tokens in clear); set MAILROOM_TLS_CERT and MAILROOM_TLS_KEY, listen on a loopback "
        "address, or set MAILROOM_ALLOW_PLAINTEXT=true"));
  }
  c.health_address = env.String("MAILROOM_HEALTH_ADDRESS", "off");
  if (c.health_address == "off") {
    c.health_address.clear();
  } else {
    MAILROOM_ASSIGN_OR_RETURN(c.health_address, env.HostPort("MAILROOM_HEALTH_ADDRESS", ""));
  }
  MAILROOM_ASSIGN_OR_RETURN(
      c.credentials,
      ParseCredentials(env.List("MAILROOM_SUBSCRIBER_TOKENS"), "MAILROOM_SUBSCRIBER_TOKENS"));
  MAILROOM_ASSIGN_OR_RETURN(c.insecure_no_auth, env.Bool("MAILROOM_INSECURE_NO_AUTH", false));
  if (c.credentials.empty() && c.tls_client_ca_file.empty() && !c.insecure_no_auth) {
    return absl::InvalidArgumentError(
        "MAILROOM_SUBSCRIBER_TOKENS: subscribers must authenticate; set bearer tokens (comma-"
        "separated TOKEN@GROUPS:ROLE entries), or MAILROOM_TLS_CLIENT_CA for mutual TLS, or MAILROOM_INSECURE_NO_AUTH=true "
        "for local development only");
  }
  c.metrics_address = env.String("MAILROOM_METRICS_ADDRESS", "127.0.0.1:9464");
  if (c.metrics_address != "off") {
    MAILROOM_ASSIGN_OR_RETURN(c.metrics_address,
                              env.HostPort("MAILROOM_METRICS_ADDRESS", "127.0.0.1:9464"));
  } else {
    c.metrics_address.clear();
  }
  MAILROOM_ASSIGN_OR_RETURN(c.auto_migrate, env.Bool("MAILROOM_AUTO_MIGRATE", false));
  int64_t pool;
  MAILROOM_ASSIGN_OR_RETURN(pool, env.Int("MAILROOM_DB_POOL_SIZE", 4, 2, 64));
  c.db_pool_size = static_cast<int>(pool);
  // 0 would refuse every AcquireBudget (all jobs wait until they expire); beyond 100 money
  // units per email one sender's report could take a group's month at once.
  MAILROOM_ASSIGN_OR_RETURN(c.max_cost_micros,
                            env.Int("MAILROOM_MAX_COST_MICROS", 1000000, 1, 100000000));
  // The collector owns the budget: a sender naming a price below this floor could draw many
  // times the group's money in emails. 1 (the old floor) must be chosen explicitly.
  MAILROOM_ASSIGN_OR_RETURN(c.min_price_micros,
                            env.Int("MAILROOM_MIN_PRICE_MICROS", kDefaultMinPriceMicros, 1,
                                    c.max_cost_micros));
  const std::string budget =
      absl::AsciiStrToLower(env.String("MAILROOM_DEFAULT_GROUP_BUDGET", "unlimited"));
  if (budget != "unlimited") {
    // A default of 0 silently stops every group without a budget of its own (one group is
    // stopped with SetGroupBudget); a billion a month is a typo.
    double money;
    MAILROOM_ASSIGN_OR_RETURN(money, env.Double("MAILROOM_DEFAULT_GROUP_BUDGET", 0, 0.01, 1e9));
    c.budget.monthly_budget_micros = static_cast<int64_t>(std::floor(money * 1e6));
  }
  // 100 would keep every activation of every group without a reserve of its own unsent.
  int64_t reserve;
  MAILROOM_ASSIGN_OR_RETURN(reserve, env.Int("MAILROOM_RECOVERY_RESERVE_PERCENT", 10, 0, 90));
  c.budget.recovery_reserve_percent = static_cast<int>(reserve);
  MAILROOM_ASSIGN_OR_RETURN(c.budget.grant_lease,
                            env.Millis("MAILROOM_BUDGET_GRANT_LEASE_MS", 10000, 1000, 600000));
  MAILROOM_ASSIGN_OR_RETURN(c.feedback, LoadFeedbackSettings(env));
  // Up to ten years; 0 keeps everything.
  MAILROOM_ASSIGN_OR_RETURN(
      c.retention.retention,
      env.Millis("MAILROOM_RETENTION", 30LL * 86400000, 0, 3650LL * 86400000));
  MAILROOM_ASSIGN_OR_RETURN(c.retention.interval,
                            env.Millis("MAILROOM_RETENTION_INTERVAL", 60000, 100, 86400000));
  c.retention.database_url = c.dispatch.listen_database_url;
  c.log_level = env.String("MAILROOM_LOG_LEVEL", "info");
  if (c.log_level != "debug" && c.log_level != "info" && c.log_level != "warn" &&
      c.log_level != "error") {
    return absl::InvalidArgumentError("MAILROOM_LOG_LEVEL: must be debug, info, warn or error");
  }
  return c;
}

}  // namespace mailroom
