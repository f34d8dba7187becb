#include "sender/transport/http_entry.h"

#include "absl/strings/str_cat.h"
#include "sender/transport/http_transport.h"

namespace mailroom {
namespace {

constexpr bool kSecret = true;

SettingsTable HttpRows(const TransportVars& v) {
  return {
      {v.Mailroom("HTTP_URL"), "", "", "",
       v.Help("http: the URL each email is POSTed to, https://...")},
      {v.Mailroom("HTTP_SECRET"), "", "", "", v.Help("http: the signing secret, whsec_..."),
       kSecret},
      {v.Mailroom("HTTP_AUTHORIZATION"), "", "", "",
       v.Help("http: an Authorization header value sent with every request"), kSecret},
      {v.Mailroom("HTTP_ALLOW_PLAIN"), "false", "", "",
       v.Help("http: allow an http:// URL to a network address")},
      {v.Mailroom("HTTP_CA_FILE"), "", "", "",
       v.Help("http: PEM CA that signed the receiver's certificate")},
  };
}

absl::Status ReadHttp(const Env& env, const TransportVars& v, TransportConfig* config) {
  const SettingsTable rows = HttpRows(v);
  HttpSettings& s = config->Mutable<HttpSettings>();
  s.url = env.String(v.Row(rows, "HTTP_URL"));
  s.secret = env.String(v.Row(rows, "HTTP_SECRET"));
  s.authorization = env.String(v.Row(rows, "HTTP_AUTHORIZATION"));
  MAILROOM_ASSIGN_OR_RETURN(s.allow_plain, env.Bool(v.Row(rows, "HTTP_ALLOW_PLAIN")));
  MAILROOM_ASSIGN_OR_RETURN(s.ca_file, env.File(v.Mailroom("HTTP_CA_FILE").c_str()));
  return absl::OkStatus();
}

// Checks an http transport's settings: the receiver's URL, the signing secret, the header.
absl::Status CheckHttp(const Env&, const TransportVars& v, TransportConfig* config) {
  const HttpSettings& s = config->Get<HttpSettings>();
  const std::string http_url_var = v.Mailroom("HTTP_URL");
  // The email's link and code cross to the receiver: in clear only where the operator says.
  if (s.url.empty()) {
    return BadSetting(http_url_var, absl::StrCat(v.RequiredWhen("http"), ": an https:// URL"));
  }
  if (!OneLine(s.url, 2000)) return BadSetting(http_url_var, "must be one line");
  absl::Status url = CheckUrl(
      http_url_var, s.url,
      {{"https", "http"},
       !s.allow_plain,
       absl::StrCat("must start with https:// (http:// only to a loopback address, or with ",
                    v.Mailroom("HTTP_ALLOW_PLAIN"), "=true)"),
       absl::StrCat("send them with ", v.Mailroom("HTTP_AUTHORIZATION"))});
  if (!url.ok()) return url;
  // The secret's form is checked where it is parsed (the transport): only its presence here.
  if (s.secret.empty()) {
    return BadSetting(v.Mailroom("HTTP_SECRET"),
                      absl::StrCat(v.RequiredWhen("http"), " (whsec_...)"));
  }
  if (!OneLine(s.authorization, 4000)) {
    return BadSetting(v.Mailroom("HTTP_AUTHORIZATION"), "must be one line of at most 4000 bytes");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Transport>> MakeHttp(const TransportConfig& config) {
  auto http = HttpTransport::Create(config);
  if (!http.ok()) return http.status();
  return std::unique_ptr<Transport>(*std::move(http));
}

}  // namespace

// No doctor check of its own yet: the receiver is the team's, and a request would be an email.
const TransportEntry kHttpEntry = {
    "http",
    "http (a signed webhook to your own URL)",
    /*reaches_recipients=*/true,
    HttpRows,
    ReadHttp,
    CheckHttp,
    MakeHttp,
    /*doctor=*/nullptr,
};

}  // namespace mailroom
