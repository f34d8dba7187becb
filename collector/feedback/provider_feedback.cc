#include "collector/feedback/provider_feedback.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "collector/metrics/collector_metrics.h"
#include "common/log.h"

namespace mailroom {
namespace {

const std::string& HeaderOrEmpty(const HttpRequest& r, absl::string_view name) {
  static const std::string empty;
  const std::string* v = r.Header(name);
  return v == nullptr ? empty : *v;
}

}  // namespace

std::vector<std::string> ProviderFeedbackOptions::Enabled() const {
  std::vector<std::string> on;
  if (!postmark_credentials.empty()) on.push_back("postmark");
  if (sendgrid_key != nullptr) on.push_back("sendgrid");
  if (!mailgun_signing_key.empty()) on.push_back("mailgun");
  if (!resend_keys.empty()) on.push_back("resend");
  if (!http_keys.empty() || !http_group_keys.empty()) on.push_back("http");
  if (!sandbox_keys.empty()) on.push_back("sandbox");
  return on;
}

ProviderFeedbackHandler::ProviderFeedbackHandler(ProviderFeedbackOptions options,
                                                 FeedbackStore* store, int soft_bounce_limit,
                                                 Metrics* metrics, std::function<absl::Time()> now)
    : options_(std::move(options)), store_(store), soft_bounce_limit_(soft_bounce_limit),
      metrics_(metrics), now_(std::move(now)) {}

HttpReply ProviderFeedbackHandler::Count(const char* provider, const char* result,
                                         HttpReply reply) {
  metrics_->Add(collector_metrics::kFeedback, 1, {provider, result});
  return reply;
}

HttpReply ProviderFeedbackHandler::Refuse(const char* provider, const absl::Status& why) {
  // The reason only: never the header or the body, which may carry a secret.
  LogWarn("feedback refused", {{"provider", provider}, {"error", std::string(why.message())}});
  if (absl::IsUnauthenticated(why)) {
    return Count(provider, "unauthorized", {401, std::string(why.message())});
  }
  return Count(provider, "forbidden", {403, std::string(why.message())});
}

HttpReply ProviderFeedbackHandler::Post(absl::string_view provider, const HttpRequest& r) {
  if (provider == "postmark" && !options_.postmark_credentials.empty()) return Postmark(r);
  if (provider == "sendgrid" && options_.sendgrid_key != nullptr) return Sendgrid(r);
  if (provider == "mailgun" && !options_.mailgun_signing_key.empty()) return Mailgun(r);
  if (provider == "resend" && !options_.resend_keys.empty()) {
    return StandardWebhook("resend", options_.resend_keys, {}, "svix-", r);
  }
  if (provider == "http" && (!options_.http_keys.empty() || !options_.http_group_keys.empty())) {
    return StandardWebhook("http", options_.http_keys, options_.http_group_keys, "webhook-", r);
  }
  if (provider == "sandbox" && !options_.sandbox_keys.empty()) {
    return StandardWebhook("sandbox", options_.sandbox_keys, {}, "webhook-", r);
  }
  return Count("unknown", "not_found", {404, "no such feedback path"});
}

HttpReply ProviderFeedbackHandler::Postmark(const HttpRequest& r) {
  absl::Status auth = VerifyBasicAuth(options_.postmark_credentials,
                                      HeaderOrEmpty(r, "Authorization"));
  if (!auth.ok()) return Refuse("postmark", auth);
  auto event = ParsePostmark(r.body);
  if (!event.ok()) {
    return Count("postmark", "bad_request", {400, std::string(event.status().message())});
  }
  // Nothing signs a Postmark webhook's time: the event's own is held to the window instead.
  if (!event->event.type.empty()) {
    absl::Status fresh = CheckTime(event->at, now_(), options_.max_age);
    if (!fresh.ok()) return Refuse("postmark", fresh);
  }
  return Record("postmark", {*std::move(event)});
}

HttpReply ProviderFeedbackHandler::Sendgrid(const HttpRequest& r) {
  absl::Status verified = VerifySendgrid(options_.sendgrid_key,
                                         HeaderOrEmpty(r, "X-Twilio-Email-Event-Webhook-Signature"),
                                         HeaderOrEmpty(r, "X-Twilio-Email-Event-Webhook-Timestamp"),
                                         r.body, now_(), options_.max_age);
  if (!verified.ok()) return Refuse("sendgrid", verified);
  auto events = ParseSendgrid(r.body);
  if (!events.ok()) {
    return Count("sendgrid", "bad_request", {400, std::string(events.status().message())});
  }
  return Record("sendgrid", *events);
}

HttpReply ProviderFeedbackHandler::Mailgun(const HttpRequest& r) {
  // Mailgun signs inside the body: it is parsed (bounded in size and depth) before it verifies,
  // and nothing of it is acted on before.
  MailgunSignature sig;
  auto event = ParseMailgun(r.body, &sig);
  absl::Status verified = VerifyMailgun(options_.mailgun_signing_key, sig.timestamp, sig.token,
                                        sig.signature, now_(), options_.max_age);
  if (!verified.ok()) return Refuse("mailgun", verified);
  if (!event.ok()) {
    return Count("mailgun", "bad_request", {400, std::string(event.status().message())});
  }
  return Record("mailgun", {*std::move(event)});
}

HttpReply ProviderFeedbackHandler::StandardWebhook(const char* provider,
                                                   const std::vector<std::string>& keys,
                                                   const std::vector<GroupWebhookKeys>& groups,
                                                   const char* header_prefix,
                                                   const HttpRequest& r) {
  const std::string& id = HeaderOrEmpty(r, absl::StrCat(header_prefix, "id"));
  const std::string& timestamp = HeaderOrEmpty(r, absl::StrCat(header_prefix, "timestamp"));
  const std::string& signature = HeaderOrEmpty(r, absl::StrCat(header_prefix, "signature"));
  auto verify = [&](const std::vector<std::string>& k) {
    return VerifyStandardWebhook(k, id, timestamp, signature, r.body, now_(), options_.max_age);
  };
  // The secrets that cover every group first; then each group's, whose report may name that
  // group's deliveries only. When none verifies, the first refusal is the answer: it says what
  // failed (the timestamp, the signature), never which secret was tried.
  std::string scope;
  absl::Status verified = keys.empty() ? absl::PermissionDeniedError("no secret") : verify(keys);
  for (size_t i = 0; !verified.ok() && i < groups.size(); ++i) {
    absl::Status g = verify(groups[i].keys);
    if (g.ok() || (keys.empty() && i == 0)) verified = g;
    if (g.ok()) scope = groups[i].group;
  }
  if (!verified.ok()) return Refuse(provider, verified);
  auto event = std::string(provider) == "resend" ? ParseResend(r.body, id)
                                                 : ParseHttpReport(r.body, id);
  if (!event.ok()) {
    return Count(provider, "bad_request", {400, std::string(event.status().message())});
  }
  // The sandbox's reports are the http path's shape; their provider is the sandbox.
  event->event.provider = provider;
  return Record(provider, {*std::move(event)}, scope);
}

HttpReply ProviderFeedbackHandler::Record(const char* provider,
                                          const std::vector<ProviderEvent>& events,
                                          const std::string& scope_group) {
  // The request's answer is its most telling result: recorded over unmatched over duplicate
  // over ignored.
  const char* answer = "ignored";
  auto rank = [](absl::string_view r) {
    return r == "recorded" ? 3 : r == "unmatched" ? 2 : r == "duplicate" ? 1 : 0;
  };
  const FeedbackScope scope{
      scope_group, scope_group.empty() && std::find(options_.suppress_unmatched.begin(),
                                                    options_.suppress_unmatched.end(),
                                                    provider) != options_.suppress_unmatched.end()};
  // A group's reports have event ids of their own: another group's cannot make them duplicates.
  const std::string key_prefix = scope_group.empty()
                                     ? absl::StrCat(provider, ":")
                                     : absl::StrCat(provider, "@", scope_group, ":");
  for (const ProviderEvent& p : events) {
    if (p.event.type.empty()) continue;
    auto recorded = store_->Record(absl::StrCat(key_prefix, p.id), p.event, soft_bounce_limit_,
                                   scope);
    if (!recorded.ok()) {
      LogWarn("feedback not recorded",
              {{"provider", provider}, {"error", std::string(recorded.status().message())}});
      return Count(provider, "unavailable", {503, "feedback not recorded; retry"});
    }
    const char* result = ResultName(recorded->result);
    if (recorded->result == FeedbackResult::kUnmatched) {
      metrics_->Add(collector_metrics::kFeedbackUnmatched, 1,
                    {provider, recorded->unmatched_reason});
      // A secret's holder naming deliveries outside its group is worth a warning.
      Log(recorded->unmatched_reason == "other_group" ? LogLevel::kWarn : LogLevel::kInfo,
          "feedback unmatched",
          {{"provider", provider},
           {"event", p.event.type},
           {"reason", recorded->unmatched_reason},
           {"scope", scope_group.empty() ? "*" : scope_group},
           {"message_id", p.event.message_ids.empty() ? "" : p.event.message_ids[0].substr(0, 100)},
           {"job", absl::StrCat(p.event.job_id)},
           {"group", p.event.group.substr(0, 100)},
           {"recipient_domains", RecipientDomains(p.event.recipients)},
           {"suppressed", recorded->suppressed ? "true" : "false"}});
    } else {
      LogInfo("feedback", {{"provider", provider},
                           {"event", p.event.type},
                           {"bounce_type", p.event.bounce_type},
                           {"result", result}});
    }
    metrics_->Add(collector_metrics::kFeedbackEvents, 1, {p.event.type, result});
    if (rank(result) > rank(answer)) answer = result;
  }
  return Count(provider, answer, {200, answer});
}

HttpReply FeedbackRoutes::Handle(const HttpRequest& request) {
  absl::string_view path = request.path;
  if (absl::ConsumePrefix(&path, "/feedback/") && path != "sns") {
    if (providers_ == nullptr) return {404, "no such feedback path"};
    return providers_->Post(path, request);
  }
  if (sns_ == nullptr) return {404, "no such feedback path"};
  return sns_->Handle(request);
}

}  // namespace mailroom
