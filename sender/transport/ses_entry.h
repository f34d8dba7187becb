#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "sender/transport/ses_transport.h"
#include "sender/transport/transport_entry.h"

namespace mailroom {

// The ses transport (MAILROOM_TRANSPORT=ses): its MAILROOM_SES_* and AWS_* settings
// (SesSettings), its construction and its doctor check: SES GetAccount signed like a send (the
// credentials, region and endpoint), then the account's state (JudgeSesAccount); then
// ListEmailIdentities for MAILROOM_FROM (JudgeSesIdentity; a refusal, such as a policy without
// ses:ListEmailIdentities, is a warning).
extern const TransportEntry kSesEntry;

// What GetAccount's answer means for the sender: sending disabled, enforcement SHUTDOWN, the
// sandbox and a used-up 24-hour quota are problems; PROBATION and a quota 90 % used are
// warnings; otherwise one ok line with the account's limits.
std::vector<DoctorLine> JudgeSesAccount(const SesAccountInfo& a);

// Whether ListEmailIdentities' answer (`list`) lets `address` send: the address or its domain
// listed with SendingEnabled is ok; listed and not verified, or not listed at all, is a problem
// (SES refuses such mail); not among a first page that has more is a warning.
DoctorLine JudgeSesIdentity(absl::string_view list, const std::string& address);

}  // namespace mailroom
