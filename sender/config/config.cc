#include "sender/config/config.h"

#include <unistd.h>

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/names.h"
#include "sender/config/settings.h"
#include "sender/transport/registry.h"
#include "sender/transport/transport_entry.h"

namespace mailroom {
namespace {

// Reads and checks one transport's settings (the kind and its own variables, named by `v`)
// into `tc`. MAILROOM_CONNECTIONS and MAILROOM_SEND_TIMEOUT_MS are shared and read elsewhere.
absl::Status LoadTransportSettings(const Env& env, const TransportVars& v, TransportConfig* tc) {
  const std::string kind = absl::AsciiStrToLower(
      env.String(SenderSetting(v.Mailroom("TRANSPORT"))));
  return LoadTransportConfig(env, v, kind, tc);
}

// The collector's connection: its address and TLS, the bearer token, the group and the window.
absl::Status LoadCollectorConnection(const Env& env, SenderConfig* c) {
  MAILROOM_ASSIGN_OR_RETURN(c->collector_address,
                            env.HostPort("MAILROOM_COLLECTOR_ADDRESS", "127.0.0.1:50051", false));
  c->collector_token = env.String(SenderSetting("MAILROOM_COLLECTOR_TOKEN"));
  MAILROOM_ASSIGN_OR_RETURN(c->collector_tls, env.Bool(SenderSetting("MAILROOM_COLLECTOR_TLS")));
  MAILROOM_ASSIGN_OR_RETURN(c->collector_ca_file, env.File("MAILROOM_COLLECTOR_CA"));
  MAILROOM_ASSIGN_OR_RETURN(c->client_cert_file, env.File("MAILROOM_COLLECTOR_CLIENT_CERT"));
  MAILROOM_ASSIGN_OR_RETURN(c->client_key_file, env.File("MAILROOM_COLLECTOR_CLIENT_KEY"));
  if (c->client_cert_file.empty() != c->client_key_file.empty()) {
    return BadSetting(c->client_cert_file.empty() ? "MAILROOM_COLLECTOR_CLIENT_CERT"
                                                  : "MAILROOM_COLLECTOR_CLIENT_KEY",
                      "client certificate and key must be given together");
  }
  if (!c->collector_tls && (!c->collector_ca_file.empty() || !c->client_cert_file.empty())) {
    return BadSetting("MAILROOM_COLLECTOR_TLS",
                      "must be true when a CA or client certificate is set");
  }
  MAILROOM_ASSIGN_OR_RETURN(c->allow_plaintext,
                            env.Bool(SenderSetting("MAILROOM_ALLOW_PLAINTEXT")));
  if (!c->collector_tls && !c->allow_plaintext && !IsLoopbackAddress(c->collector_address)) {
    return BadSetting(
        "MAILROOM_COLLECTOR_ADDRESS",
        absl::StrCat("\"", absl::CEscape(c->collector_address),
                     "\" is not a loopback address and MAILROOM_COLLECTOR_TLS is off (the "
                     "bearer token and the signed tokens would cross the network in "
                     "clear); set MAILROOM_COLLECTOR_TLS=true, use a loopback address, or "
                     "set MAILROOM_ALLOW_PLAINTEXT=true"));
  }
  c->group = env.String(SenderSetting("MAILROOM_CONSUMER_GROUP"));
  if (!ValidGroupName(c->group)) {
    return BadSetting("MAILROOM_CONSUMER_GROUP", absl::StrCat("must match ", kGroupNamePattern));
  }
  int64_t n;
  MAILROOM_ASSIGN_OR_RETURN(n, env.Int(SenderSetting("MAILROOM_MAX_IN_FLIGHT")));
  c->max_in_flight = static_cast<int>(n);
  // How long an outcome may wait for others (half the window) to share its acknowledgement.
  MAILROOM_ASSIGN_OR_RETURN(c->ack_delay, env.Millis(SenderSetting("MAILROOM_ACK_DELAY_MS")));
  return absl::OkStatus();
}

// What the emails are made of: the sender address, the links, the templates, the product name.
absl::Status LoadTemplateSettings(const Env& env, SenderConfig* c) {
  c->from = env.String(SenderSetting("MAILROOM_FROM"));
  if (absl::StrContains(c->from, "\r") || absl::StrContains(c->from, "\n") ||
      !absl::StrContains(c->from, "@")) {
    return BadSetting("MAILROOM_FROM", "must be an address or \"Name <address>\" on one line");
  }
  c->link_base_url = env.String(SenderSetting("MAILROOM_LINK_BASE_URL"));
  if (!absl::StartsWith(c->link_base_url, "https://") &&
      !absl::StartsWith(c->link_base_url, "http://")) {
    return BadSetting("MAILROOM_LINK_BASE_URL", "must start with https:// or http://");
  }
  c->template_dir = env.String(SenderSetting("MAILROOM_TEMPLATE_DIR"));
  if (!c->template_dir.empty() && access(c->template_dir.c_str(), R_OK | X_OK) != 0) {
    return BadSetting("MAILROOM_TEMPLATE_DIR",
                      absl::StrCat("cannot read directory \"", c->template_dir, "\""));
  }
  c->product_name = env.String(SenderSetting("MAILROOM_PRODUCT_NAME"));
  if (!OneLine(c->product_name, 200)) {
    return BadSetting("MAILROOM_PRODUCT_NAME", "must be one line of at most 200 bytes");
  }
  return absl::OkStatus();
}

// The secondary transport: the same settings as the primary's under MAILROOM_FAILOVER_,
// its own price (required: money is at stake), and which emails may use it.
absl::Status LoadFailoverSettings(const Env& env, SenderConfig* c) {
  const std::string failover_kind = absl::AsciiStrToLower(
      env.String(SenderSetting("MAILROOM_FAILOVER_TRANSPORT")));
  if (failover_kind != "off") {
    TransportConfig f;
    f.connections = c->transport.connections;
    f.timeout = c->transport.timeout;
    f.group = c->transport.group;
    absl::Status st = LoadTransportSettings(env, TransportVars(true), &f);
    if (!st.ok()) return st;
    c->failover = std::move(f);
    if (!env.Get("MAILROOM_FAILOVER_PRICE_PER_1000").has_value()) {
      return BadSetting(
          "MAILROOM_FAILOVER_PRICE_PER_1000",
          "required with MAILROOM_FAILOVER_TRANSPORT: the secondary provider's price of "
          "1000 emails");
    }
    double price;
    MAILROOM_ASSIGN_OR_RETURN(price, env.Double(SenderSetting("MAILROOM_FAILOVER_PRICE_PER_1000")));
    c->failover_price_per_1000 = price;
    c->failover_classes = absl::AsciiStrToLower(
        env.String(SenderSetting("MAILROOM_FAILOVER_CLASSES")));
    if (c->failover_classes != "recovery" && c->failover_classes != "all") {
      return BadSetting("MAILROOM_FAILOVER_CLASSES", "must be recovery or all");
    }
  }
  return absl::OkStatus();
}

// The budget, the send rate, retries, and the pauses of the account check and the breaker.
absl::Status LoadBudgetAndRetries(const Env& env, SenderConfig* c) {
  int64_t n;
  const std::string budget = absl::AsciiStrToLower(env.String(SenderSetting("MAILROOM_BUDGET")));
  if (budget != "unlimited") {
    double b;
    MAILROOM_ASSIGN_OR_RETURN(b, env.Double(SenderSetting("MAILROOM_BUDGET")));
    // A cap below one email's price would hold every job until it expires.
    if (b < c->price_per_1000 / 1000) {
      return BadSetting("MAILROOM_BUDGET",
                        absl::StrCat("must allow at least one email (", c->price_per_1000 / 1000,
                                     " at MAILROOM_PRICE_PER_1000), or be unlimited"));
    }
    c->monthly_budget = b;
  }
  MAILROOM_ASSIGN_OR_RETURN(n, env.Int(SenderSetting("MAILROOM_BURST")));
  c->burst = static_cast<int>(n);
  if (env.Get("MAILROOM_PROVIDER_RATE_LIMIT").has_value()) {
    double r;
    MAILROOM_ASSIGN_OR_RETURN(r, env.Double(SenderSetting("MAILROOM_PROVIDER_RATE_LIMIT")));
    c->provider_rate = r;
  }
  MAILROOM_ASSIGN_OR_RETURN(n, env.Int(SenderSetting("MAILROOM_RETRY_MAX_ATTEMPTS")));
  c->retry_max_attempts = static_cast<int>(n);
  MAILROOM_ASSIGN_OR_RETURN(c->retry_base, env.Millis(SenderSetting("MAILROOM_RETRY_BASE_MS")));
  MAILROOM_ASSIGN_OR_RETURN(c->retry_max, env.Millis(SenderSetting("MAILROOM_RETRY_MAX_MS")));
  if (c->retry_max < c->retry_base) {
    return BadSetting("MAILROOM_RETRY_MAX_MS", "must be at least MAILROOM_RETRY_BASE_MS");
  }
  MAILROOM_ASSIGN_OR_RETURN(c->expiry_margin,
                            env.Millis(SenderSetting("MAILROOM_EXPIRY_MARGIN_MS")));
  // SES GetAccount is read at start and this often (ses transport only).
  MAILROOM_ASSIGN_OR_RETURN(c->ses_account_interval,
                            env.Millis(SenderSetting("MAILROOM_SES_ACCOUNT_INTERVAL_MS")));
  // The circuit breaker probes after 1 s, doubling up to this.
  MAILROOM_ASSIGN_OR_RETURN(c->breaker_max_backoff,
                            env.Millis(SenderSetting("MAILROOM_BREAKER_MAX_BACKOFF")));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SenderConfig> LoadSenderConfig(const Env& env) {
  SenderConfig c;
  absl::Status st = LoadCollectorConnection(env, &c);
  if (st.ok()) st = LoadTemplateSettings(env, &c);
  if (!st.ok()) return st;
  int64_t n;
  MAILROOM_ASSIGN_OR_RETURN(n, env.Int(SenderSetting("MAILROOM_CONNECTIONS")));
  c.transport.connections = static_cast<int>(n);
  MAILROOM_ASSIGN_OR_RETURN(c.transport.timeout,
                            env.Millis(SenderSetting("MAILROOM_SEND_TIMEOUT_MS")));
  c.transport.group = c.group;
  absl::Status transport = LoadTransportSettings(env, TransportVars(false), &c.transport);
  if (!transport.ok()) return transport;

  // Money is counted in micro-units per email (price per 1000 x 1000, rounded up): below
  // kMinPricePer1000 an email would cost less than 1 micro-unit and be rounded up to it,
  // so the group's budget would count a fraction of what the provider bills. Above
  // kMaxPricePer1000 one email costs more than the collector's default MAILROOM_MAX_COST_MICROS.
  MAILROOM_ASSIGN_OR_RETURN(c.price_per_1000, env.Double(SenderSetting("MAILROOM_PRICE_PER_1000")));
  st = LoadFailoverSettings(env, &c);
  if (st.ok()) st = LoadBudgetAndRetries(env, &c);
  if (!st.ok()) return st;
  c.metrics_address = env.String(SenderSetting("MAILROOM_METRICS_ADDRESS"));
  if (c.metrics_address == "off") {
    c.metrics_address.clear();
  } else {
    MAILROOM_ASSIGN_OR_RETURN(c.metrics_address,
                              env.HostPort(SenderSetting("MAILROOM_METRICS_ADDRESS")));
  }
  c.health_address = env.String(SenderSetting("MAILROOM_HEALTH_ADDRESS"));
  if (c.health_address == "off") {
    c.health_address.clear();
  } else {
    MAILROOM_ASSIGN_OR_RETURN(c.health_address,
                              env.HostPort(SenderSetting("MAILROOM_HEALTH_ADDRESS")));
  }
  c.log_level = env.String(SenderSetting("MAILROOM_LOG_LEVEL"));
  if (!ParseLogLevel(c.log_level)) {
    return BadSetting("MAILROOM_LOG_LEVEL", "must be debug, info, warn or error");
  }
  char host[256] = "sender";
  gethostname(host, sizeof host - 1);
  c.name = env.String("MAILROOM_SENDER_NAME", host);
  if (!OneLine(c.name, 128))
    return BadSetting("MAILROOM_SENDER_NAME", "must be one line of at most 128 bytes");
  return c;
}

TransportConfig TransportConfigOf(const SenderConfig& c) { return c.transport; }

}  // namespace mailroom
