#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "proto/mailroom/v1/mailroom.pb.h"
#include "sender/delivery/breaker.h"
#include "sender/delivery/failover.h"
#include "sender/delivery/outcome.h"
#include "sender/lease/leased_job.h"
#include "sender/pacing/pacer.h"
#include "sender/transport/transport.h"

namespace mailroom {

// Turns a job into a message ready for the transport (InvalidArgument for an address or login
// that cannot be sent to: the job fails without being paid for). Renderer::Render in
// production (sender/render/renderer.h).
using RenderFunction = std::function<absl::StatusOr<OutgoingEmail>(const v1::Job& job)>;

struct EngineOptions {
  int workers = 1;                                     // parallel sends
  absl::Duration expiry_margin = absl::Seconds(30);    // not worth sending this close to expiry
  absl::Duration max_budget_wait = absl::Seconds(30);  // longer waits hand jobs back (DEFER)
  // Optional. While it is open, jobs are handed back (DEFER: not failed, not counted, not
  // charged) except its probes; provider errors (IsProviderError) feed it.
  Breaker* breaker = nullptr;
  // Optional (with `breaker`): the secondary transport, its own breaker, and which classes use
  // it at what price (sender/delivery/failover.h). While `breaker` is open, the jobs of the classes
  // `failover` names go to `secondary` instead of being handed back; only when both breakers
  // are open are they held. A job whose send on the primary fails with a provider error is
  // sent again at once by the secondary (not handed back) when the primary is now open.
  Transport* secondary = nullptr;
  Breaker* secondary_breaker = nullptr;
  FailoverPolicy failover;
};

// A send that may have reached the provider (IsMaybeSent: a timeout or a lost answer after the
// request left) is charged, never refunded. It is retried once, charged again, when it was the
// job's first failed attempt (Job.failures 0) and the retry policy allows a retry; otherwise it
// counts as sent (SENT, charged, without a provider id; logged and counted in
// mailroom_sender_unconfirmed_total). So an ambiguous timeout costs at most one duplicate per
// job, and never a refund.
//
// The sender's core: holds the jobs received from the collector, picks what to send (password
// recovery before activation, then the earliest expiry), keeps to the budget, renders, sends
// through the transport and reports each outcome. A worker takes a job only together with a
// budget slot for it (under the engine's lock), so with any number of workers jobs leave in
// priority order and none is held back by a worker waiting for the pace. Every time decision
// (pace, expiry, breaker probes) and every wait goes through `clock`, so tests run it on
// simulated time (common/testing/fake_clock.h); waits end early when Drain() begins.
// Thread-safe. How an attempt ends (sent, maybe sent, held, retried, failed, suppressed) is
// DecideOutcome's (sender/delivery/outcome.h); the engine gathers its facts, and counts and logs
// it.
//
// Before sending a job it asks `leases` (borrowed; the LeaseTable) whether the job's lease is
// still ours: kLost, neither sent nor reported (the collector has handed it, or will hand it,
// to another member); kWait, ours but outcomes cannot be reported right now (the collector does not
// answer): kept, and not sent until they can. With kOwned it also says how long a send may
// take and still be reported before the lease could run out: the attempt's timeout is capped
// by it (OutgoingEmail::timeout). Every outcome goes to `leases` too.
class Engine : public JobSink {
 public:
  Engine(EngineOptions options, RenderFunction render, Transport* transport, Pacer* pacer,
         RetryDecider retry, LeaseHolder* leases, Metrics* metrics,
         Clock* clock = RealClock::Get());
  ~Engine() override;

  // Adds jobs (a job already held is ignored: the collector re-sent it after a reconnect).
  void Submit(std::vector<LeasedJob> jobs) override;
  // Ids of jobs held (queued or being sent).
  std::vector<uint64_t> Held() const;
  // Forgets queued jobs whose lease was lost (a job being sent is past saving).
  void Drop(const std::vector<uint64_t>& ids) override;
  // Starts the workers.
  void Start();
  // Graceful stop: no new sends; waits for sends in progress; hands queued jobs back (DEFER 0).
  void Drain();
  // Jobs queued (not being sent).
  size_t queued() const;

 private:
  // Priority key: recovery first, then earliest expiry, then id.
  using Key = std::tuple<int, int64_t, uint64_t>;
  static Key KeyOf(const v1::Job& j);
  void Work();
  // Waits until a job is queued (true) or Drain() begins (false).
  bool AwaitJobs();
  // While the primary's breaker is open and no probe is due: hands back the queued jobs the
  // secondary does not take; true when nothing may be sent now (after a short pause).
  bool HoldWhileProviderDown();
  // Takes the head of the queue together with its budget slot (`*cost`, -1 when it is too
  // close to expiry to need one); false after handing jobs back or pausing for the pace.
  bool TakeNext(LeasedJob* job, int64_t* cost);
  // The transport an attempt uses, its breaker (or none) and the breaker's ticket.
  struct Attempt {
    Route route = Route::kPrimary;
    Transport* transport = nullptr;
    Breaker* breaker = nullptr;
    Breaker::Ticket ticket;
  };
  // Sends one job with the budget slot taken for it (`cost`, or -1 when none was taken: the
  // job is too close to expiry) and reports its outcome (DecideOutcome); true when it put the
  // job back in the queue instead. The slot's money is refunded whenever nothing can have been
  // sent. The attempt's timeout is at most `send_window`.
  bool Deliver(const LeasedJob& leased, int64_t cost, absl::Duration send_window);
  // The route stage: which transport takes the job; records a hold or a slot too cheap for
  // the secondary in `facts`.
  Attempt PickRoute(SendClass send_class, int64_t cost, AttemptFacts* facts);
  // The send stage: sends through the attempt's transport, feeds its breaker and records the
  // answer and what a failure's outcome depends on in `facts`.
  void Send(const OutgoingEmail& email, const v1::Job& job, const Attempt& attempt, int64_t cost,
            AttemptFacts* facts);
  // The metrics and the log line of a decided attempt.
  void Count(const v1::Job& job, const AttemptFacts& facts, const Decision& decision,
             const Attempt& attempt);
  void CountSent(const v1::Job& job, const AttemptFacts& facts, const Attempt& attempt);
  // Too close to expiry to be worth sending (expiry_margin).
  bool Expiring(const v1::Job& job) const;
  // The job's lease state (kLost is logged and counted) and, when owned, its send window.
  LeaseState CheckLease(const LeasedJob& job, absl::Duration* send_window);
  // Puts a job back in the queue (still held).
  void Requeue(LeasedJob job);
  // Hands queued jobs back (DEFER); with `only`, just those it accepts.
  void DeferQueued(absl::Duration retry_after, const std::string& why,
                   const std::function<bool(const v1::Job&)>& only = nullptr);
  // Whether the secondary may be used now: configured, and its breaker closed or a probe due.
  bool SecondaryUsable() const;
  // How long a held job of class `c` waits: until the earliest probe of a breaker that could
  // send it, at least 500 ms.
  absl::Duration HoldDelay(SendClass c) const;
  // Logs a change of the transport in use (primary, secondary, none) after a breaker moved.
  void NoteActive();
  // Waits `d` on the clock, or less when Drain() begins.
  void Pause(absl::Duration d);
  // The same, until `deadline` on the engine's clock.
  void PauseUntil(absl::Time deadline);

  const EngineOptions opt_;
  RenderFunction render_;
  Transport* const transport_;
  Pacer* const pacer_;
  RetryDecider retry_;
  LeaseHolder* const leases_;
  Metrics* const metrics_;
  Clock* const clock_;

  mutable absl::Mutex mu_;
  std::map<Key, LeasedJob> queue_ ABSL_GUARDED_BY(mu_);
  std::set<uint64_t> held_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
  absl::Mutex active_mu_;
  Route active_ ABSL_GUARDED_BY(active_mu_) = Route::kPrimary;
};

}  // namespace mailroom
