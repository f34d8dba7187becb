#include "sender/lease/leased_job.h"

#include <algorithm>
#include <utility>

#include "common/utf8.h"

namespace mailroom {

namespace {

OutcomeReport Of(uint64_t job_id, v1::Outcome outcome, std::string reason) {
  OutcomeReport r;
  r.job_id = job_id;
  r.outcome = outcome;
  r.reason = std::move(reason);
  return r;
}

}  // namespace

OutcomeReport OutcomeReport::Sent(uint64_t job_id, int64_t cost_micros,
                                  std::string provider_message_id, std::string provider) {
  OutcomeReport r = Of(job_id, v1::OUTCOME_SENT, "");
  r.cost_micros = cost_micros;
  r.provider_message_id = std::move(provider_message_id);
  r.provider = std::move(provider);
  return r;
}

OutcomeReport OutcomeReport::Failed(uint64_t job_id, std::string reason, bool suppress_recipient) {
  OutcomeReport r = Of(job_id, v1::OUTCOME_FAILED, std::move(reason));
  r.suppress_recipient = suppress_recipient;
  return r;
}

OutcomeReport OutcomeReport::Expired(uint64_t job_id, std::string reason) {
  return Of(job_id, v1::OUTCOME_EXPIRED, std::move(reason));
}

OutcomeReport OutcomeReport::Retry(uint64_t job_id, std::string reason, absl::Duration after) {
  OutcomeReport r = Of(job_id, v1::OUTCOME_RETRY, std::move(reason));
  r.retry_after = after;
  return r;
}

OutcomeReport OutcomeReport::Defer(uint64_t job_id, std::string reason, absl::Duration after) {
  OutcomeReport r = Of(job_id, v1::OUTCOME_DEFER, std::move(reason));
  r.retry_after = after;
  return r;
}

v1::JobOutcome OutcomeReport::ToProto() const {
  v1::JobOutcome o;
  o.set_job_id(job_id);
  o.set_outcome(outcome);
  o.set_reason(SanitizeUtf8(reason, 1000));
  o.set_retry_after_ms(static_cast<uint32_t>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(retry_after), 0, 31LL * 24 * 3600 * 1000)));
  o.set_cost_micros(cost_micros);
  o.set_suppress_recipient(suppress_recipient && outcome == v1::OUTCOME_FAILED);
  if (outcome == v1::OUTCOME_SENT) {
    o.set_provider_message_id(provider_message_id);
    o.set_provider(provider);
  }
  return o;
}

}  // namespace mailroom
