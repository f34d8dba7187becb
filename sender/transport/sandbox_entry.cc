#include "sender/transport/sandbox_entry.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "sender/transport/outbound_url.h"
#include "sender/transport/sandbox_transport.h"

namespace mailroom {
namespace {

constexpr bool kSecret = true;

SettingsTable SandboxRows(const TransportVars& v) {
  return {
      {v.Mailroom("SANDBOX_DOMAIN"), "sandbox.mailroom.test", "", "",
       v.Help("sandbox: the simulator's domain (bounce@, softbounce@, complaint@, ... at it)")},
      {v.Mailroom("SANDBOX_DIR"), "", "", "",
       v.Help("sandbox: also write each accepted message to this directory (unset: none)")},
      {v.Mailroom("SANDBOX_FEEDBACK_URL"), "", "", "",
       v.Help("sandbox: the collector's /feedback/sandbox URL its events are posted to (unset: "
              "none)")},
      {v.Mailroom("SANDBOX_FEEDBACK_SECRET"), "", "", "",
       v.Help("sandbox: the collector's MAILROOM_FEEDBACK_SANDBOX_SECRET, whsec_..."), kSecret},
      {v.Mailroom("SANDBOX_EVENT_DELAY_MS"), "1000", "0", "600000",
       v.Help("sandbox: wait (ms) after a send before posting its first event")},
  };
}

absl::Status ReadSandbox(const Env& env, const TransportVars& v, TransportConfig* config) {
  const SettingsTable rows = SandboxRows(v);
  SandboxSettings& s = config->Mutable<SandboxSettings>();
  s.domain = absl::AsciiStrToLower(env.String(v.Row(rows, "SANDBOX_DOMAIN")));
  s.dir = env.String(v.Row(rows, "SANDBOX_DIR"));
  s.feedback_url = env.String(v.Row(rows, "SANDBOX_FEEDBACK_URL"));
  s.feedback_secret = env.String(v.Row(rows, "SANDBOX_FEEDBACK_SECRET"));
  MAILROOM_ASSIGN_OR_RETURN(s.event_delay, env.Millis(v.Row(rows, "SANDBOX_EVENT_DELAY_MS")));
  return absl::OkStatus();
}

// Checks a sandbox transport's settings: the simulator's domain, and where its events go.
absl::Status CheckSandbox(const Env&, const TransportVars& v, TransportConfig* config) {
  const SandboxSettings& s = config->Get<SandboxSettings>();
  // A domain name: letters, digits, dashes and dots (the simulator's addresses are matched on it).
  bool domain_ok = !s.domain.empty() && s.domain.size() <= 253 && s.domain.front() != '.' &&
                   s.domain.back() != '.';
  for (char ch : s.domain) {
    if (!(absl::ascii_isalnum(ch) || ch == '-' || ch == '.')) domain_ok = false;
  }
  if (!domain_ok) {
    return BadSetting(v.Mailroom("SANDBOX_DOMAIN"),
                      "must be a domain name such as sandbox.mailroom.test");
  }
  if (s.feedback_url.empty()) return absl::OkStatus();
  const std::string url_var = v.Mailroom("SANDBOX_FEEDBACK_URL");
  if (!OneLine(s.feedback_url, 2000)) return BadSetting(url_var, "must be one line");
  // The events name recipients: in clear only to this machine.
  absl::Status url = CheckUrl(url_var, s.feedback_url,
                              HttpsOrLoopback(absl::StrCat("the events are signed with ",
                                                           v.Mailroom("SANDBOX_FEEDBACK_SECRET"))));
  if (!url.ok()) return url;
  // The secret's form is checked where it is parsed (the transport): only its presence here.
  if (s.feedback_secret.empty()) {
    return BadSetting(v.Mailroom("SANDBOX_FEEDBACK_SECRET"),
                      absl::StrCat("required with ", url_var, " (whsec_...)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Transport>> MakeSandbox(const TransportConfig& config) {
  auto sandbox = SandboxTransport::Create(config, RealClock::Get());
  if (!sandbox.ok()) return sandbox.status();
  return std::unique_ptr<Transport>(*std::move(sandbox));
}

std::vector<DoctorLine> DoctorSandbox(const TransportConfig& config, const DoctorContext&) {
  const SandboxSettings& s = config.Get<SandboxSettings>();
  std::vector<DoctorLine> out = {DoctorLine::Warn(
      "sandbox", absl::StrCat("a provider simulator: no email reaches anyone; recipients at ",
                              s.domain, " choose the answer and the events"))};
  if (s.feedback_url.empty()) {
    out.push_back(
        DoctorLine::Ok("sandbox", "no events are posted (MAILROOM_SANDBOX_FEEDBACK_URL is unset)"));
  } else {
    auto url = ParseOutboundUrl(s.feedback_url);
    out.push_back(
        DoctorLine::Ok("sandbox", absl::StrCat("events are posted to ",
                                               url.ok() ? url->host : std::string("the URL"),
                                               " (not checked: the collector answers them)")));
  }
  return out;
}

}  // namespace

const TransportEntry kSandboxEntry = {
    "sandbox",
    "sandbox (a provider simulator that sends nothing)",
    /*reaches_recipients=*/true,
    SandboxRows,
    ReadSandbox,
    CheckSandbox,
    MakeSandbox,
    DoctorSandbox,
};

}  // namespace mailroom
