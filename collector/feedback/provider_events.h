#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collector/feedback/feedback_event.h"

namespace mailroom {

// One event of a provider's feedback webhook, reduced to what mailroom records, with the id
// that makes recording it idempotent.
struct ProviderEvent {
  // The provider's id of this event (Postmark's bounce ID, SendGrid's sg_event_id, Mailgun's
  // signature token, Resend's and mailroom's webhook id), unique per provider.
  std::string id;
  // When the provider says it happened (Postmark's, SendGrid's and Mailgun's own times, checked
  // against the replay window where nothing signs a timestamp); InfinitePast when it says not.
  absl::Time at = absl::InfinitePast();
  // event.type "" for an event mailroom does not record (opened, clicked, deferred, ...): it is
  // acknowledged and ignored.
  FeedbackEvent event;
};

// The custom values the sender may attach to a message (Postmark's Metadata, SendGrid's
// custom_args, Mailgun's user-variables, Resend's tags), read back like SES's tags:
// kTagGroup and kTagJob.

// Postmark's webhooks, one JSON object per request: RecordType Bounce (Type HardBounce and
// BadEmailAddress: Permanent; SoftBounce, Transient and DnsError: Transient; other types are
// not bounces of the address and are ignored), SpamComplaint and Delivery; others ignored.
// kInvalidArgument for a body that is not such an object.
absl::StatusOr<ProviderEvent> ParsePostmark(const std::string& body);

// SendGrid's Event Webhook: a JSON array of events. bounce (type "bounce": Permanent;
// "blocked": Transient), spamreport, delivered; others ignored. sg_message_id is matched
// whole and by its part before the first '.', the X-Message-Id the API answered.
absl::StatusOr<std::vector<ProviderEvent>> ParseSendgrid(const std::string& body);

// The signature object of a Mailgun webhook body.
struct MailgunSignature {
  std::string timestamp, token, signature;
};
// Mailgun's webhooks: {"signature": {...}, "event-data": {...}}. failed with severity permanent
// (reason "old", given up after retrying: Transient; others Permanent), complained, delivered;
// temporary failures (Mailgun retries them itself) and other events ignored. The message's
// Message-ID is matched bare and in angle brackets (the form the API answers). The event's id
// is the signature's token: Mailgun signs timestamp and token, not the body, so a token may be
// used once only.
absl::StatusOr<ProviderEvent> ParseMailgun(const std::string& body, MailgunSignature* signature);

// Resend's webhooks: {"type": "email.bounced", "created_at": ..., "data": {...}}.
// email.bounced (data.bounce.type Permanent, Transient or Undetermined; Permanent when it says
// none), email.complained, email.delivered; others ignored. `id` is the svix-id header.
absl::StatusOr<ProviderEvent> ParseResend(const std::string& body, const std::string& id);

// The delivery reports of a team's own service behind the http transport (the shape is in
// docs/configuration.md, "Delivery reports"): {"type": "email.bounced" | "email.complained" |
// "email.delivered", "message_id", "job_id", "group", "recipients", "bounce_type":
// "permanent" | "transient", "reason"}. `id` is the webhook-id header.
absl::StatusOr<ProviderEvent> ParseHttpReport(const std::string& body, const std::string& id);

}  // namespace mailroom
