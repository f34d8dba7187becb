#include "sender/doctor/doctor.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "proto/mailroom/v1/mailroom.grpc.pb.h"
#include "sender/delivery/retry.h"
#include "sender/lease/collector_credentials.h"
#include "sender/render/message.h"
#include "sender/render/outbound_url.h"
#include "sender/render/renderer.h"
#include "sender/transport/curl_handle.h"
#include "sender/transport/http_call.h"
#include "sender/transport/mailgun_transport.h"
#include "sender/transport/oauth2_token.h"
#include "sender/transport/postmark_transport.h"
#include "sender/transport/resend_transport.h"
#include "sender/transport/sendgrid_transport.h"
#include "sender/transport/ses_transport.h"
#include "sender/transport/smtp_transport.h"
#include "sender/transport/transport_factory.h"

namespace mailroom {
namespace {

using Level = DoctorLine::Level;

// The longest one network check may take: a doctor that hangs is no help.
constexpr absl::Duration kCheckTimeout = absl::Seconds(15);

DoctorLine Ok(std::string check, std::string text) {
  return {Level::kOk, std::move(check), std::move(text)};
}
DoctorLine Warn(std::string check, std::string text) {
  return {Level::kWarn, std::move(check), std::move(text)};
}
DoctorLine Fail(std::string check, std::string text) {
  return {Level::kFail, std::move(check), std::move(text)};
}

// "smtp://user:pw@host:587/x" -> "host:587": what a line may show of a URL.
std::string HostOf(absl::string_view url) {
  size_t scheme = url.find("://");
  if (scheme != absl::string_view::npos) url.remove_prefix(scheme + 3);
  url = url.substr(0, url.find_first_of("/?#"));
  size_t at = url.rfind('@');
  if (at != absl::string_view::npos) url.remove_prefix(at + 1);
  return std::string(url);
}

// The part of a template set's name a line shows: "activation.de", "activation" (default).
std::string SetName(const std::string& action, const std::string& locale) {
  return absl::StrCat(action, locale.empty() ? "" : ".", locale);
}

bool PlaceholderDomain(absl::string_view domain) {
  for (const char* suffix : {".localhost", ".invalid", ".test", ".example", ".local"}) {
    if (absl::EndsWith(domain, suffix)) return true;
  }
  for (const char* reserved : {"example.com", "example.org", "example.net"}) {  // RFC 2606
    if (domain == reserved || absl::EndsWith(domain, absl::StrCat(".", reserved))) return true;
  }
  return domain == "localhost";
}

}  // namespace

std::string FormatDoctorLine(const DoctorLine& line) {
  std::string text = line.text;
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  const char* level = line.level == Level::kOk     ? "ok  "
                      : line.level == Level::kWarn ? "warn"
                                                   : "FAIL";
  return absl::StrCat(level, " ", line.check, ": ", text);
}

std::vector<DoctorLine> CheckMessageSettings(const SenderConfig& c) {
  std::vector<DoctorLine> out;
  auto from = ParseMailbox(c.from);
  if (!from.ok()) {
    out.push_back(Fail("from", absl::StrCat("MAILROOM_FROM: ", from.status().message())));
  } else {
    const std::string domain = from->second.substr(from->second.find('@') + 1);
    if (c.transport != "file" && PlaceholderDomain(domain)) {
      out.push_back(
          Warn("from", absl::StrCat(from->second, ": ", domain,
                                    " is a placeholder domain; providers refuse or spam-file "
                                    "mail from a domain that is not yours (set MAILROOM_FROM)")));
    } else {
      out.push_back(Ok("from", from->second));
    }
  }

  const std::string& base = c.link_base_url;
  const bool https = absl::StartsWith(base, "https://");
  const std::string host = HostOf(base);
  const std::string name = host.substr(0, host.rfind(':') == std::string::npos || host.back() == ']'
                                              ? host.size()
                                              : host.rfind(':'));
  if (name.empty()) {
    out.push_back(Fail("links", absl::StrCat("MAILROOM_LINK_BASE_URL \"", base,
                                             "\" has no host: the emails' links go nowhere")));
    return out;
  }
  const size_t before = out.size();
  if (absl::StrContains(base, "?") || absl::StrContains(base, "#")) {
    out.push_back(Warn("links", absl::StrCat("MAILROOM_LINK_BASE_URL \"", base,
                                             "\" has a query or fragment: links are the base "
                                             "followed by /activate?token=...")));
  }
  const bool local = name == "localhost" || name == "127.0.0.1" || name == "[::1]";
  if (c.transport != "file" && local) {
    out.push_back(Warn("links", absl::StrCat("MAILROOM_LINK_BASE_URL points at ", host,
                                             ": recipients cannot open these links")));
  } else if (!https && !local) {
    out.push_back(Warn("links", absl::StrCat("MAILROOM_LINK_BASE_URL \"", base,
                                             "\" is http://: the tokens in the links cross "
                                             "the network in clear")));
  }
  if (out.size() == before) {
    std::string trimmed = base;
    while (!trimmed.empty() && trimmed.back() == '/') trimmed.pop_back();
    out.push_back(
        Ok("links", absl::StrCat(trimmed, "/activate?token=..., ", trimmed, "/recover?token=..., ",
                                 trimmed, "/action/<action>?token=...")));
  }
  return out;
}

// What a rendered sample of `action` in `locale` should show: something to act on (for an
// action known to carry a token or a code) and a subject.
void CheckSample(const std::string& action, const std::string& locale, const RenderedEmail& preview,
                 std::vector<DoctorLine>* out) {
  const std::string name = SetName(action, locale);
  const std::string both = preview.text + preview.html;
  const bool builtin = std::find(BuiltinActions().begin(), BuiltinActions().end(), action) !=
                       BuiltinActions().end();
  // Whether an action of the application's own carries a token is the database's to say.
  if (builtin && !IsBuiltinNotice(action) && !absl::StrContains(both, "SAMPLE-TOKEN") &&
      !absl::StrContains(both, "12345")) {
    out->push_back(Warn(
        "templates",
        absl::StrCat(name,
                     ": neither the text nor the HTML shows {{link}}, {{token}} or {{code}}: the "
                     "reader has nothing to act on (a misspelt variable renders as nothing)")));
  }
  if (preview.subject.find_first_not_of(' ') == std::string::npos) {
    out->push_back(Warn("templates", absl::StrCat(name, ": the subject is empty")));
  }
}

// A locale with templates for some built-in actions but not all: its readers get the others in
// the default language. One line per such locale.
void CheckLocales(const Templates& templates, std::vector<DoctorLine>* out) {
  std::set<std::string> locales;
  for (const std::string& action : templates.Actions()) {
    for (const std::string& locale : templates.Locales(action)) {
      if (!locale.empty()) locales.insert(locale);
    }
  }
  for (const std::string& locale : locales) {
    std::vector<std::string> has, missing;
    for (const std::string& action : BuiltinActions()) {
      const std::vector<std::string> sets = templates.Locales(action);
      (std::find(sets.begin(), sets.end(), locale) != sets.end() ? has : missing).push_back(action);
    }
    if (missing.empty()) continue;
    out->push_back(Warn("templates",
                        absl::StrCat("locale ", locale, " has templates for ",
                                     has.empty() ? "no built-in action" : absl::StrJoin(has, ", "),
                                     " but none for ", absl::StrJoin(missing, ", "),
                                     ": its readers get those in the default language")));
  }
}

std::vector<DoctorLine> CheckTemplates(const SenderConfig& c, Clock* clock) {
  std::vector<DoctorLine> out;
  std::vector<absl::Status> problems;
  Templates templates = Templates::LoadAll(c.template_dir, &problems);
  for (const absl::Status& p : problems) out.push_back(Fail("templates", std::string(p.message())));
  // A broken MAILROOM_FROM is reported on its own line; the templates are still rendered.
  RendererOptions options{c.from, c.product_name, c.link_base_url};
  if (!ParseMailbox(c.from).ok()) options.from = "doctor <doctor@example.invalid>";
  auto renderer = Renderer::Create(templates, options, clock);
  if (!renderer.ok()) {
    out.push_back(Fail("templates", std::string(renderer.status().message())));
    return out;
  }
  const size_t before = out.size();
  std::vector<std::string> rendered;
  for (const std::string& action : BuiltinActions()) {
    if (!templates.Has(action)) {
      out.push_back(Fail("templates", absl::StrCat(action, ": no templates")));
    }
  }
  for (const std::string& action : templates.Actions()) {
    for (const std::string& locale : templates.Locales(action)) {
      const std::string name = SetName(action, locale);
      // A built-in action's real code length and expiry (the database's seeds).
      const v1::Job job = renderer->SampleJob(action, locale, DefaultActionRules(action));
      auto email = renderer->Render(job);
      if (!email.ok()) {
        out.push_back(Fail("templates", absl::StrCat(name, ": ", email.status().message())));
        continue;
      }
      auto preview = renderer->Preview(action, locale);
      if (!preview.ok()) {
        out.push_back(Fail("templates", absl::StrCat(name, ": ", preview.status().message())));
        continue;
      }
      CheckSample(action, locale, *preview, &out);
      rendered.push_back(name);
    }
  }
  CheckLocales(templates, &out);
  if (out.size() == before) {
    out.push_back(
        Ok("templates",
           absl::StrCat(rendered.size(), " sets of ", templates.Actions().size(),
                        " actions render a sample job (", absl::StrJoin(rendered, ", "), ") from ",
                        c.template_dir.empty()
                            ? "the built-in templates"
                            : absl::StrCat("the built-in templates and ", c.template_dir))));
  }
  return out;
}

std::vector<DoctorLine> CheckFileTransport(const SenderConfig& c) {
  std::error_code ec;
  std::filesystem::create_directories(c.file_dir, ec);
  if (ec) {
    return {Fail("file", absl::StrCat("MAILROOM_FILE_DIR: cannot create \"", c.file_dir,
                                      "\": ", ec.message()))};
  }
  // What the transport does for every message: create a file in the directory.
  const std::string probe = absl::StrCat(c.file_dir, "/.doctor-", getpid(), ".tmp");
  int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
  if (fd < 0) {
    return {Fail("file", absl::StrCat("MAILROOM_FILE_DIR: cannot write in \"", c.file_dir,
                                      "\": ", std::strerror(errno)))};
  }
  close(fd);
  unlink(probe.c_str());
  return {Ok("file", absl::StrCat("messages are written to ", c.file_dir))};
}

namespace {

// How the doctor's SMTP session authenticates: an XOAUTH2 bearer token (fetched here), or the
// username and password in the config, or not at all.
struct SmtpAuth {
  bool oauth2 = false;
  std::string bearer;     // the XOAUTH2 token ("" when none)
  std::string auth_what;  // what the Ok line says of it ("" when nothing is tried)
};

// Fetches the OAuth2 token when the transport uses one. Without it the session goes on to
// connect and TLS only (`tc`'s username is cleared) and a Fail line says why.
SmtpAuth PrepareSmtpAuth(const SenderConfig& c, TransportConfig* tc, std::vector<DoctorLine>* out) {
  SmtpAuth a;
  a.oauth2 = !c.smtp_oauth2_token_url.empty() || !c.smtp_oauth2_token_file.empty();
  if (a.oauth2) {
    std::unique_ptr<OAuth2TokenSource> source =
        !c.smtp_oauth2_token_url.empty()
            ? ClientCredentialsSource({c.smtp_oauth2_token_url, c.smtp_oauth2_client_id,
                                       c.smtp_oauth2_client_secret, c.smtp_oauth2_scope,
                                       tc->timeout})
            : TokenFileSource(c.smtp_oauth2_token_file);
    const std::string from = !c.smtp_oauth2_token_url.empty() ? HostOf(c.smtp_oauth2_token_url)
                                                              : c.smtp_oauth2_token_file;
    auto token = source->Fetch();
    if (!token.ok()) {
      out->push_back(Fail("smtp", absl::StrCat("no OAuth2 token from ", from, ": ",
                                               token.status().message())));
      tc->smtp_username.clear();  // connect and TLS only: there is nothing to authenticate with
    } else {
      a.bearer = token->value;
      a.auth_what = absl::StrCat("authenticated as ", c.smtp_username, " (XOAUTH2, token from ",
                                 from, ")");
    }
  } else if (!c.smtp_username.empty()) {
    a.auth_what = absl::StrCat("authenticated as ", c.smtp_username);
  }
  return a;
}

// The Fail line of a session that did not get through (connect, TLS or AUTH); none when it did.
std::optional<DoctorLine> JudgeSmtpFailure(const SenderConfig& c, const TransportConfig& tc,
                                           const std::string& server, const SmtpAuth& a,
                                           const SmtpProbe& p) {
  const std::string& reply = p.trace.reply;
  switch (p.code) {
    case CURLE_OK: return std::nullopt;
    case CURLE_COULDNT_RESOLVE_HOST:
      return Fail("smtp", absl::StrCat(server, ": cannot resolve the host: ", p.detail));
    case CURLE_COULDNT_CONNECT:
      return Fail("smtp", absl::StrCat(server, ": cannot connect: ", p.detail));
    case CURLE_OPERATION_TIMEDOUT:
      return Fail("smtp",
                  absl::StrCat(server, ": no answer within ", absl::FormatDuration(tc.timeout),
                               " (after ", p.trace.command.empty() ? "connecting" : p.trace.command,
                               ")"));
    case CURLE_PEER_FAILED_VERIFICATION:
      return Fail("smtp",
                  absl::StrCat(server, ": certificate not accepted: ", p.detail,
                               c.smtp_ca_file.empty()
                                   ? " (MAILROOM_SMTP_CA_FILE can name the CA that issued it)"
                                   : absl::StrCat(" (checked against ", c.smtp_ca_file, ")")));
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_CACERT_BADFILE:
      return Fail("smtp", absl::StrCat(server, ": TLS failed: ", p.detail));
    case CURLE_USE_SSL_FAILED:
      return Fail(
          "smtp",
          absl::StrCat(
              server,
              ": the server does not offer STARTTLS; use smtps:// if it speaks TLS from the "
              "start (MAILROOM_SMTP_ALLOW_PLAIN=true sends in clear, for a relay on this "
              "machine)"));
    default:
      if (p.code == CURLE_LOGIN_DENIED || p.trace.command == "AUTH") {
        return Fail("smtp", absl::StrCat(server, ": authentication refused",
                                         a.bearer.empty() ? "" : " (XOAUTH2 token)", ": ",
                                         p.trace.command == "AUTH" && p.reply >= 400 ? reply
                                         : p.trace.auth_offered.empty()
                                             ? "the server offers no AUTH"
                                             : absl::StrCat(p.detail, " (offered: ",
                                                            p.trace.auth_offered, ")")));
      }
      return Fail("smtp", absl::StrCat(server, ": ", p.status.message()));
  }
}

// The lines of a session that got through: what was seen (TLS, AUTH) in one Ok line, and a
// Warn line for each weakness.
void JudgeSmtpSession(const SenderConfig& c, const std::string& server, const SmtpAuth& a,
                      const SmtpProbe& p, std::vector<DoctorLine>* out) {
  const bool implicit_tls = absl::StartsWith(c.smtp_url, "smtps://");
  std::vector<std::string> seen = {"connected"};
  if (implicit_tls || p.trace.starttls) {
    seen.push_back(absl::StrCat(implicit_tls ? "TLS" : "STARTTLS",
                                c.smtp_insecure_skip_verify ? " (certificate NOT verified)"
                                                            : " (certificate verified)"));
  } else {
    out->push_back(
        Warn("smtp", absl::StrCat(server, ": no TLS (the server offers no STARTTLS "
                                          "and MAILROOM_SMTP_ALLOW_PLAIN is on): messages "
                                          "and credentials cross the network in clear")));
  }
  if (c.smtp_insecure_skip_verify) {
    out->push_back(Warn("smtp", "MAILROOM_SMTP_INSECURE_SKIP_VERIFY is on: anyone on the path "
                                "can pose as the server"));
  }
  if (!a.auth_what.empty() && p.trace.authenticated) {
    seen.push_back(a.auth_what);
  } else if (a.oauth2 && a.bearer.empty()) {
    seen.push_back("AUTH not tried (no token)");
  } else if (!a.auth_what.empty()) {
    // libcurl skips AUTH when the server offers none: the credentials went unused.
    out->push_back(Warn("smtp", absl::StrCat(server, " offers no AUTH: MAILROOM_SMTP_USERNAME's "
                                                     "credentials are not used")));
  } else if (!p.trace.auth_offered.empty()) {
    out->push_back(Warn("smtp", absl::StrCat(server, " offers AUTH (", p.trace.auth_offered,
                                             ") and no credentials are configured: "
                                             "it may refuse to relay (MAILROOM_SMTP_USERNAME)")));
  }
  seen.push_back("NOOP answered");
  out->push_back(Ok("smtp", absl::StrCat(server, ": ", absl::StrJoin(seen, ", "))));
}

}  // namespace

std::vector<DoctorLine> CheckSmtpTransport(const SenderConfig& c) {
  std::vector<DoctorLine> out;
  TransportConfig tc = TransportConfigOf(c);
  tc.timeout = std::min(tc.timeout, kCheckTimeout);
  tc.connect_timeout = std::min(tc.connect_timeout, kCheckTimeout);
  const std::string server = HostOf(c.smtp_url);
  const SmtpAuth auth = PrepareSmtpAuth(c, &tc, &out);
  const SmtpProbe p = ProbeSmtp(tc, auth.bearer);
  std::optional<DoctorLine> failure = JudgeSmtpFailure(c, tc, server, auth, p);
  if (failure.has_value()) {
    out.push_back(*std::move(failure));
    return out;
  }
  JudgeSmtpSession(c, server, auth, p, &out);
  return out;
}

std::vector<DoctorLine> JudgeSesAccount(const SesAccountInfo& a) {
  std::vector<DoctorLine> out;
  if (!a.sending_enabled) {
    out.push_back(Fail("ses", "sending is disabled for the account (SendingEnabled=false): "
                              "nothing is sent until it is enabled again"));
  }
  if (a.enforcement_status == "SHUTDOWN") {
    out.push_back(Fail("ses", "the account is shut down (EnforcementStatus SHUTDOWN)"));
  } else if (a.enforcement_status == "PROBATION") {
    out.push_back(Warn("ses", "the account is on probation (EnforcementStatus PROBATION): "
                              "bounces or complaints are too high"));
  }
  if (!a.production_access) {
    out.push_back(Fail("ses", "the account is in the sandbox (ProductionAccessEnabled=false): "
                              "only verified addresses receive mail; request production access"));
  }
  const std::string quota = a.max_24_hour_send < 0
                                ? std::string("no 24-hour quota")
                                : absl::StrCat(a.sent_last_24_hours, " of ", a.max_24_hour_send,
                                               " sent in the last 24 hours");
  if (a.max_24_hour_send >= 0 && a.sent_last_24_hours >= a.max_24_hour_send) {
    out.push_back(Fail("ses", absl::StrCat("the 24-hour quota is used up: ", quota)));
  } else if (a.max_24_hour_send > 0 && a.sent_last_24_hours >= 0.9 * a.max_24_hour_send) {
    out.push_back(Warn("ses", absl::StrCat("the 24-hour quota is nearly used up: ", quota)));
  }
  if (out.empty()) {
    out.push_back(Ok(
        "ses",
        absl::StrCat("account: production access, sending enabled",
                     a.enforcement_status.empty() ? "" : absl::StrCat(", ", a.enforcement_status),
                     ", ", quota,
                     a.max_send_rate > 0 ? absl::StrCat(", at most ", a.max_send_rate, " emails/s")
                                         : "")));
  }
  return out;
}

DoctorLine JudgeSesIdentity(absl::string_view list, const std::string& address) {
  const std::string domain = address.substr(address.find('@') + 1);
  auto j = nlohmann::json::parse(list.begin(), list.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("EmailIdentities") || !j["EmailIdentities"].is_array()) {
    return Warn("ses", "the sending identity was not checked: ListEmailIdentities answered "
                       "something else than a list");
  }
  // SES accepts mail from an address that is an identity itself or whose domain is one.
  for (const std::string& name : {address, domain}) {
    for (const auto& identity : j["EmailIdentities"]) {
      if (!identity.is_object() || !identity.contains("IdentityName") ||
          !identity["IdentityName"].is_string() ||
          !absl::EqualsIgnoreCase(identity["IdentityName"].get<std::string>(), name)) {
        continue;
      }
      const bool sending = identity.contains("SendingEnabled") &&
                           identity["SendingEnabled"].is_boolean() &&
                           identity["SendingEnabled"].get<bool>();
      if (sending) return Ok("ses", absl::StrCat("sending identity ", name, " is verified"));
      const std::string status = identity.contains("VerificationStatus") &&
                                         identity["VerificationStatus"].is_string()
                                     ? identity["VerificationStatus"].get<std::string>()
                                     : "unknown";
      return Fail("ses", absl::StrCat("identity ", name, " cannot send (VerificationStatus ",
                                      status, "): SES refuses mail from ", address));
    }
  }
  if (j.contains("NextToken") && j["NextToken"].is_string() &&
      !j["NextToken"].get<std::string>().empty()) {
    return Warn("ses", absl::StrCat("neither ", address, " nor ", domain,
                                    " is among the account's first 1000 identities"));
  }
  return Fail("ses", absl::StrCat("neither ", address, " nor ", domain,
                                  " is a verified identity "
                                  "of the account in this region: SES refuses mail from ",
                                  address, " (verify the domain, or set MAILROOM_FROM)"));
}

std::vector<DoctorLine> CheckSesTransport(const SenderConfig& c) {
  TransportConfig tc = TransportConfigOf(c);
  tc.timeout = std::min(tc.timeout, kCheckTimeout);
  tc.connect_timeout = std::min(tc.connect_timeout, kCheckTimeout);
  const std::string where = absl::StrCat(HostOf(SesTransport::ApiUrl(tc, "")), " (region ",
                                         c.ses_region, ")");
  auto account = FetchSesAccount(tc);
  if (!account.ok()) {
    const std::string what(account.status().message());
    const bool refused = absl::StrContains(what, "ses 401") || absl::StrContains(what, "ses 403");
    const bool unreachable = absl::StrContains(what, "(curl ");
    return {Fail("ses", absl::StrCat("GetAccount at ", where, ": ",
                                     refused       ? "credentials, region or clock refused: "
                                     : unreachable ? "cannot reach the endpoint: "
                                                   : "",
                                     what))};
  }
  std::vector<DoctorLine> out = {
      Ok("ses", absl::StrCat("GetAccount at ", where, ": signed request accepted"))};
  for (DoctorLine& line : JudgeSesAccount(*account)) out.push_back(std::move(line));
  auto from = ParseMailbox(c.from);
  if (!from.ok()) return out;  // its own line already
  // The first page holds every identity of almost any account; a query string needs no
  // escaping in the signed path (curl 7.88 signs the path as written).
  CurlHandle h(curl_easy_init());
  auto listed = SesTransport::Call(h.get(), tc,
                                   SesTransport::ApiUrl(tc, "/v2/email/identities?PageSize=1000"),
                                   nullptr);
  if (!listed.ok()) {
    out.push_back(Warn("ses", absl::StrCat("the sending identity was not checked: "
                                           "ListEmailIdentities failed (",
                                           listed.status().message(), ")")));
    return out;
  }
  out.push_back(JudgeSesIdentity(*listed, from->second));
  return out;
}

DoctorLine JudgeProviderCheck(const std::string& kind, const HttpAnswer& answer,
                              const std::string& where, const std::string& mailgun_domain) {
  const long http = answer.status;
  auto json = nlohmann::json::parse(answer.body, nullptr, false);
  auto str = [&json](const char* k) {
    return json.is_object() && json.contains(k) && json[k].is_string() ? json[k].get<std::string>()
                                                                       : std::string();
  };
  const std::string what = absl::StrCat(kind, " ", http);
  if (kind == "resend" && http == 401 && str("name") == "restricted_api_key") {
    return Ok(kind, absl::StrCat("API key accepted by ", where, " (sending access only)"));
  }
  if (kind == "mailgun" && (http == 401 || http == 403)) {
    // A domain sending key can only send: it cannot read its domain, like a wrong key.
    return Warn(kind, absl::StrCat(where, " refused to show domain ", mailgun_domain, " (", what,
                                   "): the API key is wrong, or it is a domain sending key, "
                                   "which cannot be checked without sending"));
  }
  if (http == 401 || http == 403) {
    return Fail(kind, absl::StrCat("credentials refused by ", where, " (", what, ")"));
  }
  if (kind == "mailgun" && http == 404) {
    return Fail(kind, absl::StrCat("no sending domain ", mailgun_domain, " at ", where,
                                   " (EU domains need MAILROOM_MAILGUN_API_URL="
                                   "https://api.eu.mailgun.net)"));
  }
  if (http < 200 || http >= 300) {
    return Fail(kind, absl::StrCat("unexpected answer from ", where, " (", what, ")"));
  }
  if (kind == "sendgrid") {
    bool can_send = false;
    if (json.is_object() && json.contains("scopes") && json["scopes"].is_array()) {
      for (const auto& s : json["scopes"]) can_send |= s.is_string() && s == "mail.send";
    }
    return can_send ? Ok(kind, absl::StrCat("API key accepted by ", where,
                                            "; it has the mail.send scope"))
                    : Fail(kind, absl::StrCat("the API key lacks the mail.send scope at ", where,
                                              ": SendGrid refuses every email (403)"));
  }
  if (kind == "mailgun") {
    std::string state;
    if (json.is_object() && json.contains("domain") && json["domain"].is_object() &&
        json["domain"].contains("state") && json["domain"]["state"].is_string()) {
      state = json["domain"]["state"].get<std::string>();
    }
    if (state != "active") {
      return Fail(kind, absl::StrCat("sending domain ", mailgun_domain, " is ",
                                     state.empty() ? "in an unknown state" : state,
                                     ": Mailgun sends only from an active (verified) domain"));
    }
    return Ok(kind, absl::StrCat("API key accepted by ", where, "; domain ", mailgun_domain,
                                 " is active"));
  }
  return Ok(kind,
            absl::StrCat(kind == "postmark" ? "server token" : "API key", " accepted by ", where));
}

std::vector<DoctorLine> CheckProviderTransport(const SenderConfig& c) {
  const TransportConfig tc = TransportConfigOf(c);
  HttpRequest request = c.transport == "postmark"   ? PostmarkTransport::CheckRequest(tc)
                        : c.transport == "sendgrid" ? SendgridTransport::CheckRequest(tc)
                        : c.transport == "mailgun"  ? MailgunTransport::CheckRequest(tc)
                                                    : ResendTransport::CheckRequest(tc);
  request.timeout = std::min(tc.timeout, kCheckTimeout);
  request.connect_timeout = std::min(tc.connect_timeout, kCheckTimeout);
  const std::string where = HostOf(request.url);
  CurlHandle h(curl_easy_init());
  auto answer = PerformHttp(h.get(), request, nullptr);
  if (!answer.ok()) {
    return {
        Fail(c.transport, absl::StrCat("cannot reach ", where, ": ", answer.status().message()))};
  }
  std::vector<DoctorLine> out = {JudgeProviderCheck(c.transport, *answer, where, c.mailgun_domain)};
  // What only a send shows.
  const char* unchecked = c.transport == "postmark"
                              ? "whether MAILROOM_FROM has a confirmed sender signature "
                                "(Postmark refuses the first email with ErrorCode 400 or 401)"
                          : c.transport == "sendgrid"
                              ? "whether MAILROOM_FROM is a verified sender identity "
                                "(SendGrid refuses the first email with 403)"
                          : c.transport == "mailgun"
                              ? "whether the account may send to any recipient (a sandbox "
                                "domain sends only to authorised recipients)"
                              : "whether MAILROOM_FROM's domain is verified at Resend "
                                "(Resend refuses the first email with 403)";
  if (out[0].level != Level::kFail) {
    out.push_back(Ok(c.transport, absl::StrCat("not checked without sending: ", unchecked)));
  }
  return out;
}

std::vector<DoctorLine> CheckCollector(const SenderConfig& c) {
  auto creds = CollectorCredentials(
      {c.collector_tls, c.collector_ca_file, c.client_cert_file, c.client_key_file});
  if (!creds.ok()) return {Fail("collector", std::string(creds.status().message()))};
  auto stub = v1::Collector::NewStub(grpc::CreateChannel(c.collector_address, *creds));
  grpc::ClientContext ctx;
  if (!c.collector_token.empty()) {
    ctx.AddMetadata("authorization", absl::StrCat("Bearer ", c.collector_token));
  }
  // Not wait_for_ready: an address nobody answers on is a finding, not something to wait out.
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(absl::ToInt64Milliseconds(kCheckTimeout)));
  v1::GetUsageRequest req;
  req.set_consumer_group(c.group);
  v1::GetUsageResponse resp;
  const grpc::Status st = stub->GetUsage(&ctx, req, &resp);
  const std::string where = absl::StrCat(c.collector_address,
                                         c.collector_tls ? " (TLS)" : " (plaintext)");
  switch (st.error_code()) {
    case grpc::StatusCode::OK:
      return {Ok("collector", absl::StrCat(where, ": GetUsage for group ", c.group, " answered (",
                                           resp.sent(), " emails this month)"))};
    case grpc::StatusCode::UNAUTHENTICATED:
      return {
          Fail("collector", absl::StrCat(where, ": the credential is refused (", st.error_message(),
                                         "): check MAILROOM_COLLECTOR_TOKEN"))};
    case grpc::StatusCode::PERMISSION_DENIED:
      return {Fail("collector", absl::StrCat(where, ": the credential may not serve group ",
                                             c.group, " (", st.error_message(), ")"))};
    case grpc::StatusCode::UNAVAILABLE:
      // gRPC reports a refused certificate as an unavailable address; say which it was.
      return {Fail("collector", absl::StrCat(where,
                                             absl::StrContains(st.error_message(), "andshake") ||
                                                     absl::StrContains(st.error_message(), "SSL")
                                                 ? ": TLS failed: "
                                                 : ": unreachable: ",
                                             st.error_message()))};
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return {Fail("collector", absl::StrCat(where, ": no answer within ",
                                             absl::FormatDuration(kCheckTimeout)))};
    default:
      return {Fail("collector", absl::StrCat(where, ": GetUsage failed: ", st.error_message()))};
  }
}

std::vector<DoctorLine> CheckSandboxTransport(const SenderConfig& c) {
  std::vector<DoctorLine> out = {
      Warn("sandbox", absl::StrCat("a provider simulator: no email reaches anyone; recipients at ",
                                   c.sandbox_domain, " choose the answer and the events"))};
  if (c.sandbox_feedback_url.empty()) {
    out.push_back(Ok("sandbox", "no events are posted (MAILROOM_SANDBOX_FEEDBACK_URL is unset)"));
  } else {
    auto url = ParseOutboundUrl(c.sandbox_feedback_url);
    out.push_back(Ok("sandbox", absl::StrCat("events are posted to ",
                                             url.ok() ? url->host : std::string("the URL"),
                                             " (not checked: the collector answers them)")));
  }
  return out;
}

std::string SendErrorClass(const absl::Status& error) {
  if (IsRecipientRejected(error)) {
    return "recipient rejected (permanent; the address is suppressed)";
  }
  if (IsProviderError(error)) return "provider error (the breaker holds every job)";
  if (IsMaybeSent(error)) return "maybe sent (retried once)";
  if (RetryPolicy::Retryable(error)) return "temporary (retried)";
  return "permanent (the job fails)";
}

int RunSendTest(const SenderConfig& c, const std::string& address, std::FILE* out, Clock* clock) {
  CurlGlobalInit();
  auto line = [&](const DoctorLine& l) {
    std::fprintf(out, "%s\n", FormatDoctorLine(l).c_str());
    std::fflush(out);
  };
  auto config_error = [&](absl::string_view why) {
    line(Fail("send-test", std::string(why)));
    return 2;
  };
  auto templates = Templates::Load(c.template_dir);
  if (!templates.ok()) return config_error(templates.status().message());
  auto renderer = Renderer::Create(*std::move(templates),
                                   {c.from, c.product_name, c.link_base_url, c.template_dir},
                                   clock);
  if (!renderer.ok()) return config_error(renderer.status().message());
  v1::Job job = renderer->SampleJob("activation", "", DefaultActionRules("activation"));
  job.set_email(address);
  // No job: the sample's token activates nothing, and with id 0 no provider event about this
  // email can reach a job by its tags.
  job.set_job_id(0);
  auto email = renderer->Render(job);
  if (!email.ok()) {
    return config_error(absl::StrCat("cannot send to that address: ", email.status().message()));
  }
  auto transport = MakeTransport(TransportConfigOf(c));
  if (!transport.ok()) return config_error(transport.status().message());
  const std::string name = (*transport)->Name();
  auto sent = (*transport)->Send(*email);
  if (!sent.ok()) {
    line(Fail("send-test", absl::StrCat("refused by ", name, ": ", SendErrorClass(sent.status()),
                                        ": ", sent.status().message())));
    return 1;
  }
  line(Ok("send-test",
          absl::StrCat("accepted by ", name, ", provider message id ", sent->provider_id)));
  return 0;
}

int RunDoctor(const SenderConfig& c, std::FILE* out) {
  CurlGlobalInit();
  int problems = 0, warnings = 0;
  auto print = [&](const std::vector<DoctorLine>& lines) {
    for (const DoctorLine& line : lines) {
      problems += line.level == Level::kFail;
      warnings += line.level == Level::kWarn;
      std::fprintf(out, "%s\n", FormatDoctorLine(line).c_str());
    }
    std::fflush(out);
  };
  print({Ok("config", absl::StrCat("loaded: transport ", c.transport, ", consumer group ", c.group,
                                   ", collector ", c.collector_address))});
  print(CheckMessageSettings(c));
  print(CheckTemplates(c, RealClock::Get()));
  if (c.transport == "file") print(CheckFileTransport(c));
  if (c.transport == "smtp") print(CheckSmtpTransport(c));
  if (c.transport == "ses") print(CheckSesTransport(c));
  if (c.transport == "sandbox") print(CheckSandboxTransport(c));
  if (c.transport == "postmark" || c.transport == "sendgrid" || c.transport == "mailgun" ||
      c.transport == "resend") {
    print(CheckProviderTransport(c));
  }
  print(CheckCollector(c));
  std::fprintf(out, "%d problem%s, %d warning%s\n", problems, problems == 1 ? "" : "s", warnings,
               warnings == 1 ? "" : "s");
  std::fflush(out);
  return problems == 0 ? 0 : 1;
}

}  // namespace mailroom
