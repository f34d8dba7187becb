#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"
#include "sender/config/config.h"
#include "sender/ses/ses_account.h"
#include "sender/transport/http_call.h"

namespace mailroom {

// One finding of `sender doctor`: a check passed (kOk), something works but is likely to hurt
// (kWarn), or the sender cannot do its work as configured (kFail). `check` names what was
// looked at ("templates", "smtp", "ses", "collector", ...); `text` says what was seen, on one
// line, never with a secret (passwords, tokens, keys and client secrets are only used).
struct DoctorLine {
  enum class Level { kOk, kWarn, kFail };
  Level level = Level::kOk;
  std::string check;
  std::string text;
};

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

// The file directory: it exists (or can be created) and a file can be created in it.
std::vector<DoctorLine> CheckFileTransport(const SenderConfig& config);

// One SMTP session as the transport opens them (TLS, certificate verification, AUTH by password
// or with an XOAUTH2 token fetched from the configured source), ending with NOOP: no mail.
std::vector<DoctorLine> CheckSmtpTransport(const SenderConfig& config);

// SES GetAccount signed like a send: the credentials, region and endpoint, then the account's
// state (JudgeSesAccount); then ListEmailIdentities for MAILROOM_FROM (JudgeSesIdentity; a
// refusal, such as a policy without ses:ListEmailIdentities, is a warning).
std::vector<DoctorLine> CheckSesTransport(const SenderConfig& config);

// What GetAccount's answer means for the sender: sending disabled, enforcement SHUTDOWN, the
// sandbox and a used-up 24-hour quota are problems; PROBATION and a quota 90 % used are
// warnings; otherwise one ok line with the account's limits.
std::vector<DoctorLine> JudgeSesAccount(const SesAccountInfo& info);

// Whether ListEmailIdentities' answer (`list`) lets `address` send: the address or its domain
// listed with SendingEnabled is ok; listed and not verified, or not listed at all, is a problem
// (SES refuses such mail); not among a first page that has more is a warning.
DoctorLine JudgeSesIdentity(absl::string_view list, const std::string& address);

// A provider transport (postmark, sendgrid, mailgun, resend): the key proved by the provider's
// cheapest authenticated read (Postmark GET /server, SendGrid GET /v3/scopes, Mailgun GET
// /v4/domains/<domain>, Resend GET /domains), judged by JudgeProviderCheck; then one line on
// what cannot be checked without sending (the sender identity or domain).
std::vector<DoctorLine> CheckProviderTransport(const SenderConfig& config);

// What the check read's answer means for provider `kind` (`where`: the API's host): 401/403
// is refused credentials (Resend's restricted_api_key, a sending-only key, is accepted; for
// Mailgun a domain sending key cannot read its domain, so 401/403 is a warning); SendGrid's
// key must have the mail.send scope; Mailgun's domain must exist (404: a problem) and be
// active.
DoctorLine JudgeProviderCheck(const std::string& kind, const HttpAnswer& answer,
                              const std::string& where, const std::string& mailgun_domain);

// The collector: reachable, TLS as configured, and the credential accepted for the consumer
// group (GetUsage, as the sender's start-up calls it).
std::vector<DoctorLine> CheckCollector(const SenderConfig& config);

// The sandbox transport: what it does instead of sending (a warning: nobody receives anything)
// and where its events go (the feedback URL's host, or none).
std::vector<DoctorLine> CheckSandboxTransport(const SenderConfig& config);

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
