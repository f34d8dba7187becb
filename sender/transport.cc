#include "sender/transport.h"

#include "absl/strings/cord.h"

namespace mailroom {

absl::Status ProviderError(absl::string_view message) {
  absl::Status st = absl::UnavailableError(message);
  st.SetPayload(kProviderErrorPayload, absl::Cord("1"));
  return st;
}

bool IsProviderError(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable &&
         status.GetPayload(kProviderErrorPayload).has_value();
}

absl::Status RecipientRejected(absl::string_view message) {
  absl::Status st = absl::InvalidArgumentError(message);
  st.SetPayload(kRecipientRejectedPayload, absl::Cord("1"));
  return st;
}

bool IsRecipientRejected(const absl::Status& status) {
  return status.code() == absl::StatusCode::kInvalidArgument &&
         status.GetPayload(kRecipientRejectedPayload).has_value();
}

}  // namespace mailroom
