#include "sender/transport/smtp_entry.h"

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sender/transport/oauth2_token.h"
#include "sender/transport/smtp_transport.h"

namespace mailroom {
namespace {

constexpr bool kSecret = true;

SettingsTable SmtpRows(const TransportVars& v) {
  return {
      {v.Mailroom("SMTP_URL"), "", "", "",
       v.Help("smtp: smtp://host:587 (STARTTLS required) or smtps://host:465")},
      {v.Mailroom("SMTP_USERNAME"), "", "", "",
       v.Help("smtp: AUTH user name (with the password or OAuth2)")},
      {v.Mailroom("SMTP_PASSWORD"), "", "", "", v.Help("smtp: AUTH password"), kSecret},
      {v.Mailroom("SMTP_OAUTH2_TOKEN_URL"), "", "", "",
       v.Help("smtp: AUTH XOAUTH2 with tokens from this client-credentials endpoint")},
      {v.Mailroom("SMTP_OAUTH2_CLIENT_ID"), "", "", "",
       v.Help("smtp: the application's id at the endpoint")},
      {v.Mailroom("SMTP_OAUTH2_CLIENT_SECRET"), "", "", "",
       v.Help("smtp: the application's client secret at the endpoint"), kSecret},
      {v.Mailroom("SMTP_OAUTH2_SCOPE"), "https://outlook.office365.com/.default", "", "",
       v.Help("smtp: the scope asked for with MAILROOM_SMTP_OAUTH2_TOKEN_URL")},
      {v.Mailroom("SMTP_OAUTH2_TOKEN_FILE"), "", "", "",
       v.Help("smtp: AUTH XOAUTH2 with the token in this file (re-read for each connection)")},
      {v.Mailroom("SMTP_ALLOW_PLAIN"), "false", "", "",
       v.Help("smtp: allow a server without STARTTLS")},
      {v.Mailroom("SMTP_CA_FILE"), "", "", "", v.Help("smtp: PEM CA for the server certificate")},
      {v.Mailroom("SMTP_INSECURE_SKIP_VERIFY"), "false", "", "",
       v.Help("smtp: do not verify the server certificate (tests only)")},
  };
}

absl::Status ReadSmtp(const Env& env, const TransportVars& v, TransportConfig* config) {
  const SettingsTable rows = SmtpRows(v);
  SmtpSettings& s = config->Mutable<SmtpSettings>();
  s.url = env.String(v.Row(rows, "SMTP_URL"));
  s.username = env.String(v.Row(rows, "SMTP_USERNAME"));
  s.password = env.String(v.Row(rows, "SMTP_PASSWORD"));
  s.oauth2_token_url = env.String(v.Row(rows, "SMTP_OAUTH2_TOKEN_URL"));
  s.oauth2_client_id = env.String(v.Row(rows, "SMTP_OAUTH2_CLIENT_ID"));
  s.oauth2_client_secret = env.String(v.Row(rows, "SMTP_OAUTH2_CLIENT_SECRET"));
  s.oauth2_scope = env.String(v.Row(rows, "SMTP_OAUTH2_SCOPE"));
  s.oauth2_token_file = env.String(v.Row(rows, "SMTP_OAUTH2_TOKEN_FILE"));
  bool allow_plain = false;
  MAILROOM_ASSIGN_OR_RETURN(allow_plain, env.Bool(v.Row(rows, "SMTP_ALLOW_PLAIN")));
  s.require_tls = !allow_plain;
  MAILROOM_ASSIGN_OR_RETURN(s.ca_file, env.File(v.Mailroom("SMTP_CA_FILE").c_str()));
  MAILROOM_ASSIGN_OR_RETURN(s.insecure_skip_verify,
                            env.Bool(v.Row(rows, "SMTP_INSECURE_SKIP_VERIFY")));
  return absl::OkStatus();
}

// The XOAUTH2 settings of an smtp transport: one token source (an endpoint or a file), the
// mailbox, no password. Secrets are named, never shown.
absl::Status CheckSmtpOAuth2(const SmtpSettings& s, const TransportVars& v) {
  const std::string token_url_var = v.Mailroom("SMTP_OAUTH2_TOKEN_URL");
  const std::string token_file_var = v.Mailroom("SMTP_OAUTH2_TOKEN_FILE");
  const std::string client_id_var = v.Mailroom("SMTP_OAUTH2_CLIENT_ID");
  const std::string client_secret_var = v.Mailroom("SMTP_OAUTH2_CLIENT_SECRET");
  const std::string scope_var = v.Mailroom("SMTP_OAUTH2_SCOPE");
  const std::string password_var = v.Mailroom("SMTP_PASSWORD");
  const std::string username_var = v.Mailroom("SMTP_USERNAME");
  const bool endpoint = !s.oauth2_token_url.empty();
  const bool file = !s.oauth2_token_file.empty();
  if (!endpoint) {
    for (const auto& [var, value] :
         {std::pair<const std::string&, const std::string&>{client_id_var, s.oauth2_client_id},
          {client_secret_var, s.oauth2_client_secret}}) {
      if (!value.empty()) return BadSetting(var, absl::StrCat("needs ", token_url_var));
    }
  }
  if (!endpoint && !file) return absl::OkStatus();
  if (endpoint && file) {
    return BadSetting(token_file_var,
                      absl::StrCat(token_url_var, " is set too: choose one token source"));
  }
  if (!s.password.empty()) {
    return BadSetting(password_var, absl::StrCat("not used with OAuth2 (", token_url_var,
                                                 " or _TOKEN_FILE): unset it"));
  }
  if (s.username.empty()) {
    return BadSetting(username_var, "required with OAuth2: the mailbox that sends");
  }
  if (endpoint) {
    // The client secret crosses to the endpoint: in clear only to this machine.
    absl::Status url = CheckUrl(token_url_var, s.oauth2_token_url,
                                HttpsOrLoopback(absl::StrCat("the client's id and secret go in ",
                                                             client_id_var, " and ",
                                                             client_secret_var)));
    if (!url.ok()) return url;
    if (s.oauth2_client_id.empty()) {
      return BadSetting(client_id_var, absl::StrCat("required with ", token_url_var));
    }
    if (s.oauth2_client_secret.empty()) {
      return BadSetting(client_secret_var, absl::StrCat("required with ", token_url_var));
    }
    if (s.oauth2_scope.empty() || !OneLine(s.oauth2_scope, 1000)) {
      return BadSetting(scope_var, "must be one line of at most 1000 bytes");
    }
  }
  if (file && access(s.oauth2_token_file.c_str(), R_OK) != 0) {
    return BadSetting(token_file_var,
                      absl::StrCat("cannot read \"", absl::CEscape(s.oauth2_token_file), "\""));
  }
  return absl::OkStatus();
}

// Checks an smtp transport's settings: the URL and one way to authenticate.
absl::Status CheckSmtp(const Env&, const TransportVars& v, TransportConfig* config) {
  const SmtpSettings& s = config->Get<SmtpSettings>();
  const std::string url_var = v.Mailroom("SMTP_URL");
  if (s.url.empty()) return BadSetting(url_var, v.RequiredWhen("smtp"));
  absl::Status url = CheckUrl(url_var, s.url,
                              {{"smtp", "smtps"},
                               false,
                               "must start with smtp:// or smtps://",
                               absl::StrCat("set ", v.Mailroom("SMTP_USERNAME"), " and ",
                                            v.Mailroom("SMTP_PASSWORD"))});
  if (!url.ok()) return url;
  absl::Status oauth2 = CheckSmtpOAuth2(s, v);
  if (!oauth2.ok()) return oauth2;
  const bool uses_oauth2 = !s.oauth2_token_url.empty() || !s.oauth2_token_file.empty();
  if (!uses_oauth2 && s.username.empty() != s.password.empty()) {
    return BadSetting(v.Mailroom(s.username.empty() ? "SMTP_USERNAME" : "SMTP_PASSWORD"),
                      "username and password must be given together");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Transport>> MakeSmtp(const TransportConfig& config) {
  return std::unique_ptr<Transport>(new SmtpTransport(config));
}

// How the doctor's SMTP session authenticates: an XOAUTH2 bearer token (fetched here), or the
// username and password in the config, or not at all.
struct SmtpAuth {
  bool oauth2 = false;
  std::string bearer;     // the XOAUTH2 token ("" when none)
  std::string auth_what;  // what the Ok line says of it ("" when nothing is tried)
};

// Fetches the OAuth2 token when the transport uses one. Without it the session goes on to
// connect and TLS only (`tc`'s username is cleared) and a Fail line says why.
SmtpAuth PrepareSmtpAuth(const SmtpSettings& s, TransportConfig* tc, std::vector<DoctorLine>* out) {
  SmtpAuth a;
  a.oauth2 = !s.oauth2_token_url.empty() || !s.oauth2_token_file.empty();
  if (a.oauth2) {
    std::unique_ptr<OAuth2TokenSource> source = !s.oauth2_token_url.empty()
                                                    ? ClientCredentialsSource(
                                                          {s.oauth2_token_url, s.oauth2_client_id,
                                                           s.oauth2_client_secret, s.oauth2_scope,
                                                           tc->timeout})
                                                    : TokenFileSource(s.oauth2_token_file);
    const std::string from = !s.oauth2_token_url.empty() ? HostOf(s.oauth2_token_url)
                                                         : s.oauth2_token_file;
    auto token = source->Fetch();
    if (!token.ok()) {
      out->push_back(DoctorLine::Fail("smtp", absl::StrCat("no OAuth2 token from ", from, ": ",
                                                           token.status().message())));
      tc->Mutable<SmtpSettings>()
          .username.clear();  // connect and TLS only: there is nothing to authenticate with
    } else {
      a.bearer = token->value;
      a.auth_what = absl::StrCat("authenticated as ", s.username, " (XOAUTH2, token from ", from,
                                 ")");
    }
  } else if (!s.username.empty()) {
    a.auth_what = absl::StrCat("authenticated as ", s.username);
  }
  return a;
}

// The Fail line of a session that did not get through (connect, TLS or AUTH); none when it did.
std::optional<DoctorLine> JudgeSmtpFailure(const SmtpSettings& s, const TransportConfig& tc,
                                           const std::string& server, const SmtpAuth& a,
                                           const SmtpProbe& p) {
  const std::string& reply = p.trace.reply;
  switch (p.code) {
    case CURLE_OK: return std::nullopt;
    case CURLE_COULDNT_RESOLVE_HOST:
      return DoctorLine::Fail("smtp",
                              absl::StrCat(server, ": cannot resolve the host: ", p.detail));
    case CURLE_COULDNT_CONNECT:
      return DoctorLine::Fail("smtp", absl::StrCat(server, ": cannot connect: ", p.detail));
    case CURLE_OPERATION_TIMEDOUT:
      return DoctorLine::Fail(
          "smtp",
          absl::StrCat(server, ": no answer within ", absl::FormatDuration(tc.timeout), " (after ",
                       p.trace.command.empty() ? "connecting" : p.trace.command, ")"));
    case CURLE_PEER_FAILED_VERIFICATION:
      return DoctorLine::Fail(
          "smtp",
          absl::StrCat(server, ": certificate not accepted: ", p.detail,
                       s.ca_file.empty() ? " (MAILROOM_SMTP_CA_FILE can name the CA that issued it)"
                                         : absl::StrCat(" (checked against ", s.ca_file, ")")));
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_CACERT_BADFILE:
      return DoctorLine::Fail("smtp", absl::StrCat(server, ": TLS failed: ", p.detail));
    case CURLE_USE_SSL_FAILED:
      return DoctorLine::Fail(
          "smtp",
          absl::StrCat(
              server,
              ": the server does not offer STARTTLS; use smtps:// if it speaks TLS from the "
              "start (MAILROOM_SMTP_ALLOW_PLAIN=true sends in clear, for a relay on this "
              "machine)"));
    default:
      if (p.code == CURLE_LOGIN_DENIED || p.trace.command == "AUTH") {
        return DoctorLine::Fail(
            "smtp",
            absl::StrCat(server, ": authentication refused",
                         a.bearer.empty() ? "" : " (XOAUTH2 token)", ": ",
                         p.trace.command == "AUTH" && p.reply >= 400 ? reply
                         : p.trace.auth_offered.empty()
                             ? "the server offers no AUTH"
                             : absl::StrCat(p.detail, " (offered: ", p.trace.auth_offered, ")")));
      }
      return DoctorLine::Fail("smtp", absl::StrCat(server, ": ", p.status.message()));
  }
}

// The lines of a session that got through: what was seen (TLS, AUTH) in one Ok line, and a
// Warn line for each weakness.
void JudgeSmtpSession(const SmtpSettings& s, const std::string& server, const SmtpAuth& a,
                      const SmtpProbe& p, std::vector<DoctorLine>* out) {
  const bool implicit_tls = absl::StartsWith(s.url, "smtps://");
  std::vector<std::string> seen = {"connected"};
  if (implicit_tls || p.trace.starttls) {
    seen.push_back(absl::StrCat(implicit_tls ? "TLS" : "STARTTLS",
                                s.insecure_skip_verify ? " (certificate NOT verified)"
                                                       : " (certificate verified)"));
  } else {
    out->push_back(DoctorLine::Warn(
        "smtp", absl::StrCat(server, ": no TLS (the server offers no STARTTLS "
                                     "and MAILROOM_SMTP_ALLOW_PLAIN is on): messages "
                                     "and credentials cross the network in clear")));
  }
  if (s.insecure_skip_verify) {
    out->push_back(DoctorLine::Warn("smtp",
                                    "MAILROOM_SMTP_INSECURE_SKIP_VERIFY is on: anyone on the path "
                                    "can pose as the server"));
  }
  if (!a.auth_what.empty() && p.trace.authenticated) {
    seen.push_back(a.auth_what);
  } else if (a.oauth2 && a.bearer.empty()) {
    seen.push_back("AUTH not tried (no token)");
  } else if (!a.auth_what.empty()) {
    // libcurl skips AUTH when the server offers none: the credentials went unused.
    out->push_back(
        DoctorLine::Warn("smtp", absl::StrCat(server, " offers no AUTH: MAILROOM_SMTP_USERNAME's "
                                                      "credentials are not used")));
  } else if (!p.trace.auth_offered.empty()) {
    out->push_back(
        DoctorLine::Warn("smtp", absl::StrCat(server, " offers AUTH (", p.trace.auth_offered,
                                              ") and no credentials are configured: "
                                              "it may refuse to relay (MAILROOM_SMTP_USERNAME)")));
  }
  seen.push_back("NOOP answered");
  out->push_back(DoctorLine::Ok("smtp", absl::StrCat(server, ": ", absl::StrJoin(seen, ", "))));
}

std::vector<DoctorLine> DoctorSmtp(const TransportConfig& config, const DoctorContext&) {
  const SmtpSettings& s = config.Get<SmtpSettings>();
  std::vector<DoctorLine> out;
  TransportConfig tc = config;
  tc.timeout = std::min(tc.timeout, kDoctorCheckTimeout);
  tc.connect_timeout = std::min(tc.connect_timeout, kDoctorCheckTimeout);
  const std::string server = HostOf(s.url);
  const SmtpAuth auth = PrepareSmtpAuth(s, &tc, &out);
  const SmtpProbe p = ProbeSmtp(tc, auth.bearer);
  std::optional<DoctorLine> failure = JudgeSmtpFailure(s, tc, server, auth, p);
  if (failure.has_value()) {
    out.push_back(*std::move(failure));
    return out;
  }
  JudgeSmtpSession(s, server, auth, p, &out);
  return out;
}

}  // namespace

const TransportEntry kSmtpEntry = {
    "smtp",   "smtp",     /*reaches_recipients=*/true, SmtpRows, ReadSmtp, CheckSmtp,
    MakeSmtp, DoctorSmtp,
};

}  // namespace mailroom
