#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "collector/feedback/feedback_store.h"
#include "collector/feedback/http_request.h"
#include "collector/feedback/provider_events.h"
#include "collector/feedback/webhook_signatures.h"
#include "common/metrics.h"

namespace mailroom {

// The providers' feedback paths, each on only when its secret is set (MAILROOM_FEEDBACK_*; see
// docs/configuration.md). Secrets are never logged.
struct ProviderFeedbackOptions {
  std::string postmark_credentials;      // user:password of the webhook URL's basic auth
  EcKey sendgrid_key;                    // the Signed Event Webhook's verification key
  std::string mailgun_signing_key;       // the HTTP webhook signing key
  std::vector<std::string> resend_keys;  // the webhook's whsec_ secrets, decoded
  std::vector<std::string> http_keys;    // the delivery reports' whsec_ secrets, decoded
  // A signed timestamp (or, for Postmark, the event's own time) older than this is refused;
  // MAILROOM_FEEDBACK_MAX_AGE, as for SNS.
  absl::Duration max_age = absl::Hours(1);

  // The providers whose path is on, in the order of kFeedbackProviders.
  std::vector<std::string> Enabled() const;
};

// The provider paths, after /feedback/: postmark, sendgrid, mailgun, resend, http.
inline constexpr const char* kFeedbackProviders[] = {"postmark", "sendgrid", "mailgun", "resend",
                                                     "http"};

// What the endpoint does with a POST to /feedback/<provider>, without HTTP:
//  * 404 for a provider that is not one of kFeedbackProviders or whose secret is not set;
//  * 401 for Postmark without the right credentials; 403 for a signature that does not verify
//    or a timestamp outside the window (max_age before now, 5 min after); nothing is recorded;
//  * 400 for a verified body that is not the provider's webhook;
//  * each event recorded once per provider and event id (FeedbackStore, under the key
//    "<provider>:<event id>"): 200 `recorded`, `unmatched`, `duplicate` or `ignored` (an event
//    mailroom does not record);
//  * 503 when the database cannot be reached (the providers retry).
// Thread-safe; counts mailroom_collector_feedback_total{type=<provider>,result} per request and
// mailroom_collector_feedback_events_total{event,result} per recorded event.
class ProviderFeedbackHandler {
 public:
  // `store` and `metrics` are not owned and must outlive the handler; `now` is the clock.
  ProviderFeedbackHandler(ProviderFeedbackOptions options, FeedbackStore* store,
                          int soft_bounce_limit, Metrics* metrics,
                          std::function<absl::Time()> now = absl::Now);
  HttpReply Post(absl::string_view provider, const HttpRequest& request);

 private:
  HttpReply Postmark(const HttpRequest& r);
  HttpReply Sendgrid(const HttpRequest& r);
  HttpReply Mailgun(const HttpRequest& r);
  HttpReply StandardWebhook(const char* provider, const std::vector<std::string>& keys,
                            const char* header_prefix, const HttpRequest& r);
  // Records `events` (all verified) and answers for them.
  HttpReply Record(const char* provider, const std::vector<ProviderEvent>& events);
  HttpReply Count(const char* provider, const char* result, HttpReply reply);
  HttpReply Refuse(const char* provider, const absl::Status& why);

  const ProviderFeedbackOptions options_;
  FeedbackStore* const store_;
  const int soft_bounce_limit_;
  Metrics* const metrics_;
  const std::function<absl::Time()> now_;
};

// The endpoint's routes: POST /feedback/<provider> to `providers`, every other path to the SNS
// handler (as before there were providers, whatever the path: /, /sns, /feedback/sns). A query
// string is not part of the path. Thread-safe.
class FeedbackRoutes : public HttpHandler {
 public:
  // Either may be null: its paths then answer 404. Not owned.
  FeedbackRoutes(HttpHandler* sns, ProviderFeedbackHandler* providers)
      : sns_(sns), providers_(providers) {}
  HttpReply Handle(const HttpRequest& request) override;

 private:
  HttpHandler* const sns_;
  ProviderFeedbackHandler* const providers_;
};

}  // namespace mailroom
