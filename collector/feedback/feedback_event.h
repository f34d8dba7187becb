#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mailroom {

// The EmailTags the sender puts on every SES message (sender/ses_transport), read back from
// an event's mail.tags.
inline constexpr char kTagJob[] = "mailroom_job";
inline constexpr char kTagGroup[] = "mailroom_group";
inline constexpr char kTagAction[] = "mailroom_action";

// One provider's event about a message: SES's (from a configuration set's event destination,
// `eventType`, or the older identity notifications, `notificationType`) or another provider's
// webhook (provider_events.h), reduced to what mailroom records.
struct FeedbackEvent {
  std::string provider = "ses";  // ses | postmark | sendgrid | mailgun | resend | http
  std::string type;              // Bounce | Complaint | Delivery | Reject
  // The provider's id of the message, as the sender recorded it (deliveries'
  // provider_message_id; SES: mail.messageId), in each form it may have been recorded in.
  std::vector<std::string> message_ids;
  std::string group;    // the message's mailroom_group tag ("" when absent)
  uint64_t job_id = 0;  // the message's mailroom_job tag (0 when absent)
  // Bounced / complained / delivered recipients (SES's Delivery and Reject without any: the
  // message's destination). A delivery's recipient must be one of them for the event to reach it.
  std::vector<std::string> recipients;
  std::string bounce_type;  // Permanent | Transient | Undetermined (Bounce only)
  std::string detail;       // bounce subtype, complaint feedback type or reject reason
};

// Parses the `Message` of an SNS notification carrying an SES event. kInvalidArgument when it
// is not an SES event; kUnimplemented for an SES event type mailroom does not record (Send,
// Open, Click, DeliveryDelay, ...), which the endpoint acknowledges and ignores.
absl::StatusOr<FeedbackEvent> ParseSesEvent(const std::string& message);

}  // namespace mailroom
