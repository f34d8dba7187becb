#pragma once

#include <string>
#include <vector>

#include "absl/time/time.h"

typedef struct evp_pkey_st EVP_PKEY;

namespace mailroom::testing {

// Signs feedback webhooks the way each provider does, with a test's own keys and clock, for
// the endpoint's tests. Header lines are "Name: value", as libcurl takes them.

// A P-256 key pair standing in for SendGrid's Signed Event Webhook key.
class SendgridSigner {
 public:
  SendgridSigner();
  ~SendgridSigner();
  SendgridSigner(const SendgridSigner&) = delete;
  SendgridSigner& operator=(const SendgridSigner&) = delete;
  // The public key as SendGrid shows it: base64 of the DER SubjectPublicKeyInfo.
  std::string PublicKey() const;
  // X-Twilio-Email-Event-Webhook-Signature and -Timestamp for `body` signed at `at`.
  std::vector<std::string> Headers(const std::string& body, absl::Time at) const;

 private:
  EVP_PKEY* key_;
};

// webhook-* (prefix "webhook-", mailroom's http reports) or svix-* (Resend) headers: id,
// timestamp `at` and "v1,<base64 HMAC-SHA256>" under `secret` (whsec_ and base64).
std::vector<std::string> StandardWebhookHeaders(const std::string& prefix,
                                                const std::string& secret, const std::string& id,
                                                const std::string& body, absl::Time at);

// `body` (a Mailgun webhook) with its signature object replaced by one signed with `key` at
// `at` under `token`.
std::string MailgunSigned(const std::string& body, const std::string& key, absl::Time at,
                          const std::string& token);

// Postmark's basic auth header for `credentials` (user:password).
std::vector<std::string> PostmarkHeaders(const std::string& credentials);

// The answer to a webhook: its status (0 when none came within 10 s) and body.
struct WebhookAnswer {
  long status = 0;
  std::string body;
};
// POSTs `body` with `headers` to `url` as a provider would (libcurl); `ca_file` is trusted for
// https, `source` (a local address) is the connection's source when given.
WebhookAnswer PostWebhook(const std::string& url, const std::string& body,
                          const std::vector<std::string>& headers, const std::string& ca_file = "",
                          const std::string& source = "");

}  // namespace mailroom::testing
