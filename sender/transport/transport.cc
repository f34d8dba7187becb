#include "sender/transport/transport.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace mailroom {

void TransportConfig::WrongSettings(const std::string& kind) {
  std::fprintf(stderr, "TransportConfig: the settings asked for are not those of \"%s\"\n",
               kind.c_str());
  std::abort();
}

absl::Status ProviderError(absl::string_view message) {
  absl::Status st = absl::UnavailableError(message);
  st.SetPayload(kProviderErrorPayload, absl::Cord("1"));
  return st;
}

bool IsProviderError(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable &&
         status.GetPayload(kProviderErrorPayload).has_value();
}

absl::Status WithRetryAfter(absl::Status status, std::optional<absl::Duration> wait) {
  if (status.ok() || !wait.has_value()) return status;
  status.SetPayload(kRetryAfterPayload, absl::Cord(absl::StrCat(absl::ToInt64Milliseconds(
                                            std::max(absl::ZeroDuration(), *wait)))));
  return status;
}

absl::Duration WaitAfter(const absl::Status& status, absl::Duration ours, absl::Duration cap) {
  const std::optional<absl::Duration> asked = ProviderRetryAfter(status);
  if (!asked.has_value()) return ours;
  return std::max(ours, std::min(*asked, cap));
}

std::optional<absl::Duration> ProviderRetryAfter(const absl::Status& status) {
  auto payload = status.GetPayload(kRetryAfterPayload);
  int64_t ms = 0;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &ms) || ms < 0) {
    return std::nullopt;
  }
  return absl::Milliseconds(ms);
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

absl::Status MaybeSent(absl::Status cause) {
  cause.SetPayload(kMaybeSentPayload, absl::Cord("1"));
  return cause;
}

bool IsMaybeSent(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kMaybeSentPayload).has_value();
}

absl::Duration AttemptTimeout(const OutgoingEmail& email, absl::Duration transport_timeout) {
  return std::max(absl::Milliseconds(1), std::min(email.timeout, transport_timeout));
}

}  // namespace mailroom
