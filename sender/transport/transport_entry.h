#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/env.h"
#include "sender/transport/transport.h"

namespace mailroom {

// The names of one transport's variables: the primary's (MAILROOM_SMTP_URL, AWS_ACCESS_KEY_ID,
// ...) or the secondary's, the same names after MAILROOM_FAILOVER_ (MAILROOM_FAILOVER_SMTP_URL,
// MAILROOM_FAILOVER_AWS_ACCESS_KEY_ID, ...).
class TransportVars {
 public:
  explicit TransportVars(bool failover) : failover_(failover) {}
  // MAILROOM_<suffix>, or MAILROOM_FAILOVER_<suffix>.
  std::string Mailroom(absl::string_view suffix) const;
  // AWS_<suffix>, or MAILROOM_FAILOVER_AWS_<suffix>.
  std::string Aws(absl::string_view suffix) const;
  // A settings row's help line under these names: `help`, or "secondary <help>".
  std::string Help(absl::string_view help) const;
  // The row of Mailroom(suffix) in `rows` (aborts when there is none, as FindSetting does).
  const SettingSpec& Row(const SettingsTable& rows, absl::string_view suffix) const;
  // "required when MAILROOM_TRANSPORT=<kind>" (or MAILROOM_FAILOVER_TRANSPORT).
  std::string RequiredWhen(absl::string_view kind) const;
  bool failover() const { return failover_; }

 private:
  bool failover_;
};

// One finding of `sender doctor`: a check passed (kOk), something works but is likely to hurt
// (kWarn), or the sender cannot do its work as configured (kFail). `check` names what was
// looked at ("templates", "smtp", "ses", "collector", ...); `text` says what was seen, on one
// line, never with a secret (passwords, tokens, keys and client secrets are only used).
struct DoctorLine {
  enum class Level { kOk, kWarn, kFail };
  Level level = Level::kOk;
  std::string check;
  std::string text;

  static DoctorLine Ok(std::string check, std::string text) {
    return {Level::kOk, std::move(check), std::move(text)};
  }
  static DoctorLine Warn(std::string check, std::string text) {
    return {Level::kWarn, std::move(check), std::move(text)};
  }
  static DoctorLine Fail(std::string check, std::string text) {
    return {Level::kFail, std::move(check), std::move(text)};
  }
};

// The longest one network check of the doctor may take: a doctor that hangs is no help.
inline constexpr absl::Duration kDoctorCheckTimeout = absl::Seconds(15);

// "smtp://user:pw@host:587/x" -> "host:587": what a doctor line may show of a URL.
std::string HostOf(absl::string_view url);

// What a transport's doctor check is told besides its configuration.
struct DoctorContext {
  std::string from_address;  // MAILROOM_FROM's bare address, "" when it does not parse
};

// One kind of transport, everything about it in one place: the registry (registry.h) lists
// them, and MakeTransport, the configuration loader and `sender doctor` find a kind there.
// Each entry is a constant defined beside its transport (smtp_entry.cc, ...).
struct TransportEntry {
  const char* kind;  // MAILROOM_TRANSPORT's value: "smtp"
  // How MAILROOM_TRANSPORT's help line names it: "smtp", "http (a signed webhook to ...)".
  const char* listed_as;
  // Whether its messages reach recipients (false for the file transport: the doctor does not
  // warn about placeholder domains or links to this machine).
  bool reaches_recipients;
  // Its settings' rows under `vars`' names (name, default, range, secret, help): the sender's
  // settings table (sender/config/settings.cc) and `sender --help` show them, and
  // docs/configuration_test checks docs/configuration.md against them.
  SettingsTable (*settings)(const TransportVars& vars);
  // Reads its variables (named by `vars`, through its rows) into `config`'s settings. Called
  // for every registered transport whatever the kind (a malformed value of any transport's
  // variable stops the sender), with a scratch `config` but for the chosen kind. Errors name
  // the variable, never a secret's value. Null when it reads nothing before it is chosen.
  absl::Status (*read)(const Env& env, const TransportVars& vars, TransportConfig* config);
  // For the chosen kind, after every read: checks its settings (and reads what only it reads).
  // InvalidArgument naming the variable, never a secret's value.
  absl::Status (*check)(const Env& env, const TransportVars& vars, TransportConfig* config);
  // Builds the transport from a checked `config` (see MakeTransport).
  absl::StatusOr<std::unique_ptr<Transport>> (*make)(const TransportConfig& config);
  // `sender doctor`'s check of the transport as configured: one line per finding, no secret.
  // Null for a kind without one (http); the doctor then reports no line for it.
  std::vector<DoctorLine> (*doctor)(const TransportConfig& config, const DoctorContext& context);
};

// --- What the entries' checks share --------------------------------------------------------

// InvalidArgument "<var>: <what>".
absl::Status BadSetting(absl::string_view var, absl::string_view what);

// One line of printable text (UTF-8 allowed), at most `max` bytes: no CR, LF or other controls.
bool OneLine(const std::string& s, size_t max);

// Printable ASCII without spaces, 1 to `max` bytes: what may go into a header as it is.
bool HeaderToken(const std::string& s, size_t max);

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
absl::Status CheckUrl(const std::string& var, const std::string& url, const UrlRule& rule);

// An https:// URL (http:// only to a loopback address) that a secret crosses to; `credentials`
// says which setting holds that secret.
UrlRule HttpsOrLoopback(std::string credentials);

}  // namespace mailroom
