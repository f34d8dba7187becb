// AuditedCall over a recording OperatorStore: the start is recorded before the call runs (a
// call whose start cannot be recorded is refused), the outcome after, with the status code's
// name and what the call did or why it failed.
#include "collector/api/audit.h"

#include <string>
#include <vector>

#include "collector/store/testing/fake_store.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

// Records the audit; the rest is the fake store's.
class RecordingStore : public testing::FakeStore {
 public:
  absl::StatusOr<uint64_t> BeginAudit(const AuditRecord& r) override {
    if (down) return absl::UnavailableError("connection refused");
    begun.push_back(r);
    return static_cast<uint64_t>(begun.size());
  }
  absl::Status EndAudit(uint64_t id, const std::string& outcome) override {
    ended.emplace_back(id, outcome);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<AuditEntryRow>> ListAudit(uint64_t, int) override {
    return std::vector<AuditEntryRow>{};
  }

  bool down = false;
  std::vector<AuditRecord> begun;
  std::vector<std::pair<uint64_t, std::string>> ended;
};

Principal Operator() {
  Principal p;
  p.credential = "token 3";
  return p;
}

TEST(AuditedCallTest, RecordsTheStartThenTheOutcome) {
  RecordingStore store;
  AuditedCall ok(&store, Operator(), "RemoveSuppression", "", "ann@example.test");
  ASSERT_TRUE(ok.Begin().ok());
  ASSERT_EQ(store.begun.size(), 1u);
  EXPECT_EQ(store.begun[0].credential, "token 3");
  EXPECT_EQ(store.begun[0].method, "RemoveSuppression");
  EXPECT_EQ(store.begun[0].target, "ann@example.test");
  EXPECT_TRUE(store.ended.empty());  // recorded before it runs
  EXPECT_TRUE(ok.End(grpc::Status::OK, "removed hard_bounce").ok());
  ASSERT_EQ(store.ended.size(), 1u);
  EXPECT_EQ(store.ended[0], std::make_pair(uint64_t{1}, std::string("OK: removed hard_bounce")));

  AuditedCall failed(&store, Operator(), "FindEmails", "mailroom", "x@example.test");
  ASSERT_TRUE(failed.Begin().ok());
  grpc::Status st = failed.End(grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown group"));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);  // passed through
  EXPECT_EQ(store.ended[1].second, "NOT_FOUND: unknown group");
}

TEST(AuditedCallTest, ACallThatCannotBeRecordedIsRefused) {
  RecordingStore store;
  store.down = true;
  AuditedCall call(&store, Operator(), "Requeue", "mailroom", "every failed job");
  grpc::Status st = call.Begin();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(st.error_message().find("Requeue was not run"), std::string::npos);
  call.End(grpc::Status::OK);
  EXPECT_TRUE(store.ended.empty());  // nothing began, nothing ends
}

TEST(AuditedCallTest, WithoutAStoreNothingIsRecorded) {
  AuditedCall call(nullptr, Operator(), "Requeue", "mailroom", "");
  EXPECT_TRUE(call.Begin().ok());
  EXPECT_EQ(call.End(grpc::Status(grpc::StatusCode::INTERNAL, "x")).error_code(),
            grpc::StatusCode::INTERNAL);
}

TEST(StatusCodeNameTest, NamesAsGrpcDoes) {
  EXPECT_STREQ(StatusCodeName(grpc::StatusCode::OK), "OK");
  EXPECT_STREQ(StatusCodeName(grpc::StatusCode::PERMISSION_DENIED), "PERMISSION_DENIED");
  EXPECT_STREQ(StatusCodeName(grpc::StatusCode::UNAUTHENTICATED), "UNAUTHENTICATED");
}

}  // namespace
}  // namespace mailroom
