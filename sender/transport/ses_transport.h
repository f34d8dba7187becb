#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "common/http/curl_handle.h"
#include "sender/transport/curl_multi_loop.h"
#include "sender/transport/transport.h"

namespace mailroom {

// The ses transport's own settings.
struct SesSettings {
  std::string region = "us-east-1";
  std::string endpoint;  // default https://email.<region>.amazonaws.com
  std::string access_key_id;
  std::string secret_access_key;  // secret
  std::string session_token;      // secret
  std::string configuration_set;
};

// What SES v2 GetAccount says about the account's sending (the fields the sender uses).
struct SesAccountInfo {
  bool sending_enabled = true;     // SendingEnabled
  std::string enforcement_status;  // EnforcementStatus: HEALTHY, PROBATION, SHUTDOWN
  bool production_access = true;   // ProductionAccessEnabled (false: sandbox)
  double max_send_rate = 0;        // SendQuota.MaxSendRate, emails/s (0: not given)
  double max_24_hour_send = -1;    // SendQuota.Max24HourSend (-1: unlimited / not given)
  double sent_last_24_hours = 0;   // SendQuota.SentLast24Hours

  // Sending must pause: SendingEnabled=false or EnforcementStatus SHUTDOWN.
  bool paused() const { return !sending_enabled || enforcement_status == "SHUTDOWN"; }
};

// Parses a GetAccount response body; kInvalidArgument when it is not a JSON object.
absl::StatusOr<SesAccountInfo> ParseSesAccount(absl::string_view body);

// GET {endpoint}/v2/email/account, signed with SigV4 like SendEmail (libcurl). Errors are
// SesTransport::ResponseStatus's / CurlStatus's; credentials never appear in them.
absl::StatusOr<SesAccountInfo> FetchSesAccount(const TransportConfig& config);

// Amazon SES v2 `SendEmail` (POST /v2/email/outbound-emails) with Raw content, signed with
// SigV4 by libcurl (CURLOPT_AWS_SIGV4 "aws:amz:<region>:ses"). Throttling (429,
// TooManyRequestsException, Throttling, LimitExceeded) and 5xx are kUnavailable; rejections
// (MessageRejected, MailFromDomainNotVerified, BadRequest, AccountSuspended, SendingPaused,
// NotFound, 403) are permanent. `connections` HTTP connections are kept alive; the transfers
// run on one event-loop thread (CurlMultiLoop).
// Every message carries EmailTags: the email's own tags (mailroom_job, mailroom_action) and
// mailroom_group (TransportConfig::group), which come back in SES events (mail.tags); the
// MessageId SES answers is the SendResult's provider_id and feedback_id.
class SesTransport : public Transport {
 public:
  explicit SesTransport(const TransportConfig& config);
  absl::StatusOr<SendResult> Send(const OutgoingEmail& email) override;
  int Concurrency() const override { return handles_.size(); }
  std::string Name() const override { return "ses"; }

  // Maps an SES HTTP answer to a Status (exposed for tests).
  static absl::Status ResponseStatus(long http, const std::string& header_type,
                                     const std::string& body);

  // The SES v2 API's URL for `path` (e.g. "/v2/email/account") under `config`'s endpoint.
  static std::string ApiUrl(const TransportConfig& config, const std::string& path);
  // One SES v2 API call on handle `c`, signed with `config`'s credentials (SigV4) and bounded
  // by its timeouts (the whole call by `timeout` too, when shorter): a POST of the JSON
  // `*body`, or a GET when there is none. Returns the response body, or the failure mapped by
  // HttpTransferStatus (marked MaybeSent when the request may have been acted on) /
  // ResponseStatus. The body goes through a CurlBody (libcurl never sends it twice by itself)
  // and its SHA-256 in x-amz-content-sha256 (what libcurl then signs). The transfer runs on
  // `loop`, or on the calling thread (curl_easy_perform) when it is null.
  static absl::StatusOr<std::string> Call(CURL* c, const TransportConfig& config,
                                          const std::string& url, std::optional<std::string> body,
                                          CurlMultiLoop* loop = nullptr,
                                          absl::Duration timeout = absl::InfiniteDuration());

 private:
  const TransportConfig config_;
  const SesSettings& ses_ = config_.Get<SesSettings>();
  std::string url_;
  CurlHandlePool handles_;  // one per kept-alive HTTP connection
  CurlMultiLoop loop_;      // destroyed first: no transfer outlives its handle
};

}  // namespace mailroom
