#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "collector/api/auth.h"
#include "collector/store/operator_store.h"
#include "grpcpp/grpcpp.h"

namespace mailroom {

// The name of a gRPC status code as the audit and the docs write it: "OK", "NOT_FOUND", ...
const char* StatusCodeName(grpc::StatusCode code);

// One operator call as the audit records it (docs/security.md, "The operator API"): Begin
// records its start before it runs, so that nothing the audit does not show is ever done or
// read; End records how it ended. Without a store (unit tests of other calls) nothing is
// recorded. One call at a time; not thread-safe.
class AuditedCall {
 public:
  // `store` may be null; `principal` names who (its credential, never a secret).
  AuditedCall(OperatorStore* store, const Principal& principal, const char* method,
              std::string group, std::string target);
  AuditedCall(const AuditedCall&) = delete;
  AuditedCall& operator=(const AuditedCall&) = delete;

  // OK once the start is recorded (or there is no store); UNAVAILABLE when it cannot be: the
  // call must then not run.
  grpc::Status Begin();
  // Records the outcome: the status code's name, then `what` when the call succeeded (what it
  // changed or found) or the error's message. Returns `status`, for `return audit.End(...)`.
  // A record that cannot be written is logged (the call has run).
  grpc::Status End(grpc::Status status, absl::string_view what = "");

 private:
  OperatorStore* const store_;
  AuditRecord record_;
  uint64_t id_ = 0;
};

}  // namespace mailroom
