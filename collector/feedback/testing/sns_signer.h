#pragma once

#include <memory>
#include <string>

#include "collector/feedback/sns_verifier.h"

namespace mailroom::testing {

// The topic SnsSigner's messages come from.
inline constexpr char kTopicArn[] = "arn:aws:sns:us-east-1:123456789012:mailroom-feedback";

// Plays Amazon SNS in tests: a throwaway CA (RSA 2048) and a signing certificate it issued
// (CN sns.amazonaws.com, as SNS's), and SNS messages from kTopicArn signed with that
// certificate's key. Not thread-safe.
class SnsSigner {
 public:
  // With `issuer_url`, the signing certificate is issued by an intermediate CA (issued by the
  // CA) and names `issuer_url` as its caIssuers; the intermediate is intermediate_der().
  explicit SnsSigner(const std::string& issuer_url = "");
  ~SnsSigner();

  const std::string& ca_pem() const { return ca_pem_; }
  const std::string& cert_pem() const { return cert_pem_; }
  const std::string& intermediate_der() const { return intermediate_der_; }
  // Another certificate for the signing key, from the same issuer, with subject CN `cn` (and a
  // DNS subjectAltName `dns_name` when not empty).
  std::string CertificateNamed(const std::string& cn, const std::string& dns_name = "");

  // A Notification / SubscriptionConfirmation with every field set (Timestamp = `at`),
  // SigningCertURL `cert_url`, signed with SignatureVersion `version` (1 or 2).
  SnsMessage Notification(const std::string& message_id, const std::string& message,
                          const std::string& cert_url, absl::Time at, int version = 2);
  SnsMessage Confirmation(const std::string& message_id, const std::string& subscribe_url,
                          const std::string& cert_url, absl::Time at, int version = 2);
  // (Re)signs `m` as it is (SignatureVersion `version`).
  void Sign(SnsMessage& m, int version);
  // The JSON body SNS would POST for `m`.
  static std::string Body(const SnsMessage& m);

 private:
  struct Keys;
  std::unique_ptr<Keys> keys_;
  std::string ca_pem_;
  std::string cert_pem_;
  std::string intermediate_der_;
};

}  // namespace mailroom::testing
