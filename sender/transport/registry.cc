#include "sender/transport/registry.h"

#include "absl/strings/str_cat.h"
#include "sender/transport/file_entry.h"
#include "sender/transport/http_entry.h"
#include "sender/transport/mailgun_transport.h"
#include "sender/transport/postmark_transport.h"
#include "sender/transport/resend_transport.h"
#include "sender/transport/sandbox_entry.h"
#include "sender/transport/sendgrid_transport.h"
#include "sender/transport/ses_entry.h"
#include "sender/transport/smtp_entry.h"

namespace mailroom {

const std::vector<const TransportEntry*>& TransportEntries() {
  static const auto* const kEntries = new std::vector<const TransportEntry*>{
      &kFileEntry,     &kSmtpEntry,    &kSesEntry,    &kHttpEntry,    &kPostmarkEntry,
      &kSendgridEntry, &kMailgunEntry, &kResendEntry, &kSandboxEntry,
  };
  return *kEntries;
}

const TransportEntry* FindTransportEntry(absl::string_view kind) {
  for (const TransportEntry* e : TransportEntries()) {
    if (kind == e->kind) return e;
  }
  return nullptr;
}

namespace {

// "a, b, c or d" of each entry's `name`.
template <typename Name>
std::string Listed(Name name) {
  const std::vector<const TransportEntry*>& entries = TransportEntries();
  std::string out;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) absl::StrAppend(&out, i + 1 == entries.size() ? " or " : ", ");
    absl::StrAppend(&out, name(*entries[i]));
  }
  return out;
}

}  // namespace

std::string TransportKinds() {
  return Listed([](const TransportEntry& e) { return e.kind; });
}

SettingsTable TransportSettingsRows(const TransportVars& vars) {
  SettingsTable rows;
  if (!vars.failover()) {
    rows.push_back({"MAILROOM_TRANSPORT", "file", "", "",
                    Listed([](const TransportEntry& e) { return e.listed_as; })});
  }
  for (const TransportEntry* e : TransportEntries()) {
    for (SettingSpec& s : e->settings(vars)) rows.push_back(std::move(s));
  }
  return rows;
}

absl::Status LoadTransportConfig(const Env& env, const TransportVars& vars, const std::string& kind,
                                 TransportConfig* config) {
  config->kind = kind;
  const TransportEntry* chosen = FindTransportEntry(kind);
  for (const TransportEntry* e : TransportEntries()) {
    if (e->read == nullptr) continue;
    TransportConfig scratch;
    absl::Status st = e->read(env, vars, e == chosen ? config : &scratch);
    if (!st.ok()) return st;
  }
  if (chosen == nullptr) {
    return BadSetting(vars.Mailroom("TRANSPORT"),
                      absl::StrCat("\"", kind, "\" is not ", TransportKinds()));
  }
  return chosen->check(env, vars, config);
}

}  // namespace mailroom
