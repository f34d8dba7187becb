#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

typedef struct evp_pkey_st EVP_PKEY;

namespace mailroom {

// The signature and credential checks of the providers' feedback webhooks. Each check is a pure
// function of the request's parts and the current time: it logs nothing, and no secret, key or
// signature appears in its error. kPermissionDenied for a request that does not verify (the
// endpoint answers 403), kUnauthenticated for wrong or missing credentials (401),
// kInvalidArgument for a configuration value that cannot be used (the collector exits 2 naming
// its variable). Every comparison of a
// signature or credential is constant-time (CRYPTO_memcmp). Thread-safe.

// MAILROOM_FEEDBACK_MAX_AGE's default: how old a signed SNS message or provider event may be.
inline constexpr absl::Duration kDefaultFeedbackMaxAge = absl::Hours(1);

// A signed request's timestamp must lie within `max_age` before `now`, and at most 5 minutes
// after it (clocks disagree a little): otherwise kPermissionDenied, so a captured request
// cannot be replayed later (replays within the window meet the event id's idempotency).
// `unix_seconds` is the header or field as sent: digits only.
absl::Status CheckTimestamp(absl::string_view unix_seconds, absl::Time now, absl::Duration max_age);
// The same for a time already parsed (Postmark's event times).
absl::Status CheckTime(absl::Time at, absl::Time now, absl::Duration max_age);

// Standard Webhooks secrets (Svix's form, which Resend uses, and the sender's
// MAILROOM_HTTP_SECRET): `whsec_` and the base64 of 24 to 64 bytes each, several separated by
// spaces while one is rotated; returns the key bytes. kInvalidArgument names the secret's
// position, never its text.
absl::StatusOr<std::vector<std::string>> ParseWebhookSecrets(absl::string_view secrets);

// Standard Webhooks (and Svix): `signature` is one or more space-separated `v1,<base64>`, each
// HMAC-SHA256(key, id + "." + timestamp + "." + body); one of them must match one of `keys`.
// The timestamp must pass CheckTimestamp.
absl::Status VerifyStandardWebhook(const std::vector<std::string>& keys, absl::string_view id,
                                   absl::string_view timestamp, absl::string_view signature,
                                   absl::string_view body, absl::Time now, absl::Duration max_age);

// SendGrid's verification key (Mail Settings > Signed Event Webhook): the base64 of a DER
// SubjectPublicKeyInfo of a P-256 (prime256v1) key, as SendGrid shows it, or the same in PEM.
using EcKey = std::shared_ptr<EVP_PKEY>;
absl::StatusOr<EcKey> ParseSendgridKey(absl::string_view key);

// SendGrid's Signed Event Webhook: `signature` (X-Twilio-Email-Event-Webhook-Signature) is the
// base64 of a DER ECDSA signature with SHA-256 over timestamp + body, `timestamp`
// (X-Twilio-Email-Event-Webhook-Timestamp) passes CheckTimestamp.
absl::Status VerifySendgrid(const EcKey& key, absl::string_view signature,
                            absl::string_view timestamp, absl::string_view body, absl::Time now,
                            absl::Duration max_age);

// Mailgun: `signature` is the hex of HMAC-SHA256(signing key, timestamp + token), the three from
// the body's `signature` object; the timestamp passes CheckTimestamp.
absl::Status VerifyMailgun(absl::string_view signing_key, absl::string_view timestamp,
                           absl::string_view token, absl::string_view signature, absl::Time now,
                           absl::Duration max_age);

// HTTP basic authentication (Postmark signs nothing: the webhook's URL carries a user and a
// password, which Postmark sends as `Authorization: Basic base64(user:password)`). `expected`
// is `user:password`; the whole header is compared in constant time against the one expected.
// kUnauthenticated when it is not that header.
absl::Status VerifyBasicAuth(absl::string_view expected, absl::string_view authorization);

}  // namespace mailroom
