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
#include "sender/render/outbound_url.h"

namespace mailroom {
namespace {

absl::Status Bad(const char* var, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(var, ": ", what));
}

// One line of printable text (UTF-8 allowed), at most `max` bytes: no CR, LF or other controls.
bool OneLine(const std::string& s, size_t max) {
  if (s.size() > max) return false;
  for (unsigned char ch : s) {
    if (ch < 0x20 || ch == 0x7f) return false;
  }
  return true;
}

// The names of one transport's variables: the primary's (MAILROOM_SMTP_URL, AWS_ACCESS_KEY_ID,
// ...) or the secondary's, the same names after MAILROOM_FAILOVER_ (MAILROOM_FAILOVER_SMTP_URL,
// MAILROOM_FAILOVER_AWS_ACCESS_KEY_ID, ...).
class TransportVars {
 public:
  explicit TransportVars(bool failover) : failover_(failover) {}
  // MAILROOM_<suffix>, or MAILROOM_FAILOVER_<suffix>.
  std::string Mailroom(absl::string_view suffix) const {
    return absl::StrCat(failover_ ? "MAILROOM_FAILOVER_" : "MAILROOM_", suffix);
  }
  // AWS_<suffix>, or MAILROOM_FAILOVER_AWS_<suffix>.
  std::string Aws(absl::string_view suffix) const {
    return absl::StrCat(failover_ ? "MAILROOM_FAILOVER_AWS_" : "AWS_", suffix);
  }
  bool failover() const { return failover_; }

 private:
  const bool failover_;
};

// What a URL setting accepts. Every URL the sender hands to libcurl is checked on libcurl's own
// parse (ParseOutboundUrl), so the host that decides "loopback" is the host libcurl connects to.
struct UrlRule {
  std::vector<absl::string_view> schemes;  // lower case
  // An http:// URL only to a loopback address: what crosses to it is then never on a network in
  // clear.
  bool plain_http_loopback_only = false;
  std::string wrong_scheme;  // the error for another scheme, or http:// to another host
  std::string credentials;   // where credentials go instead of the URL
};

// Checks the URL `url` of the setting `var` against `rule`. A user name or password in the URL
// is refused: libcurl would send it to the server (in clear over http://), and the credentials
// have settings of their own, which are kept secret. Errors name `var`, never the URL or a part
// of it.
absl::Status CheckUrl(const std::string& var, const std::string& url, const UrlRule& rule) {
  absl::StatusOr<OutboundUrl> u = ParseOutboundUrl(url);
  if (!u.ok()) return Bad(var.c_str(), std::string(u.status().message()));
  if (std::find(rule.schemes.begin(), rule.schemes.end(), u->scheme) == rule.schemes.end()) {
    return Bad(var.c_str(), rule.wrong_scheme);
  }
  if (u->userinfo) {
    return Bad(var.c_str(), absl::StrCat("must not hold a user name or password (userinfo ",
                                         "refused): ", rule.credentials));
  }
  if (rule.plain_http_loopback_only && u->scheme == "http" && !u->loopback) {
    return Bad(var.c_str(), rule.wrong_scheme);
  }
  return absl::OkStatus();
}

// An https:// URL (http:// only to a loopback address) that a secret crosses to; `credentials`
// says which setting holds that secret.
UrlRule HttpsOrLoopback(std::string credentials) {
  return {{"https", "http"},
          true,
          "must start with https:// (http:// only to a loopback address)",
          std::move(credentials)};
}

// The variables of a provider transport (after MAILROOM_ or MAILROOM_FAILOVER_).
struct ProviderVars {
  const char* kind;
  const char* key;  // the API key or token
  const char* url;  // the API's base URL
};
constexpr ProviderVars kProviders[] = {
    {"postmark", "POSTMARK_SERVER_TOKEN", "POSTMARK_API_URL"},
    {"sendgrid", "SENDGRID_API_KEY", "SENDGRID_API_URL"},
    {"mailgun", "MAILGUN_API_KEY", "MAILGUN_API_URL"},
    {"resend", "RESEND_API_KEY", "RESEND_API_URL"},
};

// Printable ASCII without spaces, 1 to `max` bytes: what may go into a header as it is.
bool HeaderToken(const std::string& s, size_t max) {
  if (s.empty() || s.size() > max) return false;
  for (unsigned char ch : s) {
    if (ch <= 0x20 || ch >= 0x7f) return false;
  }
  return true;
}

// Reads and checks the settings of the provider transport `p` into `c`. The key is named,
// never shown.
absl::Status LoadProviderSettings(const Env& env, const TransportVars& v, const ProviderVars& p,
                                  SenderConfig* c) {
  const std::string key_var = v.Mailroom(p.key);
  const std::string url_var = v.Mailroom(p.url);
  c->provider_api_key = env.String(key_var.c_str(), "");
  c->provider_api_url = env.String(url_var.c_str(), "");
  if (c->provider_api_key.empty()) {
    return Bad(key_var.c_str(),
               absl::StrCat("required when ", v.Mailroom("TRANSPORT"), "=", p.kind));
  }
  if (!HeaderToken(c->provider_api_key, 1000)) {
    return Bad(key_var.c_str(), "must be printable ASCII without spaces (at most 1000 bytes)");
  }
  // The key crosses to the URL: in clear only to this machine.
  if (!c->provider_api_url.empty()) {
    if (!OneLine(c->provider_api_url, 2000)) {
      return Bad(url_var.c_str(), "must be one line of at most 2000 bytes");
    }
    absl::Status url = CheckUrl(url_var, c->provider_api_url,
                                HttpsOrLoopback(absl::StrCat("the key goes in ", key_var)));
    if (!url.ok()) return url;
  }
  if (std::string(p.kind) == "postmark") {
    const std::string stream_var = v.Mailroom("POSTMARK_MESSAGE_STREAM");
    c->postmark_message_stream = env.String(stream_var.c_str(), "outbound");
    bool ok = !c->postmark_message_stream.empty() && c->postmark_message_stream.size() <= 100;
    for (char ch : c->postmark_message_stream) {
      if (!(absl::ascii_islower(ch) || absl::ascii_isdigit(ch) || ch == '-' || ch == '_'))
        ok = false;
    }
    if (!ok) return Bad(stream_var.c_str(), "must be a stream id: a-z, 0-9, - or _ (at most 100)");
  }
  if (std::string(p.kind) == "mailgun") {
    const std::string domain_var = v.Mailroom("MAILGUN_DOMAIN");
    c->mailgun_domain = absl::AsciiStrToLower(env.String(domain_var.c_str(), ""));
    bool ok = c->mailgun_domain.size() <= 253 && c->mailgun_domain.find('.') != std::string::npos &&
              c->mailgun_domain.front() != '.' && c->mailgun_domain.back() != '.';
    for (char ch : c->mailgun_domain) {
      if (!(absl::ascii_isalnum(ch) || ch == '-' || ch == '.')) ok = false;
    }
    if (c->mailgun_domain.empty()) {
      return Bad(domain_var.c_str(), "required when " + v.Mailroom("TRANSPORT") + "=mailgun");
    }
    if (!ok) return Bad(domain_var.c_str(), "must be a domain name (mg.example.com)");
  }
  return absl::OkStatus();
}

// The XOAUTH2 settings of an smtp transport: one token source (an endpoint or a file), the
// mailbox, no password. Secrets are named, never shown.
absl::Status CheckSmtpOAuth2(const SenderConfig& c, const TransportVars& v) {
  const std::string token_url_var = v.Mailroom("SMTP_OAUTH2_TOKEN_URL");
  const std::string token_file_var = v.Mailroom("SMTP_OAUTH2_TOKEN_FILE");
  const std::string client_id_var = v.Mailroom("SMTP_OAUTH2_CLIENT_ID");
  const std::string client_secret_var = v.Mailroom("SMTP_OAUTH2_CLIENT_SECRET");
  const std::string scope_var = v.Mailroom("SMTP_OAUTH2_SCOPE");
  const std::string password_var = v.Mailroom("SMTP_PASSWORD");
  const std::string username_var = v.Mailroom("SMTP_USERNAME");
  const bool endpoint = !c.smtp_oauth2_token_url.empty();
  const bool file = !c.smtp_oauth2_token_file.empty();
  if (!endpoint) {
    for (const auto& [var, value] :
         {std::pair<const std::string&, const std::string&>{client_id_var, c.smtp_oauth2_client_id},
          {client_secret_var, c.smtp_oauth2_client_secret}}) {
      if (!value.empty()) return Bad(var.c_str(), absl::StrCat("needs ", token_url_var));
    }
  }
  if (!endpoint && !file) return absl::OkStatus();
  if (endpoint && file) {
    return Bad(token_file_var.c_str(),
               absl::StrCat(token_url_var, " is set too: choose one token source"));
  }
  if (!c.smtp_password.empty()) {
    return Bad(password_var.c_str(),
               absl::StrCat("not used with OAuth2 (", token_url_var, " or _TOKEN_FILE): unset it"));
  }
  if (c.smtp_username.empty()) {
    return Bad(username_var.c_str(), "required with OAuth2: the mailbox that sends");
  }
  if (endpoint) {
    // The client secret crosses to the endpoint: in clear only to this machine.
    absl::Status url = CheckUrl(token_url_var, c.smtp_oauth2_token_url,
                                HttpsOrLoopback(absl::StrCat("the client's id and secret go in ",
                                                             client_id_var, " and ",
                                                             client_secret_var)));
    if (!url.ok()) return url;
    if (c.smtp_oauth2_client_id.empty()) {
      return Bad(client_id_var.c_str(), absl::StrCat("required with ", token_url_var));
    }
    if (c.smtp_oauth2_client_secret.empty()) {
      return Bad(client_secret_var.c_str(), absl::StrCat("required with ", token_url_var));
    }
    if (c.smtp_oauth2_scope.empty() || !OneLine(c.smtp_oauth2_scope, 1000)) {
      return Bad(scope_var.c_str(), "must be one line of at most 1000 bytes");
    }
  }
  if (file && access(c.smtp_oauth2_token_file.c_str(), R_OK) != 0) {
    return Bad(token_file_var.c_str(),
               absl::StrCat("cannot read \"", absl::CEscape(c.smtp_oauth2_token_file), "\""));
  }
  return absl::OkStatus();
}

// "required when MAILROOM_TRANSPORT=<kind>" (or MAILROOM_FAILOVER_TRANSPORT).
std::string RequiredWhen(const TransportVars& v, const char* kind) {
  return absl::StrCat("required when ", v.Mailroom("TRANSPORT"), "=", kind);
}

// Reads every variable of one transport (named by `v`) into `c`, whatever its kind.
absl::Status ReadTransportSettings(const Env& env, const TransportVars& v, SenderConfig* c) {
  auto var = [&v](absl::string_view suffix) { return v.Mailroom(suffix); };
  c->transport = absl::AsciiStrToLower(env.String(SenderSetting(var("TRANSPORT"))));
  c->file_dir = env.String(SenderSetting(var("FILE_DIR")));
  c->smtp_url = env.String(SenderSetting(var("SMTP_URL")));
  c->smtp_username = env.String(SenderSetting(var("SMTP_USERNAME")));
  c->smtp_password = env.String(SenderSetting(var("SMTP_PASSWORD")));
  c->smtp_oauth2_token_url = env.String(SenderSetting(var("SMTP_OAUTH2_TOKEN_URL")));
  c->smtp_oauth2_client_id = env.String(SenderSetting(var("SMTP_OAUTH2_CLIENT_ID")));
  c->smtp_oauth2_client_secret = env.String(SenderSetting(var("SMTP_OAUTH2_CLIENT_SECRET")));
  c->smtp_oauth2_scope = env.String(SenderSetting(var("SMTP_OAUTH2_SCOPE")));
  c->smtp_oauth2_token_file = env.String(SenderSetting(var("SMTP_OAUTH2_TOKEN_FILE")));
  MAILROOM_ASSIGN_OR_RETURN(c->smtp_allow_plain, env.Bool(SenderSetting(var("SMTP_ALLOW_PLAIN"))));
  MAILROOM_ASSIGN_OR_RETURN(c->smtp_ca_file, env.File(var("SMTP_CA_FILE").c_str()));
  MAILROOM_ASSIGN_OR_RETURN(c->smtp_insecure_skip_verify,
                            env.Bool(SenderSetting(var("SMTP_INSECURE_SKIP_VERIFY"))));
  // AWS_REGION is the primary's fallback only: a secondary in another region says so itself.
  const std::string region_var = var("SES_REGION");
  c->ses_region = v.failover()
                      ? env.String(SenderSetting(region_var))
                      : env.String(region_var.c_str(), env.String(SenderSetting("AWS_REGION")));
  c->ses_endpoint = env.String(SenderSetting(var("SES_ENDPOINT")));
  c->ses_configuration_set = env.String(SenderSetting(var("SES_CONFIGURATION_SET")));
  c->aws_access_key_id = env.String(SenderSetting(v.Aws("ACCESS_KEY_ID")));
  c->aws_secret_access_key = env.String(SenderSetting(v.Aws("SECRET_ACCESS_KEY")));
  c->aws_session_token = env.String(SenderSetting(v.Aws("SESSION_TOKEN")));
  c->http_url = env.String(SenderSetting(var("HTTP_URL")));
  c->http_secret = env.String(SenderSetting(var("HTTP_SECRET")));
  c->http_authorization = env.String(SenderSetting(var("HTTP_AUTHORIZATION")));
  MAILROOM_ASSIGN_OR_RETURN(c->http_allow_plain, env.Bool(SenderSetting(var("HTTP_ALLOW_PLAIN"))));
  MAILROOM_ASSIGN_OR_RETURN(c->http_ca_file, env.File(var("HTTP_CA_FILE").c_str()));
  c->sandbox_domain = absl::AsciiStrToLower(env.String(SenderSetting(var("SANDBOX_DOMAIN"))));
  c->sandbox_dir = env.String(SenderSetting(var("SANDBOX_DIR")));
  c->sandbox_feedback_url = env.String(SenderSetting(var("SANDBOX_FEEDBACK_URL")));
  c->sandbox_feedback_secret = env.String(SenderSetting(var("SANDBOX_FEEDBACK_SECRET")));
  MAILROOM_ASSIGN_OR_RETURN(c->sandbox_event_delay,
                            env.Millis(SenderSetting(var("SANDBOX_EVENT_DELAY_MS"))));
  return absl::OkStatus();
}

// Checks an smtp transport's settings: the URL and one way to authenticate.
absl::Status CheckSmtpSettings(const SenderConfig& c, const TransportVars& v) {
  const std::string url_var = v.Mailroom("SMTP_URL");
  if (c.smtp_url.empty()) return Bad(url_var.c_str(), RequiredWhen(v, "smtp"));
  absl::Status url = CheckUrl(url_var, c.smtp_url,
                              {{"smtp", "smtps"},
                               false,
                               "must start with smtp:// or smtps://",
                               absl::StrCat("set ", v.Mailroom("SMTP_USERNAME"), " and ",
                                            v.Mailroom("SMTP_PASSWORD"))});
  if (!url.ok()) return url;
  absl::Status oauth2 = CheckSmtpOAuth2(c, v);
  if (!oauth2.ok()) return oauth2;
  const bool uses_oauth2 = !c.smtp_oauth2_token_url.empty() || !c.smtp_oauth2_token_file.empty();
  if (!uses_oauth2 && c.smtp_username.empty() != c.smtp_password.empty()) {
    return Bad(v.Mailroom(c.smtp_username.empty() ? "SMTP_USERNAME" : "SMTP_PASSWORD").c_str(),
               "username and password must be given together");
  }
  return absl::OkStatus();
}

// Checks an ses transport's settings: the keys, the region, the configuration set, the endpoint.
absl::Status CheckSesSettings(const SenderConfig& c, const TransportVars& v) {
  if (c.aws_access_key_id.empty()) {
    return Bad(v.Aws("ACCESS_KEY_ID").c_str(), RequiredWhen(v, "ses"));
  }
  if (c.aws_secret_access_key.empty()) {
    return Bad(v.Aws("SECRET_ACCESS_KEY").c_str(), RequiredWhen(v, "ses"));
  }
  // Region names are lower-case words joined by dashes, ending in a number (eu-west-2).
  bool region_ok = c.ses_region.size() <= 32 && c.ses_region.find('-') != std::string::npos &&
                   absl::ascii_isdigit(c.ses_region.back());
  for (char ch : c.ses_region) {
    if (!(absl::ascii_islower(ch) || absl::ascii_isdigit(ch) || ch == '-')) region_ok = false;
  }
  if (!region_ok) return Bad(v.Mailroom("SES_REGION").c_str(), "must look like us-east-1");
  for (char ch : c.ses_configuration_set) {
    if (!(absl::ascii_isalnum(ch) || ch == '-' || ch == '_') ||
        c.ses_configuration_set.size() > 64) {
      return Bad(v.Mailroom("SES_CONFIGURATION_SET").c_str(),
                 "must be letters, digits, - or _ (at most 64)");
    }
  }
  if (!c.ses_endpoint.empty()) {
    absl::Status url = CheckUrl(v.Mailroom("SES_ENDPOINT"), c.ses_endpoint,
                                {{"https", "http"},
                                 false,
                                 "must start with https:// or http://",
                                 absl::StrCat("the keys go in ", v.Aws("ACCESS_KEY_ID"), " and ",
                                              v.Aws("SECRET_ACCESS_KEY"))});
    if (!url.ok()) return url;
  }
  return absl::OkStatus();
}

// Checks an http transport's settings: the receiver's URL, the signing secret, the header.
absl::Status CheckHttpSettings(const SenderConfig& c, const TransportVars& v) {
  const std::string http_url_var = v.Mailroom("HTTP_URL");
  // The email's link and code cross to the receiver: in clear only where the operator says.
  if (c.http_url.empty()) {
    return Bad(http_url_var.c_str(), absl::StrCat(RequiredWhen(v, "http"), ": an https:// URL"));
  }
  if (!OneLine(c.http_url, 2000)) return Bad(http_url_var.c_str(), "must be one line");
  absl::Status url = CheckUrl(
      http_url_var, c.http_url,
      {{"https", "http"},
       !c.http_allow_plain,
       absl::StrCat("must start with https:// (http:// only to a loopback address, or with ",
                    v.Mailroom("HTTP_ALLOW_PLAIN"), "=true)"),
       absl::StrCat("send them with ", v.Mailroom("HTTP_AUTHORIZATION"))});
  if (!url.ok()) return url;
  // The secret's form is checked where it is parsed (the transport): only its presence here.
  if (c.http_secret.empty()) {
    return Bad(v.Mailroom("HTTP_SECRET").c_str(),
               absl::StrCat(RequiredWhen(v, "http"), " (whsec_...)"));
  }
  if (!OneLine(c.http_authorization, 4000)) {
    return Bad(v.Mailroom("HTTP_AUTHORIZATION").c_str(), "must be one line of at most 4000 bytes");
  }
  return absl::OkStatus();
}

// Checks a sandbox transport's settings: the simulator's domain, and where its events go.
absl::Status CheckSandboxSettings(const SenderConfig& c, const TransportVars& v) {
  // A domain name: letters, digits, dashes and dots (the simulator's addresses are matched on it).
  bool domain_ok = !c.sandbox_domain.empty() && c.sandbox_domain.size() <= 253 &&
                   c.sandbox_domain.front() != '.' && c.sandbox_domain.back() != '.';
  for (char ch : c.sandbox_domain) {
    if (!(absl::ascii_isalnum(ch) || ch == '-' || ch == '.')) domain_ok = false;
  }
  if (!domain_ok) {
    return Bad(v.Mailroom("SANDBOX_DOMAIN").c_str(),
               "must be a domain name such as sandbox.mailroom.test");
  }
  if (c.sandbox_feedback_url.empty()) return absl::OkStatus();
  const std::string url_var = v.Mailroom("SANDBOX_FEEDBACK_URL");
  if (!OneLine(c.sandbox_feedback_url, 2000)) return Bad(url_var.c_str(), "must be one line");
  // The events name recipients: in clear only to this machine.
  absl::Status url = CheckUrl(url_var, c.sandbox_feedback_url,
                              HttpsOrLoopback(absl::StrCat("the events are signed with ",
                                                           v.Mailroom("SANDBOX_FEEDBACK_SECRET"))));
  if (!url.ok()) return url;
  // The secret's form is checked where it is parsed (the transport): only its presence here.
  if (c.sandbox_feedback_secret.empty()) {
    return Bad(v.Mailroom("SANDBOX_FEEDBACK_SECRET").c_str(),
               absl::StrCat("required with ", url_var, " (whsec_...)"));
  }
  return absl::OkStatus();
}

// Reads and checks one transport's settings (the kind and its own variables, named by `v`)
// into `c`. MAILROOM_CONNECTIONS and MAILROOM_SEND_TIMEOUT_MS are shared and read elsewhere.
absl::Status LoadTransportSettings(const Env& env, const TransportVars& v, SenderConfig* c) {
  absl::Status read = ReadTransportSettings(env, v, c);
  if (!read.ok()) return read;
  if (c->transport == "smtp") return CheckSmtpSettings(*c, v);
  if (c->transport == "ses") return CheckSesSettings(*c, v);
  if (c->transport == "http") return CheckHttpSettings(*c, v);
  if (c->transport == "file") return absl::OkStatus();
  if (c->transport == "sandbox") return CheckSandboxSettings(*c, v);
  for (const ProviderVars& p : kProviders) {
    if (c->transport == p.kind) return LoadProviderSettings(env, v, p, c);
  }
  return Bad(v.Mailroom("TRANSPORT").c_str(),
             absl::StrCat("\"", c->transport,
                          "\" is not file, smtp, ses, http, postmark, sendgrid, mailgun, "
                          "resend or sandbox"));
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
    return Bad(c->client_cert_file.empty() ? "MAILROOM_COLLECTOR_CLIENT_CERT"
                                           : "MAILROOM_COLLECTOR_CLIENT_KEY",
               "client certificate and key must be given together");
  }
  if (!c->collector_tls && (!c->collector_ca_file.empty() || !c->client_cert_file.empty())) {
    return Bad("MAILROOM_COLLECTOR_TLS", "must be true when a CA or client certificate is set");
  }
  MAILROOM_ASSIGN_OR_RETURN(c->allow_plaintext,
                            env.Bool(SenderSetting("MAILROOM_ALLOW_PLAINTEXT")));
  if (!c->collector_tls && !c->allow_plaintext && !IsLoopbackAddress(c->collector_address)) {
    return Bad("MAILROOM_COLLECTOR_ADDRESS",
               absl::StrCat("\"", absl::CEscape(c->collector_address),
                            "\" is not a loopback address and MAILROOM_COLLECTOR_TLS is off (the "
                            "bearer token and the signed tokens would cross the network in "
                            "clear); set MAILROOM_COLLECTOR_TLS=true, use a loopback address, or "
                            "set MAILROOM_ALLOW_PLAINTEXT=true"));
  }
  c->group = env.String(SenderSetting("MAILROOM_CONSUMER_GROUP"));
  if (!ValidGroupName(c->group)) {
    return Bad("MAILROOM_CONSUMER_GROUP", absl::StrCat("must match ", kGroupNamePattern));
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
    return Bad("MAILROOM_FROM", "must be an address or \"Name <address>\" on one line");
  }
  c->link_base_url = env.String(SenderSetting("MAILROOM_LINK_BASE_URL"));
  if (!absl::StartsWith(c->link_base_url, "https://") &&
      !absl::StartsWith(c->link_base_url, "http://")) {
    return Bad("MAILROOM_LINK_BASE_URL", "must start with https:// or http://");
  }
  c->template_dir = env.String(SenderSetting("MAILROOM_TEMPLATE_DIR"));
  if (!c->template_dir.empty() && access(c->template_dir.c_str(), R_OK | X_OK) != 0) {
    return Bad("MAILROOM_TEMPLATE_DIR",
               absl::StrCat("cannot read directory \"", c->template_dir, "\""));
  }
  c->product_name = env.String(SenderSetting("MAILROOM_PRODUCT_NAME"));
  if (!OneLine(c->product_name, 200)) {
    return Bad("MAILROOM_PRODUCT_NAME", "must be one line of at most 200 bytes");
  }
  return absl::OkStatus();
}

// The secondary transport: the same settings as the primary's under MAILROOM_FAILOVER_,
// its own price (required: money is at stake), and which emails may use it.
absl::Status LoadFailoverSettings(const Env& env, SenderConfig* c) {
  const std::string failover_kind = absl::AsciiStrToLower(
      env.String(SenderSetting("MAILROOM_FAILOVER_TRANSPORT")));
  if (failover_kind != "off") {
    SenderConfig f;
    absl::Status st = LoadTransportSettings(env, TransportVars(true), &f);
    if (!st.ok()) return st;
    f.connections = c->connections;
    f.send_timeout = c->send_timeout;
    f.group = c->group;
    c->failover = TransportConfigOf(f);
    if (!env.Get("MAILROOM_FAILOVER_PRICE_PER_1000").has_value()) {
      return Bad("MAILROOM_FAILOVER_PRICE_PER_1000",
                 "required with MAILROOM_FAILOVER_TRANSPORT: the secondary provider's price of "
                 "1000 emails");
    }
    double price;
    MAILROOM_ASSIGN_OR_RETURN(price, env.Double(SenderSetting("MAILROOM_FAILOVER_PRICE_PER_1000")));
    c->failover_price_per_1000 = price;
    c->failover_classes = absl::AsciiStrToLower(
        env.String(SenderSetting("MAILROOM_FAILOVER_CLASSES")));
    if (c->failover_classes != "recovery" && c->failover_classes != "all") {
      return Bad("MAILROOM_FAILOVER_CLASSES", "must be recovery or all");
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
      return Bad("MAILROOM_BUDGET",
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
    return Bad("MAILROOM_RETRY_MAX_MS", "must be at least MAILROOM_RETRY_BASE_MS");
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
  c.connections = static_cast<int>(n);
  MAILROOM_ASSIGN_OR_RETURN(c.send_timeout, env.Millis(SenderSetting("MAILROOM_SEND_TIMEOUT_MS")));
  absl::Status transport = LoadTransportSettings(env, TransportVars(false), &c);
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
    return Bad("MAILROOM_LOG_LEVEL", "must be debug, info, warn or error");
  }
  char host[256] = "sender";
  gethostname(host, sizeof host - 1);
  c.name = env.String("MAILROOM_SENDER_NAME", host);
  if (!OneLine(c.name, 128))
    return Bad("MAILROOM_SENDER_NAME", "must be one line of at most 128 bytes");
  return c;
}

TransportConfig TransportConfigOf(const SenderConfig& c) {
  TransportConfig tc;
  tc.kind = c.transport;
  tc.connections = c.connections;
  tc.timeout = c.send_timeout;
  tc.file_dir = c.file_dir;
  tc.smtp_url = c.smtp_url;
  tc.smtp_username = c.smtp_username;
  tc.smtp_password = c.smtp_password;
  tc.smtp_oauth2_token_url = c.smtp_oauth2_token_url;
  tc.smtp_oauth2_client_id = c.smtp_oauth2_client_id;
  tc.smtp_oauth2_client_secret = c.smtp_oauth2_client_secret;
  tc.smtp_oauth2_scope = c.smtp_oauth2_scope;
  tc.smtp_oauth2_token_file = c.smtp_oauth2_token_file;
  tc.smtp_require_tls = !c.smtp_allow_plain;
  tc.smtp_ca_file = c.smtp_ca_file;
  tc.smtp_insecure_skip_verify = c.smtp_insecure_skip_verify;
  tc.ses_region = c.ses_region;
  tc.ses_endpoint = c.ses_endpoint;
  tc.aws_access_key_id = c.aws_access_key_id;
  tc.aws_secret_access_key = c.aws_secret_access_key;
  tc.aws_session_token = c.aws_session_token;
  tc.ses_configuration_set = c.ses_configuration_set;
  tc.group = c.group;
  tc.http_url = c.http_url;
  tc.http_secret = c.http_secret;
  tc.http_authorization = c.http_authorization;
  tc.http_ca_file = c.http_ca_file;
  tc.provider_api_key = c.provider_api_key;
  tc.provider_api_url = c.provider_api_url;
  tc.postmark_message_stream = c.postmark_message_stream;
  tc.mailgun_domain = c.mailgun_domain;
  tc.sandbox_domain = c.sandbox_domain;
  tc.sandbox_dir = c.sandbox_dir;
  tc.sandbox_feedback_url = c.sandbox_feedback_url;
  tc.sandbox_feedback_secret = c.sandbox_feedback_secret;
  tc.sandbox_event_delay = c.sandbox_event_delay;
  return tc;
}

}  // namespace mailroom
