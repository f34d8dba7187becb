#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collector/feedback/webhook_signatures.h"

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

// SnsUrlAllowed, and the path is exactly AWS's form of a SigningCertURL,
// `/SimpleNotificationService-<hex>.pem` (lower-case hex digits, no query, no fragment), as
// AWS's own message validators check it.
bool SnsCertUrlAllowed(const std::string& url, const std::vector<std::string>& extra_hosts);

// The AWS region of an SNS host URL (`us-east-1` for https://sns.us-east-1.amazonaws.com/...,
// `cn-north-1` for the .com.cn form); "" for any other host (the allow-list's).
std::string SnsUrlRegion(const std::string& url);
// The region field of a topic ARN (arn:PARTITION:sns:REGION:ACCOUNT:NAME), or "".
std::string TopicArnRegion(const std::string& topic_arn);

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
  std::string ca_file;  // trust store for the signing certificate ("" system)
  absl::Duration max_age = kDefaultFeedbackMaxAge;
  absl::Duration max_clock_skew = absl::Minutes(5);
  // A certificate URL that failed for good (the host answered 4xx other than 408/429, or what
  // it served is not a trusted SNS certificate) is refused without a fetch for this long.
  absl::Duration failed_fetch_ttl = absl::Minutes(1);
  // A certificate URL whose fetch failed in a way that may pass (no connection, a timeout,
  // 408, 429, 5xx) is fetched again after this long, the first time even when the fetch cap
  // is used up: SNS retries a delivery about 20 s later, and that retry finds the certificate.
  absl::Duration transient_retry = absl::Seconds(5);
  // At most this many certificate fetches start in any one second; beyond it a message needing
  // a fetch is kUnavailable (SNS retries). An issuer fetch (only a certificate SNS really serves
  // needs one) and a retry after a passing failure count among them but are not held back.
  int max_fetches_per_second = 2;
  // Certificate URLs refused by the cap wait here with the number of posts that asked for
  // them; each fetch the cap allows goes to the most asked (ties: the oldest), whichever post
  // brings it. A full table drops the least recently asked.
  int max_waiting_urls = 1024;
};

// Verifies SNS messages. First the TopicArn must be one of topic_arns (nothing else is looked
// at, nothing is fetched otherwise); then SignatureVersion 1 (SHA1withRSA) or 2 (SHA256withRSA)
// over SnsStringToSign, with the public key of the certificate at SigningCertURL, which must be
// allowed (SnsCertUrlAllowed), chain to the trust store, be valid now and name SNS
// (SnsCertificateNames); a SigningCertURL on an SNS host must be in the TopicArn's region.
// Anything refused before a fetch is refused without one. Verified certificates are cached per
// URL until they expire; a URL that failed for good is refused without a fetch for
// failed_fetch_ttl, one that failed for a passing reason is fetched again after
// transient_retry, and fetches are capped at max_fetches_per_second (a retry after a passing
// failure and an allowed certificate's issuer excepted), so that unauthenticated POSTs cannot
// make the collector fetch without bound. A fetch the cap allows goes to the waiting URL most
// posts asked for, not to the post that brings it: SNS posts every notification of a region,
// and every retry, with one certificate URL, so it outranks made-up URLs posted once each; a
// URL being fetched is not fetched again meanwhile. SNS serves its certificate without
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
  // How a LoadKey failed: for good, or for a reason that may pass.
  enum class Failure { kDefinite, kTransient };
  // Fetches and checks the certificate at `url` (whose fetch the cap has allowed), then
  // remembers the key or the failure. `retry`: a retry after a transient failure.
  absl::StatusOr<std::shared_ptr<Key>> Load(const std::string& url, bool retry);
  // Fetches and checks the certificate at `url`, setting `*failure` when it fails.
  absl::StatusOr<std::shared_ptr<Key>> LoadKey(const std::string& url, Failure* failure);
  // Counts a fetch starting now; with `force` it is counted even beyond the cap. False (and
  // nothing counted) when max_fetches_per_second fetches started in the last second.
  bool TakeFetch(bool force) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts one more post asking for `url` among the URLs waiting for a fetch.
  void Ask(const std::string& url) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes `url` from the waiting URLs, if there.
  void StopWaiting(const std::string& url) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The waiting URL most posts asked for (ties: the one that began waiting first); "" if none.
  // A scan of at most max_waiting_urls, made only when the cap allows a fetch.
  std::string MostAsked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The refusal for a failed fetch of `what`: kUnavailable and kTransient when `fetched` may
  // pass (kUnavailable, kDeadlineExceeded), else kPermissionDenied (a definite failure).
  static absl::Status FetchFailed(absl::string_view what, const absl::Status& fetched,
                                  Failure* failure);

  const SnsVerifierOptions options_;
  const UrlFetcher fetch_;
  const std::function<absl::Time()> now_;
  const UrlFetcher fetch_issuer_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Key>> keys_ ABSL_GUARDED_BY(mu_);
  struct Failed {
    absl::Status status;
    absl::Time until;   // refused without a fetch until then
    absl::Time forget;  // remembered until then (failed_fetch_ttl after the failure)
    // A first transient failure: the next fetch is not held back by the cap (so at most
    // max_fetches_per_second such retries start a second, on top of the capped fetches).
    bool retry_free = false;
  };
  std::map<std::string, Failed> failed_ ABSL_GUARDED_BY(mu_);
  // When the fetches of the last second started, oldest first.
  std::deque<absl::Time> fetch_starts_ ABSL_GUARDED_BY(mu_);
  // URLs refused by the cap: posts that asked (`asks`), order of arrival (`first`) and of the
  // latest ask (`last`). `recent_` orders them by their latest ask, least recent first.
  struct Waiting {
    int64_t asks = 0;
    uint64_t first = 0;
    uint64_t last = 0;
  };
  std::map<std::string, Waiting> waiting_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::string> recent_ ABSL_GUARDED_BY(mu_);
  uint64_t asks_seen_ ABSL_GUARDED_BY(mu_) = 0;
  // URLs whose certificate a post is fetching now.
  std::set<std::string> loading_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mailroom
