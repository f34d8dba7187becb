#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace mailroom {

// One Amazon SNS HTTP(S) delivery, as posted to a subscribed endpoint (the JSON body).
struct SnsMessage {
  std::string type;  // Notification | SubscriptionConfirmation | UnsubscribeConfirmation
  std::string message_id;
  std::string token;  // confirmations only
  std::string topic_arn;
  std::string subject;  // Notification only; may be absent
  bool has_subject = false;
  std::string message;
  std::string subscribe_url;  // confirmations only
  std::string timestamp;      // ISO 8601, e.g. 2026-11-23T10:15:00.123Z
  std::string signature_version;
  std::string signature;  // base64
  std::string signing_cert_url;
};

// Parses an SNS delivery body. kInvalidArgument for anything that is not a JSON object with
// the fields its Type needs (as strings); the Type itself is not checked here.
absl::StatusOr<SnsMessage> ParseSnsMessage(const std::string& body);

// The string SNS signs for `m` (AWS: "Verifying the signatures of Amazon SNS messages"):
// "Key\nvalue\n" for Message, MessageId, Subject (if present), Timestamp, TopicArn, Type for a
// Notification; Message, MessageId, SubscribeURL, Timestamp, Token, TopicArn, Type for the two
// confirmations. "" for another Type.
std::string SnsStringToSign(const SnsMessage& m);

// True when `url` is https:// and its host is allowed to serve SNS certificates or
// subscription URLs: `sns.<region>.amazonaws.com` (or `.amazonaws.com.cn`), or an authority
// (`host` or `host:port`) listed in `extra_hosts` (for tests). No user info is accepted.
bool SnsUrlAllowed(const std::string& url, const std::vector<std::string>& extra_hosts);

// Fetches a URL (the signing certificate), returning its body or an error.
using UrlFetcher = std::function<absl::StatusOr<std::string>(const std::string& url)>;

struct SnsVerifierOptions {
  std::vector<std::string> extra_hosts;  // MAILROOM_FEEDBACK_SNS_HOSTS
  std::vector<std::string> topic_arns;   // MAILROOM_FEEDBACK_TOPIC_ARNS ("" any)
  std::string ca_file;                   // trust store for the signing certificate ("" system)
  absl::Duration max_age = absl::Hours(1);
  absl::Duration max_clock_skew = absl::Minutes(5);
};

// Verifies SNS messages: SignatureVersion 1 (SHA1withRSA) or 2 (SHA256withRSA) over
// SnsStringToSign, with the public key of the certificate at SigningCertURL, which must be
// allowed (SnsUrlAllowed), chain to the trust store and be valid now; certificates are
// fetched once per URL and cached (only verified ones). SNS serves its certificate without
// the intermediate that issued it: when the trust store lacks it, the intermediate named by the
// certificate's Authority Information Access (caIssuers, on a host under amazontrust.com or
// in extra_hosts; http is fine, the chain check authenticates it) is fetched with
// `fetch_issuer`, if given. Also rejects a message older than max_age (or from further in the
// future than max_clock_skew) and, when topic_arns is set, a topic not listed. Thread-safe.
class SnsVerifier {
 public:
  SnsVerifier(SnsVerifierOptions options, UrlFetcher fetch,
              std::function<absl::Time()> now = nullptr, UrlFetcher fetch_issuer = nullptr);
  ~SnsVerifier();

  // OK, or kPermissionDenied saying why (never kUnavailable for a forged message); a
  // certificate that cannot be fetched is kUnavailable.
  absl::Status Verify(const SnsMessage& m);

 private:
  struct Key;
  absl::StatusOr<std::shared_ptr<Key>> KeyFor(const std::string& url);

  const SnsVerifierOptions options_;
  const UrlFetcher fetch_;
  const std::function<absl::Time()> now_;
  const UrlFetcher fetch_issuer_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Key>> keys_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mailroom
