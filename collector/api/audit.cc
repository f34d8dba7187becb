#include "collector/api/audit.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace mailroom {

const char* StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

AuditedCall::AuditedCall(OperatorStore* store, const Principal& principal, const char* method,
                         std::string group, std::string target)
    : store_(store), record_{principal.credential, method, std::move(group), std::move(target)} {}

grpc::Status AuditedCall::Begin() {
  if (store_ == nullptr) return grpc::Status::OK;
  auto id = store_->BeginAudit(record_);
  if (!id.ok()) {
    LogWarn("operator call refused: it cannot be audited",
            {{"method", record_.method}, {"error", std::string(id.status().message())}});
    return grpc::Status(
        grpc::StatusCode::UNAVAILABLE,
        absl::StrCat(record_.method,
                     " was not run: the audit cannot be written (retry): ", id.status().message()));
  }
  id_ = *id;
  return grpc::Status::OK;
}

grpc::Status AuditedCall::End(grpc::Status status, absl::string_view what) {
  if (store_ == nullptr || id_ == 0) return status;
  std::string outcome = StatusCodeName(status.error_code());
  const std::string detail = status.ok() ? std::string(what) : status.error_message();
  if (!detail.empty()) absl::StrAppend(&outcome, ": ", detail);
  absl::Status st = store_->EndAudit(id_, outcome);
  if (!st.ok()) {
    LogWarn("operator call's outcome not audited", {{"method", record_.method},
                                                    {"audit_id", absl::StrCat(id_)},
                                                    {"error", std::string(st.message())}});
  }
  return status;
}

}  // namespace mailroom
