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
// subscription URLs: `sns.<region>.amazonaws.com`, or `sns.cn-<...>.amazonaws.com.cn`, where
// <region> has the form of an AWS region (`us-east-1`, `us-gov-west-1`, `ap-southeast-3`: two
// letters, words, a number), or an authority (`host` or `host:port`) listed in `extra_hosts`
// (for tests). No user info, no port on an SNS host. `sns.s3.amazonaws.com` and other S3 (or
// any other service's) virtual hosts are not SNS hosts.
bool SnsUrlAllowed(const std::string& url, const std::vector<std::string>& extra_hosts);

// SnsUrlAllowed, and the path names a .pem file (no query, no fragment): the only form of a
// SigningCertURL.
bool SnsCertUrlAllowed(const std::string& url, const std::vector<std::string>& extra_hosts);

// The names one of which SNS's signing certificate served at `cert_url` must carry (as its
// subject CN or a DNS subjectAltName, exactly, no wildcard): `sns.amazonaws.com`, and the
// regional forms AWS's SDKs expect for the URL's region: `sns-signing.<region>.amazonaws.com`
// (opt-in regions), `sns-<region>.amazonaws.com.cn` (China), `sns-us-gov-west-1.amazonaws.com`
// (GovCloud).
std::vector<std::string> SnsCertificateNames(const std::string& cert_url);

// Fetches a URL (the signing certificate), returning its body or an error.
using UrlFetcher = std::function<absl::StatusOr<std::string>(const std::string& url)>;

struct SnsVerifierOptions {
  std::vector<std::string> extra_hosts;  // MAILROOM_FEEDBACK_SNS_HOSTS
  // MAILROOM_FEEDBACK_TOPIC_ARNS: the only topics whose messages verify (none when empty).
  std::vector<std::string> topic_arns;
  std::string ca_file;                   // trust store for the signing certificate ("" system)
  absl::Duration max_age = absl::Hours(1);
  absl::Duration max_clock_skew = absl::Minutes(5);
  // A certificate URL whose fetch or check failed is not fetched again for this long.
  absl::Duration failed_fetch_ttl = absl::Minutes(1);
  // At most this many certificate fetches (signing certificates and issuers together) start
  // in any one-second window; beyond it a message needing a fetch is kUnavailable (SNS retries).
  int max_fetches_per_second = 2;
};

// Verifies SNS messages. First the TopicArn must be one of topic_arns (nothing else is looked
// at, nothing is fetched otherwise); then SignatureVersion 1 (SHA1withRSA) or 2 (SHA256withRSA)
// over SnsStringToSign, with the public key of the certificate at SigningCertURL, which must be
// allowed (SnsCertUrlAllowed), chain to the trust store, be valid now and name SNS
// (SnsCertificateNames). Verified certificates are cached per URL until they expire; a URL whose
// fetch or check failed is refused without a fetch for failed_fetch_ttl, and fetches are capped
// at max_fetches_per_second, so that unauthenticated POSTs cannot make the collector fetch
// without bound. SNS serves its certificate without
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
  // Fetches and checks the certificate at `url`; `*limited` is set when a fetch was refused by
  // the cap (a refusal that is not remembered as the URL's failure).
  absl::StatusOr<std::shared_ptr<Key>> LoadKey(const std::string& url, bool* limited);
  // Takes one fetch from the current one-second window; false when it is used up.
  bool TakeFetch();

  const SnsVerifierOptions options_;
  const UrlFetcher fetch_;
  const std::function<absl::Time()> now_;
  const UrlFetcher fetch_issuer_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Key>> keys_ ABSL_GUARDED_BY(mu_);
  struct Failure {
    absl::Status status;
    absl::Time until;
  };
  std::map<std::string, Failure> failed_ ABSL_GUARDED_BY(mu_);
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int window_fetches_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mailroom
