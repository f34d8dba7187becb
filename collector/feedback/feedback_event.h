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

// One SES event (from a configuration set's event destination, `eventType`, or the older
// identity notifications, `notificationType`), reduced to what mailroom records.
struct FeedbackEvent {
  std::string type;                     // Bounce | Complaint | Delivery | Reject
  std::string ses_message_id;           // mail.messageId
  std::string group;                    // mail.tags.mailroom_group ("" when absent)
  uint64_t job_id = 0;                  // mail.tags.mailroom_job (0 when absent)
  std::vector<std::string> recipients;  // bounced / complained / delivered recipients
  std::string bounce_type;              // Permanent | Transient | Undetermined (Bounce only)
  std::string detail;                   // bounce subtype, complaint feedback type or reject reason
};

// Parses the `Message` of an SNS notification carrying an SES event. kInvalidArgument when it
// is not an SES event; kUnimplemented for an SES event type mailroom does not record (Send,
// Open, Click, DeliveryDelay, ...), which the endpoint acknowledges and ignores.
absl::StatusOr<FeedbackEvent> ParseSesEvent(const std::string& message);

}  // namespace mailroom
