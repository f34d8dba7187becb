#pragma once

#include <any>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace mailroom {

// What a message was made of, for transports that send it as fields rather than as MIME
// (http): set by the Renderer from the job and its templates.
struct EmailContent {
  uint64_t job_id = 0;
  std::string action;  // "activation", "password_recovery"
  int attempt = 1;     // the delivery try: 1 first, 2 after one RETRY outcome (failures + 1)
  std::string from;    // the From header's mailbox: "Name <addr>" or "addr"
  std::string subject, text, html;
  std::string locale;  // the job's locale tag (normalised, e.g. "de-AT"), "" for none
  absl::Time expires_at = absl::InfinitePast();  // when the token stops being accepted
};

// A rendered message ready to go: envelope plus the full RFC 5322 bytes (CRLF line endings).
struct OutgoingEmail {
  std::string from_address;  // envelope sender (bare address)
  std::string to_address;    // envelope recipient (bare address, validated)
  std::string mime;          // the message
  std::string message_id;    // without angle brackets
  // Provider tags (SES EmailTags: name, value; letters, digits, '_' and '-' only): the job
  // id and action, so that SES feedback can name the job.
  std::vector<std::pair<std::string, std::string>> tags{};
  // The longest this attempt may take, when shorter than the transport's own timeout (the
  // time left on the job's lease, less the margin to report the outcome).
  absl::Duration timeout = absl::InfiniteDuration();
  EmailContent content{};
};

// What a transport reports for a delivered message.
struct SendResult {
  std::string provider_id;  // SES MessageId, SMTP reply text, or the written file's path
  // The id provider feedback names the message by (SES MessageId), reported to the collector
  // with the SENT outcome; "" when the transport has none.
  std::string feedback_id{};
};

// One way of delivering messages. Send is thread-safe and may run concurrently from up to
// Concurrency() threads.
//
// Every failure is one of two kinds, and the difference decides what becomes of the job:
//  * About *this message or recipient* (SMTP 4xx/5xx on RCPT or DATA such as
//    "550 5.1.1 <x>: user unknown", SES MessageRejected/BadRequest): kUnavailable when a retry
//    may succeed (4xx, SES throttling), otherwise kInvalidArgument. The job alone is retried
//    (counted) or failed.
//  * About *the provider or our configuration*: nothing could be delivered to anyone right now
//    (connection refused, DNS, timeouts, certificate/TLS/STARTTLS failures, SMTP 421/454 and
//    AUTH refusals 530/534/535/538, MAIL FROM refused, SES 401/403, signature and clock-skew
//    errors, SendingPaused, AccountSuspended, MailFromDomainNotVerified, SES 5xx). These are
//    built by ProviderError(): code kUnavailable with the payload kProviderErrorPayload, and
//    IsProviderError() tells them apart. The engine never fails or charges a job for one: it
//    opens its circuit breaker and hands the job back uncounted.
// A permanent per-recipient failure that says the *address* is bad (SMTP 5xx with an enhanced
// status 5.1.x on RCPT: "550 5.1.1 user unknown", 5.1.2 bad domain, 5.1.3 bad syntax, 5.1.6
// moved, 5.1.10 null MX) is built by RecipientRejected(): kInvalidArgument with the payload
// kRecipientRejectedPayload, told apart by IsRecipientRejected(). The engine fails the job and
// asks the collector to suppress the address (JobOutcome.suppress_recipient).
// A failure after the request reached the provider and before its answer (an SES request
// sent and then a timeout, an empty reply or a broken connection with no HTTP status or a
// 2xx one; an SMTP message sent in full after DATA and no final reply) may have been
// accepted: MaybeSent() marks such a status (any code, payload kMaybeSentPayload) and
// IsMaybeSent() tells it. The engine never refunds its budget slot: it was charged because
// the provider may bill it (see Engine for what becomes of the job).
// Messages carry the server's own reply text (SMTP reply line, SES error type and message),
// never credentials.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual absl::StatusOr<SendResult> Send(const OutgoingEmail& email) = 0;
  virtual int Concurrency() const = 0;
  virtual std::string Name() const = 0;
};

// Configuration of one transport: the settings every transport shares, and the kind's own.
// Carries secrets (passwords, API keys): never log it.
struct TransportConfig {
  // The registry's name of the transport (sender/transport/registry.h): "file", "smtp", ...
  std::string kind = "file";
  int connections = 4;  // parallel sends (and SMTP connections / HTTP handles)
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration timeout = absl::Seconds(30);
  std::string group;  // the consumer group, sent with every message where the provider can tag

  // The kind's own settings: one struct per transport, declared beside it (FileSettings,
  // SmtpSettings, SesSettings, HttpSettings, ProviderSettings, SandboxSettings). Get returns
  // the settings of type S, or S's defaults when the configuration holds none of that type (a
  // configuration of another kind has none of S's settings: an smtp one has no HTTP URL).
  template <typename S>
  const S& Get() const {
    if (const S* s = std::any_cast<S>(&settings_)) return *s;
    static const S* const kDefaults = new S();
    return *kDefaults;
  }
  // The settings of type S to change, set to S's defaults first when none are set. Asking for
  // another transport's settings than those set is a programming error and aborts.
  template <typename S>
  S& Mutable() {
    if (!settings_.has_value()) settings_ = S();
    S* s = std::any_cast<S>(&settings_);
    if (s == nullptr) WrongSettings(kind);
    return *s;
  }
  // Sets the settings to `s` (replacing any, of any type).
  template <typename S>
  S& Set(S s = S()) {
    settings_ = std::move(s);
    return *std::any_cast<S>(&settings_);
  }
  // Whether the settings set are of type S.
  template <typename S>
  bool Holds() const {
    return std::any_cast<S>(&settings_) != nullptr;
  }

 private:
  [[noreturn]] static void WrongSettings(const std::string& kind);

  std::any settings_;
};

// The payload type URL that marks a permanent rejection of the recipient's address.
inline constexpr char kRecipientRejectedPayload[] = "type.mailroom.dev/mailroom.RecipientRejected";
// A permanent rejection of the recipient's address (see Transport): kInvalidArgument + payload.
absl::Status RecipientRejected(absl::string_view message);
// True for statuses built by RecipientRejected().
bool IsRecipientRejected(const absl::Status& status);

// The payload type URL that marks a send that may have reached the provider (see Transport).
inline constexpr char kMaybeSentPayload[] = "type.mailroom.dev/mailroom.MaybeSent";
// `cause` marked as a send that may have reached the provider (code and message kept).
absl::Status MaybeSent(absl::Status cause);
// True for statuses marked by MaybeSent().
bool IsMaybeSent(const absl::Status& status);
// The timeout of one attempt at `email`: the transport's own, or less (OutgoingEmail::timeout),
// and at least 1 ms (libcurl reads 0 as no timeout).
absl::Duration AttemptTimeout(const OutgoingEmail& email, absl::Duration transport_timeout);

// The payload type URL that marks a provider-wide failure (its value is unused).
inline constexpr char kProviderErrorPayload[] = "type.mailroom.dev/mailroom.ProviderError";

// A failure of the provider or of our configuration (see Transport): kUnavailable + payload.
absl::Status ProviderError(absl::string_view message);
// True for statuses built by ProviderError().
bool IsProviderError(const absl::Status& status);

// The payload type URL of the wait a provider asked for (its HTTP Retry-After, or SendGrid's
// X-RateLimit-Reset), in milliseconds as decimal text.
inline constexpr char kRetryAfterPayload[] = "type.mailroom.dev/mailroom.RetryAfter";
// `status` with the provider's wait attached (unchanged when `wait` is nullopt or OK status).
absl::Status WithRetryAfter(absl::Status status, std::optional<absl::Duration> wait);
// The wait the provider asked for with `status`, if it asked.
std::optional<absl::Duration> ProviderRetryAfter(const absl::Status& status);
// How long to wait after `status` (the breaker's probe, a message's retry): `ours`, or the
// provider's wait when it asked for a longer one, but never more than `cap` (a provider's
// header can slow mailroom down to its slowest pace, never stop it for longer).
absl::Duration WaitAfter(const absl::Status& status, absl::Duration ours, absl::Duration cap);

}  // namespace mailroom
