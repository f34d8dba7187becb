#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "sender/curl_util.h"
#include "sender/transport.h"

namespace mailroom {

// Amazon SES v2 `SendEmail` (POST /v2/email/outbound-emails) with Raw content, signed with
// SigV4 by libcurl (CURLOPT_AWS_SIGV4 "aws:amz:<region>:ses"). Throttling (429,
// TooManyRequestsException, Throttling, LimitExceeded) and 5xx are kUnavailable; rejections
// (MessageRejected, MailFromDomainNotVerified, BadRequest, AccountSuspended, SendingPaused,
// NotFound, 403) are permanent. `connections` HTTP handles keep their connections alive.
class SesTransport : public Transport {
 public:
  explicit SesTransport(const TransportConfig& config);
  absl::StatusOr<SendResult> Send(const OutgoingEmail& email) override;
  int Concurrency() const override { return static_cast<int>(slots_.size()); }
  std::string Name() const override { return "ses"; }

  // Maps an SES HTTP answer to a Status (exposed for tests).
  static absl::Status ResponseStatus(long http_status, const std::string& error_type,
                                     const std::string& body);

 private:
  struct Slot {
    CurlHandle handle;
    bool busy = false;
  };
  const TransportConfig config_;
  std::string url_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

}  // namespace mailroom
