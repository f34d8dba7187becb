#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

#include "collector/api/audit.h"
#include "collector/api/auth.h"
#include "collector/dispatch/dispatcher.h"
#include "collector/dispatch/hub.h"
#include "collector/store/budget_store.h"
#include "collector/store/operator_store.h"
#include "collector/store/store.h"
#include "common/metrics.h"
#include "proto/mailroom/v1/mailroom.grpc.pb.h"

namespace mailroom {

// Limits on request sizes, shared with tests. A Subscribe's max_in_flight beyond the
// collector's MAILROOM_MAX_IN_FLIGHT_CAP (at most kMaxInFlight) is lowered to it.
inline constexpr int kMaxInFlight = 100000;
// MAILROOM_MAX_IN_FLIGHT_CAP's default.
inline constexpr int kDefaultMaxInFlightCap = 10000;
// MAILROOM_MIN_PRICE_MICROS's default: SES's price, 0.10 per 1000 emails.
inline constexpr int64_t kDefaultMinPriceMicros = 100;
// MAILROOM_MAX_COST_MICROS's default: the largest cost one SENT outcome may report.
inline constexpr int64_t kDefaultMaxCostMicros = 1000000;
// MAILROOM_MAX_STREAMS_PER_CREDENTIAL's default.
inline constexpr int kDefaultMaxStreamsPerCredential = 64;
inline constexpr int kMaxIdsPerCall = 10000;
// Reasons longer than this are cut (at a UTF-8 character boundary).
inline constexpr size_t kMaxReasonBytes = 1000;
// The largest page of ListSuppressions.
inline constexpr uint32_t kMaxSuppressionsPage = 1000;
// The most emails one AcquireBudget may ask for (or one ReturnBudget give back), and the
// longest grant holder name.
inline constexpr uint32_t kMaxGrantEmails = 1000;
inline constexpr size_t kMaxHolderBytes = 200;

// What the service enforces besides request sizes.
struct ServiceLimits {
  absl::Duration lease = kDefaultLease;             // MAILROOM_LEASE_MS
  int64_t max_cost_micros = kDefaultMaxCostMicros;  // MAILROOM_MAX_COST_MICROS: per SENT outcome
  int max_in_flight_cap =
      kDefaultMaxInFlightCap;  // MAILROOM_MAX_IN_FLIGHT_CAP: of a Subscribe's window
  // MAILROOM_MAX_STREAMS_PER_CREDENTIAL: Subscribe streams one credential may hold open at
  // once in this process (a client that leaks streams cannot take the whole queue).
  int max_streams_per_credential = kDefaultMaxStreamsPerCredential;
  // MAILROOM_MIN_PRICE_MICROS: the lowest price_micros an AcquireBudget may name, so that no
  // sender can claim a tiny price and draw many times the group's money in emails.
  int64_t min_price_micros = kDefaultMinPriceMicros;
};

// One reported outcome, checked alone (INVALID_ARGUMENT names the problem): known outcome,
// job id and attempt set, a reason for FAILED, cost 0..max (only for SENT), retry delay at most
// 31 days, reason valid UTF-8 without NUL (cut to kMaxReasonBytes).
absl::StatusOr<JobResult> CheckOutcome(const v1::JobOutcome& outcome, int64_t max_cost_micros);
// The reason as stored: rejected if it holds a NUL byte or is not valid UTF-8, else cut at a
// character boundary to at most kMaxReasonBytes.
absl::StatusOr<std::string> CleanReason(absl::string_view reason);
// An address as the suppression list keys it: lower(trim(address)), checked to look like
// local@domain (at most 254 characters, no spaces, controls or <>,;), else INVALID_ARGUMENT.
absl::StatusOr<std::string> NormalizeAddress(absl::string_view address);

// The mailroom.v1.Collector service. Subscribe is a callback-API stream (one reactor per
// subscriber, no thread per stream); the unary calls are synchronous handlers that may block on
// PostgreSQL (they run on gRPC's sync thread pool, never inside a reaction). Every call is
// authenticated and authorised first (Admit): UNAUTHENTICATED without a valid credential,
// INVALID_ARGUMENT for a malformed group, PERMISSION_DENIED outside the credential's roles or
// groups. Thread-safe.
class CollectorService
    : public v1::Collector::WithCallbackMethod_Subscribe<v1::Collector::Service> {
 public:
  CollectorService(Store* store, Hub* hub, Dispatcher* dispatcher, const Authenticator* auth,
                   Metrics* metrics, ServiceLimits limits);

  grpc::ServerWriteReactor<v1::SubscribeResponse>* Subscribe(
      grpc::CallbackServerContext* context, const v1::SubscribeRequest* request) override;
  grpc::Status Acknowledge(grpc::ServerContext* context, const v1::AcknowledgeRequest* request,
                           v1::AcknowledgeResponse* response) override;
  grpc::Status RenewLeases(grpc::ServerContext* context, const v1::RenewLeasesRequest* request,
                           v1::RenewLeasesResponse* response) override;
  grpc::Status GetQueueStats(grpc::ServerContext* context, const v1::GetQueueStatsRequest* request,
                             v1::GetQueueStatsResponse* response) override;
  grpc::Status ListFailures(grpc::ServerContext* context, const v1::ListFailuresRequest* request,
                            v1::ListFailuresResponse* response) override;
  grpc::Status Requeue(grpc::ServerContext* context, const v1::RequeueRequest* request,
                       v1::RequeueResponse* response) override;
  grpc::Status GetUsage(grpc::ServerContext* context, const v1::GetUsageRequest* request,
                        v1::GetUsageResponse* response) override;
  grpc::Status ListSuppressions(grpc::ServerContext* context,
                                const v1::ListSuppressionsRequest* request,
                                v1::ListSuppressionsResponse* response) override;
  grpc::Status AddSuppression(grpc::ServerContext* context,
                              const v1::AddSuppressionRequest* request,
                              v1::Suppression* response) override;
  grpc::Status RemoveSuppression(grpc::ServerContext* context,
                                 const v1::RemoveSuppressionRequest* request,
                                 v1::RemoveSuppressionResponse* response) override;
  // Group budgets (README "Budget"): FAILED_PRECONDITION until SetBudgetStore is called.
  grpc::Status AcquireBudget(grpc::ServerContext* context, const v1::AcquireBudgetRequest* request,
                             v1::AcquireBudgetResponse* response) override;
  grpc::Status ReturnBudget(grpc::ServerContext* context, const v1::ReturnBudgetRequest* request,
                            v1::ReturnBudgetResponse* response) override;
  grpc::Status GetGroupBudget(grpc::ServerContext* context,
                              const v1::GetGroupBudgetRequest* request,
                              v1::GroupBudget* response) override;
  grpc::Status SetGroupBudget(grpc::ServerContext* context,
                              const v1::SetGroupBudgetRequest* request,
                              v1::GroupBudget* response) override;

  // The operator's lookups and the audit (docs/security.md, "The operator API"): these, and
  // ListFailures, Requeue and the suppression calls, are FAILED_PRECONDITION until
  // SetOperatorStore is called. FindEmails, ListFailures, Requeue,
  // the suppression calls, SetGroupBudget, PauseGroup and ResumeGroup are each recorded in the
  // audit before they run (UNAVAILABLE, and nothing done, when the record cannot be written)
  // with their outcome after.
  grpc::Status FindEmails(grpc::ServerContext* context, const v1::FindEmailsRequest* request,
                          v1::FindEmailsResponse* response) override;
  grpc::Status ListAudit(grpc::ServerContext* context, const v1::ListAuditRequest* request,
                         v1::ListAuditResponse* response) override;
  // Audited too; ResumeGroup wakes this collector's dispatch of the group at once.
  grpc::Status PauseGroup(grpc::ServerContext* context, const v1::PauseGroupRequest* request,
                          v1::GroupPause* response) override;
  grpc::Status ResumeGroup(grpc::ServerContext* context, const v1::ResumeGroupRequest* request,
                           v1::GroupPause* response) override;

  // The group budgets behind AcquireBudget/ReturnBudget/Get/SetGroupBudget (not owned). Call
  // before the server starts.
  void SetBudgetStore(BudgetStore* budgets) { budgets_ = budgets; }
  // The operator store behind FindEmails, ListAudit, ListFailures, Requeue, the suppression
  // calls, PauseGroup, ResumeGroup and the audit of operator calls (not owned). Call before the
  // server starts; without it those calls are FAILED_PRECONDITION and no call is audited.
  void SetOperatorStore(OperatorStore* operators) { operators_ = operators; }

 private:
  // The preamble of every call: authenticates, validates `group` (required unless
  // `group_optional` and empty) and checks the caller holds one of `roles` in that group.
  // Fills `principal` (may be null) on success.
  grpc::Status Admit(const grpc::ServerContextBase& context, unsigned roles,
                     const std::string& group, const char* method, Principal* principal = nullptr,
                     bool group_optional = false) const;
  // Admit for the calls on what every group shares (the suppression list, the audit): the
  // operator role for every group (`*`); `what` names it in the refusal.
  grpc::Status AdmitEveryGroup(const grpc::ServerContextBase& context, const char* method,
                               const char* what, Principal* principal) const;
  // PauseGroup's and ResumeGroup's body.
  grpc::Status SetPaused(grpc::ServerContext* context, const std::string& group, bool paused,
                         const std::string& reason, v1::GroupPause* response);
  // An audited call of `principal` (collector/api/audit.h).
  AuditedCall Audited(const Principal& principal, const char* method, std::string group,
                      std::string target) const {
    return AuditedCall(operators_, principal, method, std::move(group), std::move(target));
  }
  // The preamble of the calls of a lease holder (Acknowledge, RenewLeases): Admit with the
  // subscribing roles, an observer kept apart, and a subscriber_id of 1 to 64 bytes.
  grpc::Status AdmitHolder(const grpc::ServerContextBase& context, const std::string& group,
                           const std::string& subscriber_id, const char* method,
                           Principal* principal) const;
  // Subscribe's checks of the request after Admit (INVALID_ARGUMENT, PERMISSION_DENIED).
  grpc::Status CheckSubscribe(const Principal& principal, const v1::SubscribeRequest& request,
                              JobSecrets secrets) const;
  // Counts one more open stream for `credential`, or RESOURCE_EXHAUSTED at
  // MAILROOM_MAX_STREAMS_PER_CREDENTIAL.
  grpc::Status OpenStream(const std::string& credential);
  // Acknowledge's outcomes, each checked alone: the valid ones, and the others added to
  // `response` as rejected.
  std::vector<JobResult> CheckOutcomes(const v1::AcknowledgeRequest& request,
                                       v1::AcknowledgeResponse* response) const;
  // Clears suppress_recipient in `results` unless `principal`'s scope covers every group there
  // is (the suppression list applies to all of them).
  grpc::Status ScopeSuppressions(const Principal& principal, const std::string& group,
                                 std::vector<JobResult>* results) const;

  Store* const store_;
  Hub* const hub_;
  Dispatcher* const dispatcher_;
  const Authenticator* const auth_;
  Metrics* const metrics_;
  const ServiceLimits limits_;
  BudgetStore* budgets_ = nullptr;
  OperatorStore* operators_ = nullptr;
  // Open Subscribe streams per credential (Principal::credential).
  absl::Mutex streams_mu_;
  std::map<std::string, int> streams_ ABSL_GUARDED_BY(streams_mu_);
};

// Maps a Store error to the gRPC status a client should see.
grpc::Status ToGrpc(const absl::Status& status);

}  // namespace mailroom
