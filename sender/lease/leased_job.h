#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/mailroom/v1/mailroom.pb.h"
#include "sender/lease/lease_state.h"

namespace mailroom {

// The lease a job was handed out under: the subscription that holds it and the attempt (the
// collector's fencing token for this hand-out). Acknowledge and RenewLeases name both.
struct LeaseRef {
  std::string subscriber_id;
  uint32_t attempt = 0;
};

// A job as the LeaseTable hands it out (through the Subscription to the Engine): the job and
// the lease it came with.
struct LeasedJob {
  v1::Job job;
  LeaseRef lease;
};

// One job's outcome as the Engine decides it (one value instead of positional fields).
struct OutcomeReport {
  uint64_t job_id = 0;
  v1::Outcome outcome = v1::OUTCOME_UNSPECIFIED;
  std::string reason;
  absl::Duration retry_after = absl::ZeroDuration();  // RETRY and DEFER
  int64_t cost_micros = 0;                            // SENT only
  bool suppress_recipient = false;                    // FAILED only
  std::string provider_message_id;                    // SENT only
  std::string provider;                               // SENT only: the transport's Name()

  static OutcomeReport Sent(uint64_t job_id, int64_t cost_micros, std::string provider_message_id,
                            std::string provider = "");
  static OutcomeReport Failed(uint64_t job_id, std::string reason, bool suppress_recipient = false);
  static OutcomeReport Expired(uint64_t job_id, std::string reason);
  static OutcomeReport Retry(uint64_t job_id, std::string reason, absl::Duration after);
  static OutcomeReport Defer(uint64_t job_id, std::string reason,
                             absl::Duration after = absl::ZeroDuration());

  // The wire form, without the lease (the holder of the lease adds it): the reason cut to
  // 1000 bytes at a character boundary, the delay clamped to 0..31 days.
  v1::JobOutcome ToProto() const;
};

// What the Engine needs from the holder of its jobs' leases (the LeaseTable).
class LeaseHolder {
 public:
  virtual ~LeaseHolder() = default;
  // What may be done with the job as far as its lease goes (see LeaseState). With kOwned it
  // may set `*send_window` (given, and set to InfiniteDuration, by the caller): how long a
  // send may take and still be reported before the lease could run out.
  virtual LeaseState Check(const LeasedJob& job, absl::Duration* send_window) = 0;
  // Records the job's outcome under its lease (dropped when the lease is not held any more).
  virtual void Report(OutcomeReport outcome) = 0;
};

// Where the Subscription hands the jobs it receives (the Engine).
class JobSink {
 public:
  virtual ~JobSink() = default;
  virtual void Submit(std::vector<LeasedJob> jobs) = 0;
  // The collector reports these jobs' leases lost: do not send them.
  virtual void Drop(const std::vector<uint64_t>& job_ids) = 0;
};

}  // namespace mailroom
