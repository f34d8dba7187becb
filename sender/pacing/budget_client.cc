#include "sender/pacing/budget_client.h"

#include <openssl/rand.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace mailroom {
namespace {

absl::Status FromGrpc(const grpc::Status& st) {
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
}

}  // namespace

CollectorBudgetClient::CollectorBudgetClient(std::shared_ptr<grpc::Channel> channel,
                                             std::string group, std::string holder,
                                             std::string bearer, absl::Duration timeout)
    : stub_(v1::Collector::NewStub(channel)), group_(std::move(group)), holder_(std::move(holder)),
      bearer_(std::move(bearer)), timeout_(timeout) {}

void CollectorBudgetClient::Prepare(grpc::ClientContext* ctx) const {
  if (!bearer_.empty()) ctx->AddMetadata("authorization", "Bearer " + bearer_);
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
}

absl::StatusOr<v1::AcquireBudgetResponse> CollectorBudgetClient::Acquire(int emails, bool recovery,
                                                                         int64_t price_micros) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::AcquireBudgetRequest req;
  req.set_consumer_group(group_);
  req.set_holder(holder_);
  req.set_emails(emails);
  req.set_recovery(recovery);
  req.set_price_micros(price_micros);
  v1::AcquireBudgetResponse resp;
  grpc::Status st = stub_->AcquireBudget(&ctx, req, &resp);
  if (!st.ok()) return FromGrpc(st);
  return resp;
}

absl::StatusOr<int> CollectorBudgetClient::Return(uint64_t grant_id, int emails) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::ReturnBudgetRequest req;
  req.set_consumer_group(group_);
  req.set_holder(holder_);
  req.set_grant_id(grant_id);
  req.set_emails(emails);
  v1::ReturnBudgetResponse resp;
  grpc::Status st = stub_->ReturnBudget(&ctx, req, &resp);
  if (!st.ok()) return FromGrpc(st);
  return static_cast<int>(resp.returned());
}

std::string MakeHolderName(const std::string& name) {
  // The collector takes printable ASCII without spaces, at most 200 characters.
  std::string clean = name.substr(0, 160);
  for (char& ch : clean) {
    if (ch < 0x21 || ch > 0x7e) ch = '_';
  }
  if (clean.empty()) clean = "sender";
  unsigned char id[6];
  if (RAND_bytes(id, sizeof(id)) != 1) {
    // Unique enough without OpenSSL's generator: the start time in nanoseconds.
    return absl::StrCat(clean, "-", absl::GetCurrentTimeNanos());
  }
  return absl::StrCat(clean, "-",
                      absl::BytesToHexString(
                          absl::string_view(reinterpret_cast<const char*>(id), sizeof(id))));
}

}  // namespace mailroom
