#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/clock.h"
#include "proto/mailroom/v1/mailroom.pb.h"
#include "sender/lease/lease_state.h"
#include "sender/lease/leased_job.h"

namespace mailroom {

// The leases this process holds on jobs, and the outcomes reported under them that the
// collector has not recorded yet: the one place the stream (Receive), the engine (Check,
// Report), the acknowledgements (NextBatch, Recorded, Returned) and the renewals
// (HeldBySubscription, ApplyRenewal) meet. It speaks no gRPC.
//
// Each lease is the subscription id and attempt the job came with and when the lease runs out
// as far as this process knows (arrival + lease, pushed on by each renewal). A lease the
// collector no longer counts as ours is never acted on: Check turns kLost when the collector
// reports it lost or when it would run out before a send could finish (for example while the
// collector is unreachable). Lease deadlines, the outcome stall and every wait run on `clock`.
//
// A job is never sent twice by one sender because the collector handed it out again before
// its outcome was recorded (a collector that crashed and came back after the lease ran out
// hands out again the jobs whose outcomes it never got): a job received while its final outcome
// (SENT, FAILED, EXPIRED) waits for acknowledgement, or after the collector ignored that outcome
// (the lease was no longer ours), is not sent again: its outcome is reported under the new
// lease. Ignored outcomes are kept for this for kUnrecordedKept, at most kMaxUnrecorded of them.
// Thread-safe.
class LeaseTable : public LeaseHolder {
 public:
  // The shortest send window (Check) a send is started with (a quarter of the lease when that
  // is shorter).
  static constexpr absl::Duration kMinSendWindow = absl::Seconds(1);
  // How long a final outcome the collector ignored is kept, and how many at most, to be
  // reported again if its job is handed to this process again.
  static constexpr absl::Duration kUnrecordedKept = absl::Minutes(10);
  static constexpr size_t kMaxUnrecorded = 100000;

  explicit LeaseTable(Clock* clock = RealClock::Get());

  // --- The stream ---
  // The lease length the collector announced (on each new subscription).
  void SetLease(absl::Duration lease);
  // The lease length the collector announced (0 before the first subscription).
  absl::Duration lease() const;
  // Takes the leases of jobs received on subscription `subscriber_id`, each until now +
  // `left` (what the collector said is left as it wrote them; 0 or more than the lease: the
  // whole lease), and returns the jobs to send with their leases, in order. A job held already
  // is held under the newest lease. A job whose final outcome was reported and not recorded
  // (queued, in flight, or ignored by the collector) is not returned: that outcome is queued
  // again under the new lease.
  std::vector<LeasedJob> Receive(const std::string& subscriber_id, absl::Duration left,
                                 std::vector<v1::Job> jobs);

  // --- The engine (LeaseHolder) ---
  // Check(job.job.job_id(), send_window).
  LeaseState Check(const LeasedJob& job, absl::Duration* send_window) override;
  // Whether `id` may be sent now. kLost: the collector reported the lease lost, or it would
  // run out before a send could be reported (then it is forgotten: not renewed, and the
  // collector hands the job out again when it runs out). kWait: ours, but outcomes are not
  // getting through (the oldest unrecorded one is older than a tenth of the lease, at most
  // 2 s): sending now could not be reported in time; also while the lease left less a quarter
  // is under kMinSendWindow (a send that would time out sooner is not started). kOwned
  // otherwise, and then `*send_window` (when given) is the lease left less that quarter: a
  // send that ends within it is reported before anyone else could be handed the job.
  LeaseState Check(uint64_t id, absl::Duration* send_window = nullptr);
  // Queues the outcome for acknowledgement under the job's lease and gives the lease up
  // (dropped, with a log line, when the lease is not held any more).
  void Report(OutcomeReport report) override;
  // Leases held (jobs received and not yet reported).
  size_t leases() const;

  // --- The acknowledgements ---
  // Outcomes of one subscription, taken together for one Acknowledge call.
  struct Batch {
    std::string subscriber_id;
    std::vector<v1::JobOutcome> outcomes;
    absl::Time oldest;  // when the oldest of them was reported
  };
  // Waits up to 200 ms for an outcome; once one is there, up to `gather` for `want` of them.
  // Then takes up to 5,000 outcomes of the oldest one's subscription as the batch in flight.
  // Empty when none came; nullopt once Close was called.
  std::optional<Batch> NextBatch(size_t want, absl::Duration gather);
  // The batch in flight was answered (or rejected for good): its outcomes are done with, but
  // for the final ones among `ignored` (the collector's ignored_job_ids less the ids it
  // rejected as invalid): those are kept, to be reported again if their jobs come back.
  void Recorded(const Batch& batch, absl::Span<const uint64_t> ignored = {});
  // The batch in flight was not answered: its outcomes go back in front, in order.
  void Returned(Batch batch);
  // Waits until every reported outcome was recorded (or `timeout`); true when all were.
  bool AwaitAcknowledged(absl::Duration timeout);
  // Outcomes not yet recorded (queued or in flight).
  size_t pending_acks() const;
  // Jobs received again whose outcome was queued under the new lease instead of being sent.
  uint64_t received_again() const;
  // No batch is taken any more: NextBatch returns nullopt from now on.
  void Close();

  // --- The renewals ---
  // The leases held (job id, attempt), by the subscription they came on.
  std::map<std::string, std::vector<std::pair<uint64_t, uint32_t>>> HeldBySubscription() const;
  // The collector's answer to renewing `ids` of `subscriber_id`, asked at `asked`: the `lost`
  // leases are forgotten (and returned), the others run until `asked` + the lease (counted
  // from before the call: never later than the collector's own deadline).
  std::vector<uint64_t> ApplyRenewal(const std::string& subscriber_id,
                                     absl::Span<const uint64_t> ids,
                                     const absl::flat_hash_set<uint64_t>& lost, absl::Time asked);

 private:
  struct HeldLease {
    LeaseRef ref;
    absl::Time deadline;
  };
  struct Pending {
    std::string subscriber_id;
    v1::JobOutcome outcome;
    absl::Time queued;
  };
  struct Ignored {
    v1::JobOutcome outcome;
    absl::Time since;
  };
  // Outcomes are not getting through: the oldest unrecorded one is older than the stall limit.
  bool Stalled(absl::Time now) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // `job`, received on `subscriber_id`, has a final outcome that is not recorded: queues it
  // again under the job's new lease when the collector had ignored it; when it is still queued
  // or in flight, adds it to `queued_again` (job id -> the new attempt) for Receive to re-tag.
  // False otherwise.
  bool ReportAgain(const std::string& subscriber_id, const v1::Job& job,
                   absl::flat_hash_map<uint64_t, uint32_t>* queued_again)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets ignored outcomes older than kUnrecordedKept, and the oldest beyond kMaxUnrecorded.
  void PruneIgnored(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  mutable absl::Mutex mu_;
  absl::Duration lease_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  std::map<uint64_t, HeldLease> leases_ ABSL_GUARDED_BY(mu_);
  std::deque<Pending> outbox_ ABSL_GUARDED_BY(mu_);
  size_t sending_ ABSL_GUARDED_BY(mu_) = 0;         // outcomes of the batch in flight
  absl::Time sending_oldest_ ABSL_GUARDED_BY(mu_);  // the oldest of them
  // Jobs of final outcomes queued or in flight.
  absl::flat_hash_set<uint64_t> unrecorded_ ABSL_GUARDED_BY(mu_);
  // Jobs of the batch in flight received again meanwhile: their new leases.
  std::map<uint64_t, LeaseRef> again_in_flight_ ABSL_GUARDED_BY(mu_);
  // Final outcomes the collector ignored, by job, and their jobs oldest first.
  std::map<uint64_t, Ignored> ignored_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<absl::Time, uint64_t>> ignored_order_ ABSL_GUARDED_BY(mu_);
  uint64_t received_again_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mailroom
