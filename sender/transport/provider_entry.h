#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/env.h"
#include "sender/transport/http_call.h"
#include "sender/transport/provider_transport.h"
#include "sender/transport/transport_entry.h"

namespace mailroom {

// What one provider transport's registry entry is made of; ProviderEntry makes the entry, the
// same for the four (postmark, sendgrid, mailgun, resend). Defined as a constant in the
// provider's .cc file, beside its ProviderApi.
struct ProviderInfo {
  const char* kind;        // MAILROOM_TRANSPORT's value: "postmark"
  const ProviderApi* api;  // its HTTP API (the transport, the doctor's check request)
  // The API key's and the base URL's variables after MAILROOM_ (or MAILROOM_FAILOVER_), and
  // their rows' help lines.
  const char* key_var;  // "POSTMARK_SERVER_TOKEN"
  const char* key_help;
  const char* url_var;  // "POSTMARK_API_URL"
  const char* url_help;
  const char* credential;  // what the doctor calls the key: "server token", "API key"
  // Its own settings beyond the key and the URL: their rows (between those two), and their
  // reading and checks after the key's and the URL's. Null when it has none.
  SettingsTable (*more_rows)(const TransportVars& vars);
  absl::Status (*load_more)(const Env& env, const TransportVars& vars, ProviderSettings* settings);
  // The provider's own reading of the doctor's check answer, before the shared one (401/403 is
  // refused credentials, another status outside 2xx unexpected, 2xx accepted): a line, or
  // nullopt to leave the answer to the shared reading. Null when it has none.
  std::optional<DoctorLine> (*judge)(const OutboundAnswer& answer, const std::string& where,
                                     const ProviderSettings& settings);
  const char* unchecked;  // what the doctor cannot check without sending
};

namespace provider_entry_internal {
SettingsTable Rows(const ProviderInfo& p, const TransportVars& v);
absl::Status Load(const ProviderInfo& p, const Env& env, const TransportVars& v,
                  TransportConfig* config);
std::vector<DoctorLine> Doctor(const ProviderInfo& p, const TransportConfig& config);
}  // namespace provider_entry_internal

// What the check read's answer (`answer`, from `where`: the API's host) means for provider `p`:
// its own judgement first (ProviderInfo::judge), then 401/403 is refused credentials, another
// status outside 2xx unexpected, and 2xx the credential accepted.
DoctorLine JudgeProviderCheck(const ProviderInfo& p, const OutboundAnswer& answer,
                              const std::string& where, const ProviderSettings& settings);

// The registry entry of the provider transport `kInfo`: its settings are its key (required,
// printable ASCII without spaces, at most 1000 bytes, never shown), its base URL (https://, or
// http:// to a loopback address: the key crosses to it) and its own (ProviderInfo::more_rows);
// the transport is a ProviderTransport of its API; the doctor check is the provider's cheapest
// authenticated read (ProviderApi::check_request) judged by JudgeProviderCheck, then one line
// on what cannot be checked without sending.
template <const ProviderInfo& kInfo>
constexpr TransportEntry ProviderEntry() {
  return {
      kInfo.kind,
      kInfo.kind,
      /*reaches_recipients=*/true,
      [](const TransportVars& v) { return provider_entry_internal::Rows(kInfo, v); },
      /*read=*/nullptr,
      [](const Env& env, const TransportVars& v, TransportConfig* config) {
        return provider_entry_internal::Load(kInfo, env, v, config);
      },
      [](const TransportConfig& config) -> absl::StatusOr<std::unique_ptr<Transport>> {
        return std::unique_ptr<Transport>(new ProviderTransport(config, *kInfo.api));
      },
      [](const TransportConfig& config, const DoctorContext&) {
        return provider_entry_internal::Doctor(kInfo, config);
      },
  };
}

}  // namespace mailroom
