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

// The secrets one consumer group's delivery reports are signed with.
struct GroupWebhookKeys {
  std::string group;
  std::vector<std::string> keys;  // whsec_ secrets, decoded
};

// The providers' feedback paths, each on only when its secret is set (MAILROOM_FEEDBACK_*; see
// docs/configuration.md). Secrets are never logged.
struct ProviderFeedbackOptions {
  std::string postmark_credentials;      // user:password of the webhook URL's basic auth
  EcKey sendgrid_key;                    // the Signed Event Webhook's verification key
  std::string mailgun_signing_key;       // the HTTP webhook signing key
  std::vector<std::string> resend_keys;  // the webhook's whsec_ secrets, decoded
  // The delivery reports' whsec_ secrets, decoded, that cover every group
  // (MAILROOM_FEEDBACK_HTTP_SECRET): a report signed with one may name any group's deliveries.
  std::vector<std::string> http_keys;
  // The delivery reports' secrets of single groups (MAILROOM_FEEDBACK_HTTP_GROUP_SECRETS): a
  // report signed with one may name only that group's deliveries.
  std::vector<GroupWebhookKeys> http_group_keys;
  // The sender's sandbox transport's whsec_ secrets, decoded (MAILROOM_FEEDBACK_SANDBOX_SECRET):
  // its events have the delivery reports' shape and may name any group's deliveries.
  std::vector<std::string> sandbox_keys;
  // The providers (of kFeedbackProviders) whose events attached to no delivery still suppress
  // their recipients (MAILROOM_FEEDBACK_SUPPRESS_UNMATCHED); never a group-scoped report.
  std::vector<std::string> suppress_unmatched;
  // A signed timestamp (or, for Postmark, the event's own time) older than this is refused;
  // MAILROOM_FEEDBACK_MAX_AGE, as for SNS.
  absl::Duration max_age = kDefaultFeedbackMaxAge;

  // The providers whose path is on, in the order of kFeedbackProviders.
  std::vector<std::string> Enabled() const;
};

// The provider paths, after /feedback/: postmark, sendgrid, mailgun, resend, http, sandbox (the
// sender's provider simulator, whose events are the delivery reports' shape).
inline constexpr const char* kFeedbackProviders[] = {"postmark", "sendgrid", "mailgun",
                                                     "resend",   "http",     "sandbox"};

// What the endpoint does with a POST to /feedback/<provider>, without HTTP:
//  * 404 for a provider that is not one of kFeedbackProviders or whose secret is not set;
//  * 401 for Postmark without the right credentials; 403 for a signature that does not verify
//    or a timestamp outside the window (max_age before now, 5 min after); nothing is recorded;
//  * 400 for a verified body that is not the provider's webhook;
//  * each event recorded once per provider and event id (FeedbackStore, under the key
//    "<provider>:<event id>"; "http@<group>:<event id>" for a report signed with a group's
//    secret): 200 `recorded`, `unmatched`, `duplicate` or `ignored` (an event mailroom does not
//    record), a request of several events answered with its most telling result (recorded over
//    unmatched over duplicate over ignored);
//  * an event attached to no delivery (FeedbackStore::Record: message id or tags, recipient, and
//    for a report signed with a group's secret that group) suppresses nothing unless its
//    provider is in `suppress_unmatched`, and is counted in
//    mailroom_collector_feedback_unmatched_total{provider,reason};
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
  // Resend's path (`groups` empty), mailroom's http path and the sandbox's: verified under
  // `keys` (every group) or under one of `groups`' keys (that group only).
  HttpReply StandardWebhook(const char* provider, const std::vector<std::string>& keys,
                            const std::vector<GroupWebhookKeys>& groups, const char* header_prefix,
                            const HttpRequest& r);
  // Records `events` (all verified) within `scope_group` ("" for every group) and answers for
  // them.
  HttpReply Record(const char* provider, const std::vector<ProviderEvent>& events,
                   const std::string& scope_group = "");
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
