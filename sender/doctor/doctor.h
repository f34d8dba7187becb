#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"
#include "sender/config/config.h"
#include "sender/transport/ses_entry.h"
#include "sender/transport/transport_entry.h"

namespace mailroom {

// "ok   smtp: ...", "warn ses: ...", "FAIL templates: ..." (controls in `text` become spaces).
std::string FormatDoctorLine(const DoctorLine& line);

// MAILROOM_FROM (a mailbox the renderer accepts; a placeholder domain with a real transport is
// a warning) and MAILROOM_LINK_BASE_URL (a host; http:// to another machine, a query or a
// fragment, or the default with a real transport are warnings).
std::vector<DoctorLine> CheckMessageSettings(const SenderConfig& config);

// Loads the templates as the sender does (built in, then MAILROOM_TEMPLATE_DIR) and reports
// every problem, not only the first: a file that does not parse, a locale's missing part, a
// misnamed file, a subject that uses the code. Then renders a sample job for every action and every
// locale through the renderer (MIME included): a failure is a problem; a rendering that shows
// neither the link, the token nor the code, an empty subject, or a locale with templates for one
// action only are warnings. Time from `clock`.
std::vector<DoctorLine> CheckTemplates(const SenderConfig& config, Clock* clock);

// The configured transport's own check, its registry entry's (sender/transport/registry.h):
// for file, the directory exists (or can be created) and a file can be created in it; for smtp,
// one session as the transport opens them, ending with NOOP; for ses, GetAccount and the
// sending identity (JudgeSesAccount, JudgeSesIdentity); for a provider, its cheapest
// authenticated read (JudgeProviderCheck); for sandbox, what it does instead of sending. None
// for http (a request would be an email) or a kind the registry does not know.
std::vector<DoctorLine> CheckTransport(const SenderConfig& config);

// The file transport's and the sandbox transport's checks, whatever the configured kind.
std::vector<DoctorLine> CheckFileTransport(const SenderConfig& config);
std::vector<DoctorLine> CheckSandboxTransport(const SenderConfig& config);

// The collector: reachable, TLS as configured, and the credential accepted for the consumer
// group (GetUsage, as the sender's start-up calls it).
std::vector<DoctorLine> CheckCollector(const SenderConfig& config);

// What kind of failure a transport's `error` is, as the engine tells them apart: "recipient
// rejected (permanent; the address is suppressed)", "provider error (the breaker holds every
// job)", "maybe sent (retried once)", "temporary (retried)", "permanent (the job fails)".
std::string SendErrorClass(const absl::Status& error);

// `sender doctor --send-test ADDRESS`: renders the sample job of the template check (an
// activation in the default locale) addressed to `address`, sends it through the configured
// transport as the engine would, and prints what happened on one line: "ok   send-test:
// accepted by TRANSPORT, provider message id ID" or "FAIL send-test: refused by TRANSPORT:
// CLASS: ERROR". Returns 0 when accepted, 1 when refused, 2 when the address, the templates or
// the transport's configuration cannot be used (printed as "FAIL send-test: ..."). No secret is
// printed. Time from `clock`.
int RunSendTest(const SenderConfig& config, const std::string& address, std::FILE* out,
                Clock* clock);

// Runs every check on a loaded configuration, printing each line to `out` as it is known and a
// closing count. Returns the exit status: 0 without problems (warnings allowed), 1 otherwise.
int RunDoctor(const SenderConfig& config, std::FILE* out);

}  // namespace mailroom
