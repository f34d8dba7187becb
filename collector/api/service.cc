#include "collector/api/service.h"

#include <algorithm>
#include <limits>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collector/dispatch/job_builder.h"
#include "collector/metrics/collector_metrics.h"
#include "common/log.h"
#include "common/names.h"
#include "common/utf8.h"

namespace mailroom {
namespace {

// An operator's call on a collector without an operator store (SetOperatorStore).
grpc::Status NoOperatorStore() {
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      "the operator's lookups are not available on this collector");
}

grpc::Status Invalid(const std::string& msg) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, msg);
}

grpc::Status CheckGroup(const std::string& group) {
  if (group.empty()) return Invalid("consumer_group is required");
  if (!ValidGroupName(group)) {
    return Invalid("consumer_group must match ^[a-z][a-z0-9_-]{0,62}$");
  }
  return grpc::Status::OK;
}

// A grant holder: 1..kMaxHolderBytes printable ASCII (it is logged and compared, never parsed).
// `field` names it in the error (holder, budget_holder).
grpc::Status CheckHolder(const std::string& holder, const char* field = "holder") {
  if (holder.empty() || holder.size() > kMaxHolderBytes) {
    return Invalid(absl::StrCat(field, " must be 1 to ", kMaxHolderBytes, " characters"));
  }
  for (unsigned char ch : holder) {
    if (ch < 0x21 || ch > 0x7e) {
      return Invalid(absl::StrCat(field, " must be printable ASCII without spaces"));
    }
  }
  return grpc::Status::OK;
}

// PERMISSION_DENIED unless subscription `id` was issued to `principal`: another credential of
// the same group may not settle or renew its leases (nor free its window). An id that is not
// of the bound form (the earlier unbound ids included) is INVALID_ARGUMENT: a sender drops
// those outcomes (the jobs come back when their leases end) and keeps its current stream's id.
grpc::Status CheckSubscription(const std::string& id, const Principal& principal) {
  if (!IsSubscriptionId(id)) {
    return Invalid("subscriber_id is not a subscription id issued by Subscribe; subscribe again");
  }
  if (SubscriptionIsFor(id, principal)) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      "subscriber_id names a subscription of another credential");
}

// PERMISSION_DENIED for an observer in a consumer group that a sender credential serves: the
// members of a group share its jobs, so an observer there would lease jobs the senders then
// do not get until the leases end, and could settle them. Refused on every call that takes or
// holds leases (Subscribe, Acknowledge, RenewLeases), so a subscription opened before the
// credentials changed cannot keep doing it either. PERMISSION_DENIED, not
// FAILED_PRECONDITION: what is refused is this credential's role in this group, as a scope
// check refuses a group outside the credential's scope; no change of the system's state (only
// of the credentials) would make the same call acceptable, and a retry never helps.
grpc::Status CheckObserverApart(const Authenticator& auth, const Principal& principal,
                                const std::string& group) {
  if (principal.ReceivesSecrets() || !auth.SenderServes(group)) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrCat("this credential observes, and a sender credential serves "
                                   "consumer group \"",
                                   group,
                                   "\": an observer there would take a share of the senders' "
                                   "jobs; observe in a group of its own"));
}

// PERMISSION_DENIED when an observer reports a job SENT or FAILED: it sends nothing, and those
// outcomes are what the group's deliveries, failures and usage (and, in the senders' group,
// mailroom.account_emails) report as sent or failed. The whole call is refused, so nothing of
// a report that claims a delivery is recorded. An observer settles a job it has seen with
// EXPIRED (final, nothing sent) and hands one back with DEFER or RETRY.
grpc::Status CheckObserverOutcomes(const Principal& principal,
                                   const v1::AcknowledgeRequest& request) {
  if (principal.ReceivesSecrets()) return grpc::Status::OK;
  for (const v1::JobOutcome& o : request.outcomes()) {
    if (o.outcome() == v1::OUTCOME_SENT || o.outcome() == v1::OUTCOME_FAILED) {
      return grpc::Status(
          grpc::StatusCode::PERMISSION_DENIED,
          absl::StrCat("an observer sends nothing: it may not report job ", o.job_id(), " ",
                       o.outcome() == v1::OUTCOME_SENT ? "SENT" : "FAILED",
                       "; settle a job it has seen with EXPIRED, or hand it back with DEFER"));
    }
  }
  return grpc::Status::OK;
}

// A reactor that only reports an error (bad arguments, no credentials).
class ErrorReactor : public grpc::ServerWriteReactor<v1::SubscribeResponse> {
 public:
  explicit ErrorReactor(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

const char* OutcomeName(v1::Outcome o) {
  switch (o) {
    case v1::OUTCOME_SENT: return "sent";
    case v1::OUTCOME_FAILED: return "failed";
    case v1::OUTCOME_EXPIRED: return "expired";
    case v1::OUTCOME_RETRY: return "retry";
    case v1::OUTCOME_DEFER: return "defer";
    default: return "unspecified";
  }
}

v1::SuppressionReason SuppressionReasonOf(const std::string& name) {
  if (name == "hard_bounce") return v1::SUPPRESSION_REASON_HARD_BOUNCE;
  if (name == "complaint") return v1::SUPPRESSION_REASON_COMPLAINT;
  if (name == "smtp_rejected") return v1::SUPPRESSION_REASON_SMTP_REJECTED;
  if (name == "manual") return v1::SUPPRESSION_REASON_MANUAL;
  return v1::SUPPRESSION_REASON_UNSPECIFIED;
}

void ToProto(const SuppressionRow& row, v1::Suppression* out) {
  out->set_address(row.address);
  out->set_reason(SuppressionReasonOf(row.reason));
  out->set_source(row.source);
  out->set_first_seen(row.first_seen);
  out->set_last_seen(row.last_seen);
  out->set_expires_at(row.expires_at);
}

}  // namespace

absl::StatusOr<JobResult> CheckOutcome(const v1::JobOutcome& o, int64_t max_cost_micros) {
  JobResult r;
  r.id = o.job_id();
  r.attempt = o.attempt();
  r.retry_after_ms = o.retry_after_ms();
  r.cost_micros = o.cost_micros();
  switch (o.outcome()) {
    case v1::OUTCOME_SENT: r.kind = JobResult::Kind::kSent; break;
    case v1::OUTCOME_FAILED: r.kind = JobResult::Kind::kFailed; break;
    case v1::OUTCOME_EXPIRED: r.kind = JobResult::Kind::kExpired; break;
    case v1::OUTCOME_RETRY: r.kind = JobResult::Kind::kRetry; break;
    case v1::OUTCOME_DEFER: r.kind = JobResult::Kind::kDefer; break;
    default: return absl::InvalidArgumentError("outcome is unspecified or unknown");
  }
  if (o.job_id() == 0) return absl::InvalidArgumentError("job_id is required");
  if (o.attempt() == 0) {
    return absl::InvalidArgumentError("attempt is required (the Job's attempt as handed out)");
  }
  if (r.kind == JobResult::Kind::kFailed && o.reason().empty()) {
    return absl::InvalidArgumentError("a FAILED outcome needs a reason");
  }
  if (o.cost_micros() < 0 || o.cost_micros() > max_cost_micros) {
    return absl::InvalidArgumentError(
        absl::StrCat("cost_micros must be 0 to ", max_cost_micros, " (MAILROOM_MAX_COST_MICROS)"));
  }
  if (o.cost_micros() != 0 && r.kind != JobResult::Kind::kSent) {
    return absl::InvalidArgumentError("only a SENT outcome has a cost");
  }
  if (o.retry_after_ms() > 31u * 24 * 3600 * 1000) {
    return absl::InvalidArgumentError("retry_after_ms is more than 31 days");
  }
  if (o.suppress_recipient() && r.kind != JobResult::Kind::kFailed) {
    return absl::InvalidArgumentError("suppress_recipient is only valid with a FAILED outcome");
  }
  r.suppress_recipient = o.suppress_recipient();
  if (!o.provider_message_id().empty() && r.kind != JobResult::Kind::kSent) {
    return absl::InvalidArgumentError("provider_message_id is only valid with a SENT outcome");
  }
  if (o.provider_message_id().size() > 256 ||
      o.provider_message_id().find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        "provider_message_id must be at most 256 characters without NUL bytes");
  }
  r.provider_message_id = o.provider_message_id();
  if (!o.provider().empty() && r.kind != JobResult::Kind::kSent) {
    return absl::InvalidArgumentError("provider is only valid with a SENT outcome");
  }
  if (o.provider().size() > 32 ||
      !std::all_of(o.provider().begin(), o.provider().end(), [](char c) {
        return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_' || c == '-';
      })) {
    return absl::InvalidArgumentError(
        "provider must be at most 32 characters of a-z, 0-9, '_' and '-'");
  }
  r.provider = o.provider();
  auto reason = CleanReason(o.reason());
  if (!reason.ok()) return reason.status();
  r.reason = *std::move(reason);
  return r;
}

absl::StatusOr<std::string> NormalizeAddress(absl::string_view address) {
  std::string a = absl::AsciiStrToLower(absl::StripAsciiWhitespace(address));
  if (a.empty()) return absl::InvalidArgumentError("address is required");
  if (a.size() > 254) return absl::InvalidArgumentError("address is longer than 254 characters");
  const size_t at = a.rfind('@');
  if (at == std::string::npos || at == 0 || at + 1 == a.size()) {
    return absl::InvalidArgumentError("address must look like local@domain");
  }
  if (at > 64)
    return absl::InvalidArgumentError("address's local part is longer than 64 characters");
  for (unsigned char c : a) {
    if (c <= 0x20 || c == 0x7f || c == '<' || c == '>' || c == ',' || c == ';') {
      return absl::InvalidArgumentError(
          "address must not contain spaces, control characters or <>,;");
    }
  }
  const absl::string_view domain = absl::string_view(a).substr(at + 1);
  if (domain.find('@') != absl::string_view::npos || domain.front() == '.' ||
      domain.back() == '.' || absl::StrContains(domain, "..")) {
    return absl::InvalidArgumentError("address's domain is not a host name");
  }
  if (!CleanReason(a).ok()) return absl::InvalidArgumentError("address is not valid UTF-8");
  return a;
}

const char* SuppressionReasonName(v1::SuppressionReason r) {
  switch (r) {
    case v1::SUPPRESSION_REASON_HARD_BOUNCE: return "hard_bounce";
    case v1::SUPPRESSION_REASON_COMPLAINT: return "complaint";
    case v1::SUPPRESSION_REASON_SMTP_REJECTED: return "smtp_rejected";
    case v1::SUPPRESSION_REASON_MANUAL: return "manual";
    default: return "";
  }
}

absl::StatusOr<std::string> CleanReason(absl::string_view reason) {
  if (reason.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError("reason contains a NUL byte");
  }
  if (!IsValidUtf8(reason)) return absl::InvalidArgumentError("reason is not valid UTF-8");
  return std::string(Utf8Prefix(reason, kMaxReasonBytes));
}

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (s.code()) {
    case absl::StatusCode::kUnavailable: code = grpc::StatusCode::UNAVAILABLE; break;
    case absl::StatusCode::kNotFound: code = grpc::StatusCode::NOT_FOUND; break;
    case absl::StatusCode::kInvalidArgument: code = grpc::StatusCode::INVALID_ARGUMENT; break;
    case absl::StatusCode::kFailedPrecondition: code = grpc::StatusCode::FAILED_PRECONDITION; break;
    default: break;
  }
  return grpc::Status(code, std::string(s.message()));
}

CollectorService::CollectorService(Store* store, Hub* hub, Dispatcher* dispatcher,
                                   const Authenticator* auth, Metrics* metrics,
                                   ServiceLimits limits)
    : store_(store), hub_(hub), dispatcher_(dispatcher), auth_(auth), metrics_(metrics),
      limits_(limits) {}

grpc::Status CollectorService::Admit(const grpc::ServerContextBase& context, unsigned roles,
                                     const std::string& group, const char* method,
                                     Principal* principal, bool group_optional) const {
  Principal p;
  grpc::Status st = auth_->Authenticate(context, &p);
  if (!st.ok()) return st;
  if (!(group_optional && group.empty())) {
    st = CheckGroup(group);
    if (!st.ok()) return st;
  }
  st = CheckScope(p, roles, group, method);
  if (!st.ok()) return st;
  if (principal != nullptr) *principal = std::move(p);
  return grpc::Status::OK;
}

grpc::Status CollectorService::CheckSubscribe(const Principal& principal,
                                              const v1::SubscribeRequest& request,
                                              JobSecrets secrets) const {
  grpc::Status st = CheckObserverApart(*auth_, principal, request.consumer_group());
  if (!st.ok()) return st;
  if (request.max_in_flight() < 1 || request.max_in_flight() > kMaxInFlight) {
    return Invalid(absl::StrCat("max_in_flight must be 1 to ", kMaxInFlight));
  }
  if (request.subscriber_name().size() > 200) {
    return Invalid("subscriber_name is longer than 200 bytes");
  }
  if (!request.has_budget_holder()) return grpc::Status::OK;
  st = CheckHolder(request.budget_holder(), "budget_holder");
  if (!st.ok()) return st;
  // A subscription that names a budget holder is a sender's: one with an observer's
  // credential would receive jobs it cannot send (no token, no code).
  if (secrets == JobSecrets::kWithheld) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "budget_holder is for senders: this credential observes (its jobs "
                        "carry no token or code); a sender needs the sender role");
  }
  return grpc::Status::OK;
}

grpc::Status CollectorService::OpenStream(const std::string& credential) {
  absl::MutexLock lock(&streams_mu_);
  int& open = streams_[credential];
  if (open >= limits_.max_streams_per_credential) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat(credential, " already has ", open,
                                     " Subscribe streams open on this collector (at most ",
                                     limits_.max_streams_per_credential,
                                     ", MAILROOM_MAX_STREAMS_PER_CREDENTIAL); close one first"));
  }
  ++open;
  return grpc::Status::OK;
}

grpc::Status CollectorService::AdmitHolder(const grpc::ServerContextBase& context,
                                           const std::string& group,
                                           const std::string& subscriber_id, const char* method,
                                           Principal* principal) const {
  grpc::Status st = Admit(context, kSubscribingRoles, group, method, principal);
  if (!st.ok()) return st;
  if (st = CheckObserverApart(*auth_, *principal, group); !st.ok()) return st;
  if (subscriber_id.empty()) {
    return Invalid("subscriber_id is required (the id of the subscription the jobs came on)");
  }
  if (subscriber_id.size() > 64) return Invalid("subscriber_id is too long");
  return grpc::Status::OK;
}

grpc::ServerWriteReactor<v1::SubscribeResponse>* CollectorService::Subscribe(
    grpc::CallbackServerContext* context, const v1::SubscribeRequest* request) {
  Principal principal;
  grpc::Status st = Admit(*context, kSubscribingRoles, request->consumer_group(), "Subscribe",
                          &principal);
  // Decided once, from the credential alone: only a sender's jobs carry tokens and codes.
  const JobSecrets secrets = principal.ReceivesSecrets() ? JobSecrets::kIncluded
                                                         : JobSecrets::kWithheld;
  if (st.ok()) st = CheckSubscribe(principal, *request, secrets);
  if (st.ok()) st = OpenStream(principal.credential);
  if (!st.ok()) return new ErrorReactor(std::move(st));

  // The collector's cap protects its memory; a subscriber asking for more just gets fewer.
  const int max_in_flight = std::min(static_cast<int>(request->max_in_flight()),
                                     limits_.max_in_flight_cap);
  // A subscription that names a budget holder is a sender: the emails of its group are its to
  // deliver, so a group it creates starts from the earliest unexpired token (a deploy that
  // starts the sender before its group exists loses nothing). An observer chooses.
  if (request->start_from_earliest() || request->has_budget_holder()) {
    dispatcher_->StartFromEarliest(request->consumer_group());
  }
  auto sub = std::make_shared<Subscriber>(NewSubscriptionId(principal), request->consumer_group(),
                                          request->subscriber_name(), max_in_flight, secrets);
  auto* reactor = new SubscribeReactor(sub, [this, credential = principal.credential](
                                                const std::shared_ptr<Subscriber>& s) {
    {
      absl::MutexLock lock(&streams_mu_);
      auto it = streams_.find(credential);
      if (it != streams_.end() && --it->second <= 0) streams_.erase(it);
    }
    hub_->Remove(s);
    metrics_->Add(collector_metrics::kSubscribers, -1, {s->group()});
    LogInfo("subscriber left", {{"group", s->group()}, {"subscriber", ShortId(s->id())}});
    // Its leases stay its own until they run out: the sender behind it may still be sending
    // them, and acknowledges them (on any collector) when it is back. A sender that stops
    // gracefully has handed back what it will not send before closing the stream.
    dispatcher_->HolderLeft(s->group(), s->id(), s->TakeUnsent());
  });
  // Linked before the first dequeue can hand it a job (hub_->Add below).
  if (request->has_budget_holder()) {
    sub->SetBudgetHolder(BoundHolder(principal, request->budget_holder()));
  }
  v1::SubscribeResponse welcome;
  welcome.set_subscriber_id(sub->id());
  welcome.set_lease_duration_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(limits_.lease)));
  welcome.set_secrets_withheld(secrets == JobSecrets::kWithheld);
  hub_->Add(sub);
  sub->Attach(reactor, std::move(welcome));
  metrics_->Add(collector_metrics::kSubscribers, 1, {sub->group()});
  LogInfo("subscriber joined",
          {{"group", sub->group()},
           {"subscriber", ShortId(sub->id())},
           {"name", sub->name()},
           {"budget_holder", ShortId(request->budget_holder())},
           {"max_in_flight", absl::StrCat(max_in_flight)},
           {"secrets", secrets == JobSecrets::kIncluded ? "included" : "withheld"},
           {"requested_max_in_flight", absl::StrCat(request->max_in_flight())}});
  dispatcher_->Kick(sub->group(), /*force=*/true);
  return reactor;
}

std::vector<JobResult> CollectorService::CheckOutcomes(const v1::AcknowledgeRequest& request,
                                                       v1::AcknowledgeResponse* response) const {
  // Each outcome is checked alone: a bad one is rejected (and reported) without losing the
  // valid ones beside it.
  std::vector<JobResult> results;
  results.reserve(request.outcomes_size());
  absl::flat_hash_set<uint64_t> seen;
  for (int i = 0; i < request.outcomes_size(); ++i) {
    const v1::JobOutcome& o = request.outcomes(i);
    // An observer's outcomes are neither SENT nor FAILED (CheckObserverOutcomes), so none
    // carries a cost, a provider id or a recipient to suppress: CheckOutcome allows those
    // only with SENT or FAILED.
    auto r = CheckOutcome(o, limits_.max_cost_micros);
    if (r.ok() && !seen.insert(o.job_id()).second) {
      r = absl::InvalidArgumentError("job_id appears twice in this call");
    }
    if (!r.ok()) {
      v1::RejectedOutcome* rej = response->add_rejected();
      rej->set_job_id(o.job_id());
      rej->set_error(std::string(r.status().message()));
      metrics_->Add(collector_metrics::kRejectedOutcomes, 1, {request.consumer_group()});
      continue;
    }
    results.push_back(*std::move(r));
  }
  return results;
}

grpc::Status CollectorService::ScopeSuppressions(const Principal& principal,
                                                 const std::string& group,
                                                 std::vector<JobResult>* results) const {
  // The suppression list applies to every group: only a credential whose scope covers every
  // group there is may add to it. From any other, the outcome is recorded and the address
  // stays deliverable, here and in every other group.
  const bool suppresses = std::any_of(results->begin(), results->end(),
                                      [](const JobResult& r) { return r.suppress_recipient; });
  if (!suppresses || principal.all_groups) return grpc::Status::OK;
  auto groups = store_->GroupNames();
  if (!groups.ok()) return ToGrpc(groups.status());
  if (std::all_of(groups->begin(), groups->end(),
                  [&](const std::string& g) { return principal.InGroup(g); })) {
    return grpc::Status::OK;
  }
  int unscoped = 0;
  for (JobResult& r : *results) {
    unscoped += r.suppress_recipient ? 1 : 0;
    r.suppress_recipient = false;
  }
  if (unscoped > 0) metrics_->Add(collector_metrics::kSuppressionsNotScoped, unscoped, {group});
  return grpc::Status::OK;
}

grpc::Status CollectorService::Acknowledge(grpc::ServerContext* context,
                                           const v1::AcknowledgeRequest* request,
                                           v1::AcknowledgeResponse* response) {
  Principal principal;
  grpc::Status st = AdmitHolder(*context, request->consumer_group(), request->subscriber_id(),
                                "Acknowledge", &principal);
  if (!st.ok()) return st;
  if (request->outcomes_size() == 0) return Invalid("outcomes is empty");
  if (request->outcomes_size() > kMaxIdsPerCall) {
    return Invalid(absl::StrCat("at most ", kMaxIdsPerCall, " outcomes per call"));
  }
  if (st = CheckSubscription(request->subscriber_id(), principal); !st.ok()) return st;
  if (st = CheckObserverOutcomes(principal, *request); !st.ok()) return st;
  std::vector<JobResult> results = CheckOutcomes(*request, response);
  if (st = ScopeSuppressions(principal, request->consumer_group(), &results); !st.ok()) return st;
  absl::flat_hash_set<uint64_t> done;
  if (!results.empty()) {
    auto recorded = store_->Ack(request->consumer_group(), request->subscriber_id(), results);
    if (!recorded.ok()) return ToGrpc(recorded.status());
    done.insert(recorded->begin(), recorded->end());
  }
  std::vector<uint64_t> all;
  all.reserve(request->outcomes_size());
  std::map<v1::Outcome, int> recorded_by_outcome;  // one metric update per kind, not per job
  for (const auto& o : request->outcomes()) {
    all.push_back(o.job_id());
    if (done.count(o.job_id()) > 0) {
      ++recorded_by_outcome[o.outcome()];
    } else {
      response->add_ignored_job_ids(o.job_id());
    }
  }
  for (const auto& [outcome, n] : recorded_by_outcome) {
    metrics_->Add(collector_metrics::kAcknowledged, n,
                  {request->consumer_group(), OutcomeName(outcome)});
  }
  response->set_recorded(static_cast<uint32_t>(done.size()));
  // The caller no longer holds the jobs it named (recorded, or not its lease any more): free
  // its own room. Nobody else's in-flight count is touched. Jobs handed back (RETRY, DEFER)
  // are due again: dequeue for the group even if no member looked starved.
  const bool requeued = recorded_by_outcome.count(v1::OUTCOME_RETRY) > 0 ||
                        recorded_by_outcome.count(v1::OUTCOME_DEFER) > 0;
  if (hub_->Forget(request->consumer_group(), request->subscriber_id(), all) || requeued) {
    dispatcher_->Kick(request->consumer_group(), /*force=*/requeued);
  }
  return grpc::Status::OK;
}

grpc::Status CollectorService::RenewLeases(grpc::ServerContext* context,
                                           const v1::RenewLeasesRequest* request,
                                           v1::RenewLeasesResponse* response) {
  Principal principal;
  grpc::Status st = AdmitHolder(*context, request->consumer_group(), request->subscriber_id(),
                                "RenewLeases", &principal);
  if (!st.ok()) return st;
  if (request->job_ids_size() == 0) return Invalid("job_ids is empty");
  if (request->job_ids_size() > kMaxIdsPerCall) {
    return Invalid(absl::StrCat("at most ", kMaxIdsPerCall, " job_ids per call"));
  }
  if (request->attempts_size() != 0 && request->attempts_size() != request->job_ids_size()) {
    return Invalid("attempts must be empty or as long as job_ids");
  }
  if (st = CheckSubscription(request->subscriber_id(), principal); !st.ok()) return st;
  std::vector<uint64_t> ids(request->job_ids().begin(), request->job_ids().end());
  std::vector<uint32_t> attempts(request->attempts().begin(), request->attempts().end());
  absl::Time until = absl::Now() + limits_.lease;
  auto renewed = store_->Renew(request->consumer_group(), request->subscriber_id(), ids, attempts,
                               limits_.lease);
  if (!renewed.ok()) return ToGrpc(renewed.status());
  absl::flat_hash_set<uint64_t> kept(renewed->begin(), renewed->end());
  std::vector<uint64_t> lost;
  for (uint64_t id : ids) {
    if (kept.count(id) == 0) {
      response->add_lost_job_ids(id);
      lost.push_back(id);
    }
  }
  response->set_lease_expires_at_ms(absl::ToUnixMillis(until));
  if (!lost.empty() && hub_->Forget(request->consumer_group(), request->subscriber_id(), lost)) {
    dispatcher_->Kick(request->consumer_group(), /*force=*/false);
  }
  return grpc::Status::OK;
}

grpc::Status CollectorService::GetQueueStats(grpc::ServerContext* context,
                                             const v1::GetQueueStatsRequest* request,
                                             v1::GetQueueStatsResponse* response) {
  Principal principal;
  grpc::Status st = Admit(*context, kRoleOperator, request->consumer_group(), "GetQueueStats",
                          &principal, /*group_optional=*/true);
  if (!st.ok()) return st;
  auto stats = store_->Stats(request->consumer_group());
  if (!stats.ok()) return ToGrpc(stats.status());
  if (stats->empty() && !request->consumer_group().empty()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no consumer group \"", request->consumer_group(), "\""));
  }
  for (const GroupStatsRow& s : *stats) {
    // Without a group: every group this credential may use.
    if (!principal.InGroup(s.group)) continue;
    v1::GroupStats* g = response->add_groups();
    g->set_consumer_group(s.group);
    g->set_depth(s.depth);
    g->set_lag_seconds(s.lag_seconds);
    g->set_in_flight(s.in_flight);
    g->set_waiting_retry(s.waiting_retry);
    g->set_sent(s.sent);
    g->set_failed(s.failed);
    g->set_expired(s.expired);
    g->set_superseded(s.superseded);
    g->set_rate_limited(s.rate_limited);
    g->set_suppressed(s.suppressed);
    g->set_subscribers(static_cast<uint32_t>(hub_->Count(s.group)));
  }
  return grpc::Status::OK;
}

grpc::Status CollectorService::ListFailures(grpc::ServerContext* context,
                                            const v1::ListFailuresRequest* request,
                                            v1::ListFailuresResponse* response) {
  Principal principal;
  grpc::Status st = Admit(*context, kRoleOperator, request->consumer_group(), "ListFailures",
                          &principal);
  if (!st.ok()) return st;
  if (request->limit() > 1000) return Invalid("limit must be at most 1000");
  int limit = request->limit() == 0 ? 50 : static_cast<int>(request->limit());
  if (operators_ == nullptr) return NoOperatorStore();
  AuditedCall audit = Audited(principal, "ListFailures", request->consumer_group(),
                              absl::StrCat("limit ", limit));
  st = audit.Begin();
  if (!st.ok()) return st;
  auto failures = operators_->Failures(request->consumer_group(), limit);
  if (!failures.ok()) return audit.End(ToGrpc(failures.status()));
  for (const FailureRow& f : *failures) {
    v1::Failure* out = response->add_failures();
    out->set_job_id(f.id);
    out->set_action(WireAction(f.action));
    out->set_action_name(f.action);
    out->set_email(f.email);
    out->set_reason(f.reason);
    out->set_attempts(f.attempts);
    out->set_failed_at(f.failed_at);
  }
  return audit.End(grpc::Status::OK, absl::StrCat(failures->size(), " failures"));
}

grpc::Status CollectorService::Requeue(grpc::ServerContext* context,
                                       const v1::RequeueRequest* request,
                                       v1::RequeueResponse* response) {
  Principal principal;
  grpc::Status st = Admit(*context, kRoleOperator, request->consumer_group(), "Requeue",
                          &principal);
  if (!st.ok()) return st;
  if (request->job_ids_size() > kMaxIdsPerCall) {
    return Invalid(absl::StrCat("at most ", kMaxIdsPerCall, " job_ids per call"));
  }
  std::vector<uint64_t> ids(request->job_ids().begin(), request->job_ids().end());
  if (operators_ == nullptr) return NoOperatorStore();
  AuditedCall audit = Audited(principal, "Requeue", request->consumer_group(),
                              ids.empty() ? "every failed job"
                                          : absl::StrCat("jobs ", absl::StrJoin(ids, ",")));
  st = audit.Begin();
  if (!st.ok()) return st;
  auto n = operators_->Requeue(request->consumer_group(), ids);
  if (!n.ok()) return audit.End(ToGrpc(n.status()));
  response->set_requeued(static_cast<uint32_t>(*n));
  LogInfo("requeued failed jobs",
          {{"group", request->consumer_group()}, {"count", absl::StrCat(*n)}});
  if (*n > 0) dispatcher_->Kick(request->consumer_group(), /*force=*/true);
  return audit.End(grpc::Status::OK, absl::StrCat("requeued ", *n));
}

grpc::Status CollectorService::GetUsage(grpc::ServerContext* context,
                                        const v1::GetUsageRequest* request,
                                        v1::GetUsageResponse* response) {
  grpc::Status st = Admit(*context, kAllRoles | kRoleObserver, request->consumer_group(),
                          "GetUsage");
  if (!st.ok()) return st;
  // A group that does not exist (yet) has spent nothing.
  auto usage = store_->Usage(request->consumer_group());
  if (!usage.ok()) return ToGrpc(usage.status());
  response->set_month(usage->month);
  response->set_sent(usage->sent);
  response->set_cost_micros(usage->cost_micros);
  return grpc::Status::OK;
}

grpc::Status CollectorService::AdmitEveryGroup(const grpc::ServerContextBase& context,
                                               const char* method, const char* what,
                                               Principal* principal) const {
  grpc::Status st = Admit(context, kRoleOperator, "", method, principal,
                          /*group_optional=*/true);
  if (!st.ok()) return st;
  // It applies to every group: an operator of some groups only may not change (or read) what
  // every other group delivers.
  if (!principal->all_groups) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat(method,
                                     " needs an operator credential for every consumer "
                                     "group (`*`): ",
                                     what));
  }
  return grpc::Status::OK;
}

grpc::Status CollectorService::ListSuppressions(grpc::ServerContext* context,
                                                const v1::ListSuppressionsRequest* request,
                                                v1::ListSuppressionsResponse* response) {
  Principal principal;
  grpc::Status st = AdmitEveryGroup(*context, "ListSuppressions",
                                    "the suppression list applies to all", &principal);
  if (!st.ok()) return st;
  if (request->page_size() > kMaxSuppressionsPage) {
    return Invalid(absl::StrCat("page_size must be at most ", kMaxSuppressionsPage));
  }
  SuppressionQuery q;
  q.limit = request->page_size() == 0 ? 100 : static_cast<int>(request->page_size());
  if (request->reason() != v1::SUPPRESSION_REASON_UNSPECIFIED) {
    q.reason = SuppressionReasonName(request->reason());
    if (q.reason.empty()) return Invalid("reason is unknown");
  }
  if (request->page_token().size() > 254 || request->address_prefix().size() > 254) {
    return Invalid("page_token and address_prefix are at most 254 characters");
  }
  if (!CleanReason(request->page_token()).ok() || !CleanReason(request->address_prefix()).ok()) {
    return Invalid("page_token and address_prefix must be valid UTF-8 without NUL");
  }
  q.after = request->page_token();
  q.prefix = absl::AsciiStrToLower(absl::StripLeadingAsciiWhitespace(request->address_prefix()));
  if (operators_ == nullptr) return NoOperatorStore();
  AuditedCall audit = Audited(principal, "ListSuppressions", "",
                              absl::StrCat("prefix \"", q.prefix, "\" after \"", q.after, "\""));
  st = audit.Begin();
  if (!st.ok()) return st;
  auto rows = operators_->ListSuppressions(q);
  if (!rows.ok()) return audit.End(ToGrpc(rows.status()));
  for (const SuppressionRow& row : *rows) ToProto(row, response->add_suppressions());
  // A full page may have a next one; an empty next page is cheap to discover.
  if (static_cast<int>(rows->size()) == q.limit)
    response->set_next_page_token(rows->back().address);
  return audit.End(grpc::Status::OK, absl::StrCat(rows->size(), " entries"));
}

grpc::Status CollectorService::AddSuppression(grpc::ServerContext* context,
                                              const v1::AddSuppressionRequest* request,
                                              v1::Suppression* response) {
  Principal principal;
  grpc::Status st = AdmitEveryGroup(*context, "AddSuppression",
                                    "the suppression list applies to all", &principal);
  if (!st.ok()) return st;
  auto address = NormalizeAddress(request->address());
  if (!address.ok()) return ToGrpc(address.status());
  SuppressionRow row;
  row.address = *std::move(address);
  row.reason = request->reason() == v1::SUPPRESSION_REASON_UNSPECIFIED
                   ? "manual"
                   : SuppressionReasonName(request->reason());
  if (row.reason.empty()) return Invalid("reason is unknown");
  if (request->expires_at() < 0 ||
      (request->expires_at() != 0 && request->expires_at() <= absl::ToUnixSeconds(absl::Now()))) {
    return Invalid("expires_at must be in the future (Unix seconds), or 0 for never");
  }
  row.expires_at = request->expires_at();
  auto source = CleanReason(request->source().empty() ? "operator" : request->source());
  if (!source.ok()) return Invalid("source must be valid UTF-8 without NUL");
  row.source = *std::move(source);
  if (operators_ == nullptr) return NoOperatorStore();
  AuditedCall audit = Audited(principal, "AddSuppression", "",
                              absl::StrCat(row.address, " reason ", row.reason, " source ",
                                           row.source));
  st = audit.Begin();
  if (!st.ok()) return st;
  auto stored = operators_->AddSuppression(row);
  if (!stored.ok()) return audit.End(ToGrpc(stored.status()));
  ToProto(*stored, response);
  // The address itself is personal data: logged only as its domain.
  LogInfo("suppression added",
          {{"domain", row.address.substr(row.address.rfind('@') + 1)}, {"reason", row.reason}});
  return audit.End(grpc::Status::OK, "suppressed");
}

grpc::Status CollectorService::RemoveSuppression(grpc::ServerContext* context,
                                                 const v1::RemoveSuppressionRequest* request,
                                                 v1::RemoveSuppressionResponse* response) {
  Principal principal;
  grpc::Status st = AdmitEveryGroup(*context, "RemoveSuppression",
                                    "the suppression list applies to all", &principal);
  if (!st.ok()) return st;
  auto address = NormalizeAddress(request->address());
  if (!address.ok()) return ToGrpc(address.status());
  auto why = CleanReason(request->reason());
  if (!why.ok()) return Invalid("reason must be valid UTF-8 without NUL");
  if (operators_ == nullptr) return NoOperatorStore();
  AuditedCall audit = Audited(principal, "RemoveSuppression", "",
                              why->empty() ? *address : absl::StrCat(*address, " reason ", *why));
  st = audit.Begin();
  if (!st.ok()) return st;
  auto removed = operators_->RemoveSuppression(*address);
  if (!removed.ok()) return audit.End(ToGrpc(removed.status()));
  ToProto(*removed, response->mutable_removed());
  LogInfo("suppression removed",
          {{"domain", address->substr(address->rfind('@') + 1)}, {"reason", removed->reason}});
  return audit.End(grpc::Status::OK, absl::StrCat("removed ", removed->reason));
}

namespace {

grpc::Status NoBudgets() {
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      "group budgets are not available on this collector");
}

void ToProto(const GroupBudgetRow& b, v1::GroupBudget* out) {
  out->set_consumer_group(b.group);
  out->set_month(b.month);
  out->set_unlimited(!b.monthly_budget_micros.has_value());
  out->set_monthly_budget_micros(b.monthly_budget_micros.value_or(0));
  out->set_budget_is_default(b.budget_is_default);
  out->set_recovery_reserve_percent(b.recovery_reserve_percent);
  out->set_reserve_is_default(b.reserve_is_default);
  out->set_burst(b.burst);
  out->set_committed_micros(b.committed_micros);
  out->set_granted_micros(b.granted_micros);
  out->set_returned_micros(b.returned_micros);
  out->set_outstanding_micros(b.outstanding_micros);
  out->set_sent(b.sent);
  out->set_spent_micros(b.spent_micros);
  out->set_pace_micros_per_second(b.pace_micros_per_second);
}

}  // namespace

grpc::Status CollectorService::AcquireBudget(grpc::ServerContext* context,
                                             const v1::AcquireBudgetRequest* request,
                                             v1::AcquireBudgetResponse* response) {
  Principal principal;
  grpc::Status st = Admit(*context, kRoleSubscriber, request->consumer_group(), "AcquireBudget",
                          &principal);
  if (!st.ok()) return st;
  if (st = CheckHolder(request->holder()); !st.ok()) return st;
  if (request->emails() < 1 || request->emails() > kMaxGrantEmails) {
    return Invalid(absl::StrCat("emails must be 1 to ", kMaxGrantEmails));
  }
  if (request->price_micros() < limits_.min_price_micros ||
      request->price_micros() > limits_.max_cost_micros) {
    return Invalid(absl::StrCat("price_micros must be ", limits_.min_price_micros, " to ",
                                limits_.max_cost_micros,
                                " (MAILROOM_MIN_PRICE_MICROS to MAILROOM_MAX_COST_MICROS)"));
  }
  if (budgets_ == nullptr) return NoBudgets();
  auto grant = budgets_->Acquire(
      {request->consumer_group(), BoundHolder(principal, request->holder()),
       static_cast<int>(request->emails()), request->recovery(), request->price_micros()});
  if (!grant.ok()) return ToGrpc(grant.status());
  response->set_grant_id(SealGrantId(principal, grant->grant_id));
  response->set_emails(grant->emails);
  if (grant->emails > 0) {
    response->set_expires_in_ms(
        std::max<int64_t>(0, absl::ToInt64Milliseconds(grant->expires_at - absl::Now())));
  }
  response->set_retry_after_ms(absl::ToInt64Milliseconds(grant->retry_after));
  response->set_exhausted(grant->exhausted);
  response->set_pace_per_second(grant->pace_per_second);
  const char* result = grant->emails > 0 ? "granted" : grant->exhausted ? "exhausted" : "paced";
  metrics_->Add(collector_metrics::kBudgetGrants, 1, {request->consumer_group(), result});
  metrics_->Add(collector_metrics::kBudgetGrantedEmails, grant->emails,
                {request->consumer_group()});
  return grpc::Status::OK;
}

grpc::Status CollectorService::ReturnBudget(grpc::ServerContext* context,
                                            const v1::ReturnBudgetRequest* request,
                                            v1::ReturnBudgetResponse* response) {
  Principal principal;
  grpc::Status st = Admit(*context, kRoleSubscriber, request->consumer_group(), "ReturnBudget",
                          &principal);
  if (!st.ok()) return st;
  if (st = CheckHolder(request->holder()); !st.ok()) return st;
  if (request->grant_id() == 0) return Invalid("grant_id is required");
  if (request->emails() < 1 || request->emails() > kMaxGrantEmails) {
    return Invalid(absl::StrCat("emails must be 1 to ", kMaxGrantEmails));
  }
  if (budgets_ == nullptr) return NoBudgets();
  // Another credential's grant id opens to an unrelated value, often beyond any BIGINT id:
  // not a grant of this holder, so nothing is returned.
  const uint64_t grant_id = OpenGrantId(principal, request->grant_id());
  if (grant_id > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    response->set_returned(0);
    return grpc::Status::OK;
  }
  auto n = budgets_->Return(request->consumer_group(), BoundHolder(principal, request->holder()),
                            grant_id, static_cast<int>(request->emails()));
  if (!n.ok()) return ToGrpc(n.status());
  response->set_returned(*n);
  metrics_->Add(collector_metrics::kBudgetReturnedEmails, *n, {request->consumer_group()});
  return grpc::Status::OK;
}

grpc::Status CollectorService::GetGroupBudget(grpc::ServerContext* context,
                                              const v1::GetGroupBudgetRequest* request,
                                              v1::GroupBudget* response) {
  grpc::Status st = Admit(*context, kRoleOperator, request->consumer_group(), "GetGroupBudget");
  if (!st.ok()) return st;
  if (budgets_ == nullptr) return NoBudgets();
  auto b = budgets_->Get(request->consumer_group());
  if (!b.ok()) return ToGrpc(b.status());
  ToProto(*b, response);
  return grpc::Status::OK;
}

grpc::Status CollectorService::SetGroupBudget(grpc::ServerContext* context,
                                              const v1::SetGroupBudgetRequest* request,
                                              v1::GroupBudget* response) {
  Principal principal;
  grpc::Status st = Admit(*context, kRoleOperator, request->consumer_group(), "SetGroupBudget",
                          &principal);
  if (!st.ok()) return st;
  BudgetSettings s;
  s.group = request->consumer_group();
  if (request->has_monthly_budget_micros()) {
    if (request->default_budget()) {
      return Invalid("monthly_budget_micros and default_budget exclude each other");
    }
    if (request->monthly_budget_micros() < 0) return Invalid("monthly_budget_micros must be >= 0");
    s.monthly_budget_micros = request->monthly_budget_micros();
  }
  s.default_budget = request->default_budget();
  if (request->has_recovery_reserve_percent()) {
    if (request->default_reserve()) {
      return Invalid("recovery_reserve_percent and default_reserve exclude each other");
    }
    if (request->recovery_reserve_percent() > 100) {
      return Invalid("recovery_reserve_percent must be 0 to 100");
    }
    s.recovery_reserve_percent = static_cast<int>(request->recovery_reserve_percent());
  }
  s.default_reserve = request->default_reserve();
  if (request->has_burst()) {
    if (request->burst() < 1 || request->burst() > 100000) {
      return Invalid("burst must be 1 to 100000");
    }
    s.burst = static_cast<int>(request->burst());
  }
  if (budgets_ == nullptr) return NoBudgets();
  AuditedCall audit = Audited(principal, "SetGroupBudget", s.group, request->ShortDebugString());
  st = audit.Begin();
  if (!st.ok()) return st;
  auto b = budgets_->Set(s);
  if (!b.ok()) return audit.End(ToGrpc(b.status()));
  LogInfo("group budget set", {{"group", s.group},
                               {"budget_micros", b->monthly_budget_micros.has_value()
                                                     ? absl::StrCat(*b->monthly_budget_micros)
                                                     : std::string("unlimited")},
                               {"reserve_percent", absl::StrCat(b->recovery_reserve_percent)},
                               {"burst", absl::StrCat(b->burst)}});
  ToProto(*b, response);
  return audit.End(grpc::Status::OK, "set");
}

namespace {

void ToProto(const FoundEmail& e, v1::EmailRecord* out) {
  out->set_job_id(e.job_id);
  out->set_account_id(e.account_id);
  out->set_action_name(e.action);
  out->set_address(e.address);
  out->set_state(e.state);
  out->set_reason(e.reason);
  out->set_requested_at(e.requested_at);
  out->set_expires_at(e.expires_at);
  out->set_handouts(static_cast<uint32_t>(e.handouts));
  out->set_failures(static_cast<uint32_t>(e.failures));
  out->set_provider(e.provider);
  out->set_provider_message_id(e.provider_message_id);
  for (const LedgerEntry& l : e.ledger) {
    v1::LedgerEvent* x = out->add_ledger();
    x->set_event_id(l.event_id);
    x->set_event(l.event);
    x->set_at_ms(l.at_ms);
    x->set_handout(static_cast<uint32_t>(l.handout));
    x->set_subscriber(l.subscriber);
    x->set_provider(l.provider);
    x->set_provider_message_id(l.provider_message_id);
    x->set_cost_micros(l.cost_micros);
    x->set_detail(l.detail);
  }
}

}  // namespace

grpc::Status CollectorService::FindEmails(grpc::ServerContext* context,
                                          const v1::FindEmailsRequest* request,
                                          v1::FindEmailsResponse* response) {
  Principal principal;
  grpc::Status st = Admit(*context, kRoleOperator, request->consumer_group(), "FindEmails",
                          &principal);
  if (!st.ok()) return st;
  if (request->address().empty() == (request->account_id() == 0)) {
    return Invalid("give exactly one of address and account_id");
  }
  if (request->limit() > 100) return Invalid("limit must be at most 100");
  std::string address;
  if (!request->address().empty()) {
    auto a = NormalizeAddress(request->address());
    if (!a.ok()) return ToGrpc(a.status());
    address = *std::move(a);
  }
  if (operators_ == nullptr) return NoOperatorStore();
  AuditedCall audit = Audited(principal, "FindEmails", request->consumer_group(),
                              address.empty() ? absl::StrCat("account ", request->account_id())
                                              : address);
  st = audit.Begin();
  if (!st.ok()) return st;
  const int limit = request->limit() == 0 ? 20 : static_cast<int>(request->limit());
  auto found = operators_->FindEmails(request->consumer_group(), address, request->account_id(),
                                      limit);
  if (!found.ok()) return audit.End(ToGrpc(found.status()));
  for (const FoundEmail& e : found->emails) ToProto(e, response->add_emails());
  // The suppression list is every group's: only an operator of `*` reads it.
  if (found->suppression.has_value() && principal.all_groups) {
    ToProto(*found->suppression, response->mutable_suppression());
    response->set_suppressed(true);
  }
  return audit.End(grpc::Status::OK, absl::StrCat(found->emails.size(), " emails"));
}

grpc::Status CollectorService::ListAudit(grpc::ServerContext* context,
                                         const v1::ListAuditRequest* request,
                                         v1::ListAuditResponse* response) {
  Principal principal;
  grpc::Status st = AdmitEveryGroup(*context, "ListAudit",
                                    "the audit names the calls of every group", &principal);
  if (!st.ok()) return st;
  if (request->limit() > 1000) return Invalid("limit must be at most 1000");
  if (operators_ == nullptr) return NoOperatorStore();
  const int limit = request->limit() == 0 ? 100 : static_cast<int>(request->limit());
  // Who read the audit is in it too (the audit names every address looked up).
  AuditedCall audit = Audited(principal, "ListAudit", "",
                              absl::StrCat("before ", request->before_id(), " limit ", limit));
  st = audit.Begin();
  if (!st.ok()) return st;
  auto entries = operators_->ListAudit(request->before_id(), limit);
  if (!entries.ok()) return audit.End(ToGrpc(entries.status()));
  for (const AuditEntryRow& e : *entries) {
    v1::AuditEntry* out = response->add_entries();
    out->set_id(e.id);
    out->set_at_ms(e.at_ms);
    out->set_credential(e.record.credential);
    out->set_method(e.record.method);
    out->set_consumer_group(e.record.group);
    out->set_target(e.record.target);
    out->set_outcome(e.outcome);
  }
  return audit.End(grpc::Status::OK, absl::StrCat(entries->size(), " entries"));
}

grpc::Status CollectorService::SetPaused(grpc::ServerContext* context, const std::string& group,
                                         bool paused, const std::string& reason,
                                         v1::GroupPause* response) {
  const char* method = paused ? "PauseGroup" : "ResumeGroup";
  Principal principal;
  grpc::Status st = Admit(*context, kRoleOperator, group, method, &principal);
  if (!st.ok()) return st;
  auto why = CleanReason(reason);
  if (!why.ok()) return Invalid("reason must be valid UTF-8 without NUL");
  if (operators_ == nullptr) return NoOperatorStore();
  AuditedCall audit = Audited(principal, method, group, why->empty() ? "" : "reason " + *why);
  st = audit.Begin();
  if (!st.ok()) return st;
  auto pause = operators_->SetPaused(group, paused, *why);
  if (!pause.ok()) return audit.End(ToGrpc(pause.status()));
  response->set_consumer_group(group);
  response->set_paused(pause->paused);
  response->set_paused_at(pause->paused_at);
  response->set_reason(pause->reason);
  LogInfo(paused ? "group paused by an operator" : "group resumed by an operator",
          {{"group", group}, {"credential", principal.credential}});
  if (!paused) dispatcher_->Kick(group, /*force=*/true);
  return audit.End(grpc::Status::OK, paused ? "paused" : "resumed");
}

grpc::Status CollectorService::PauseGroup(grpc::ServerContext* context,
                                          const v1::PauseGroupRequest* request,
                                          v1::GroupPause* response) {
  return SetPaused(context, request->consumer_group(), true, request->reason(), response);
}

grpc::Status CollectorService::ResumeGroup(grpc::ServerContext* context,
                                           const v1::ResumeGroupRequest* request,
                                           v1::GroupPause* response) {
  return SetPaused(context, request->consumer_group(), false, "", response);
}

}  // namespace mailroom
