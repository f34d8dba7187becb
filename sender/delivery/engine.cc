#include "sender/delivery/engine.h"

#include <algorithm>
#include <functional>

#include "absl/container/flat_hash_set.h"

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "sender/delivery/actions.h"
#include "sender/metrics/sender_metrics.h"

namespace mailroom {
namespace {

// Critical jobs (password recoveries, sign-in codes, address changes: Job.priority) are sent
// first and paced as recoveries are; a collector that does not set the priority marks
// recoveries by their action.
bool Critical(const v1::Job& job) {
  return job.priority() == v1::PRIORITY_CRITICAL || job.action() == v1::ACTION_PASSWORD_RECOVERY;
}

SendClass ClassOf(const v1::Job& job) {
  return Critical(job) ? SendClass::kRecovery : SendClass::kStandard;
}

// A metrics label: one value per action the database names (unnamed or invalid: "unknown").
std::string ActionLabel(const v1::Job& job) {
  std::string action = JobActionName(job);
  return ValidActionName(action) ? action : "unknown";
}

// Failover needs all three: the primary's breaker, the secondary and its breaker.
EngineOptions Checked(EngineOptions o) {
  if (o.breaker == nullptr || o.secondary == nullptr || o.secondary_breaker == nullptr) {
    o.failover.configured = false;
  }
  return o;
}

}  // namespace

Engine::Engine(EngineOptions options, RenderFunction render, Transport* transport, Pacer* pacer,
               RetryDecider retry, LeaseHolder* leases, Metrics* metrics, Clock* clock)
    : opt_(Checked(options)), render_(std::move(render)), transport_(transport), pacer_(pacer),
      retry_(std::move(retry)), leases_(leases), metrics_(metrics), clock_(clock) {}

Engine::~Engine() { Drain(); }

Engine::Key Engine::KeyOf(const v1::Job& j) {
  // Critical, then normal, then notices; by expiry within a class.
  return {Critical(j)                           ? 0
          : j.priority() == v1::PRIORITY_NOTICE ? 2
                                                : 1,
          j.expires_at(), j.job_id()};
}

void Engine::Submit(std::vector<LeasedJob> jobs) {
  absl::MutexLock lock(&mu_);
  for (auto& j : jobs) {
    const uint64_t id = j.job.job_id();
    if (!held_.insert(id).second) continue;
    if (draining_) {
      // Arrived during shutdown: hand it straight back.
      held_.erase(id);
      leases_->Report(OutcomeReport::Defer(id, "sender shutting down"));
      continue;
    }
    Key k = KeyOf(j.job);
    queue_.emplace(k, std::move(j));
  }
  metrics_->Set(sender_metrics::kQueuedJobs, queue_.size());
}

std::vector<uint64_t> Engine::Held() const {
  absl::MutexLock lock(&mu_);
  return {held_.begin(), held_.end()};
}

void Engine::Drop(const std::vector<uint64_t>& ids) {
  absl::flat_hash_set<uint64_t> drop(ids.begin(), ids.end());
  absl::MutexLock lock(&mu_);
  for (auto it = queue_.begin(); it != queue_.end();) {
    // Received again since its lease was reported lost (a new lease of the same job, which
    // Submit skipped because it was still queued here): it stays, to be sent under that lease.
    if (drop.count(it->second.job.job_id()) > 0 &&
        leases_->Check(it->second, nullptr) == LeaseState::kLost) {
      held_.erase(it->second.job.job_id());
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  metrics_->Set(sender_metrics::kQueuedJobs, queue_.size());
}

LeaseState Engine::CheckLease(const LeasedJob& job, absl::Duration* send_window) {
  *send_window = absl::InfiniteDuration();
  LeaseState state = leases_->Check(job, send_window);
  if (state == LeaseState::kLost) {
    metrics_->Add(sender_metrics::kLostLeases, 1);
    LogWarn("lease lost; not sending", {{"job", absl::StrCat(job.job.job_id())}});
  }
  return state;
}

void Engine::Requeue(LeasedJob job) {
  absl::MutexLock lock(&mu_);
  Key k = KeyOf(job.job);
  queue_.emplace(k, std::move(job));
}

size_t Engine::queued() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

void Engine::Start() {
  for (int i = 0; i < std::max(1, opt_.workers); ++i) {
    workers_.emplace_back([this] { Work(); });
  }
}

void Engine::Drain() {
  {
    absl::MutexLock lock(&mu_);
    if (draining_ && workers_.empty()) return;
    draining_ = true;
  }
  for (auto& w : workers_) w.join();
  workers_.clear();
  DeferQueued(absl::ZeroDuration(), "sender shutting down");
}

void Engine::Pause(absl::Duration d) { PauseUntil(clock_->Now() + d); }

void Engine::PauseUntil(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  clock_->AwaitWithDeadline(&mu_, absl::Condition(&draining_), deadline);
}

void Engine::DeferQueued(absl::Duration retry_after, const std::string& why,
                         const std::function<bool(const v1::Job&)>& only) {
  std::vector<uint64_t> ids;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (only != nullptr && !only(it->second.job)) {
        ++it;
        continue;
      }
      ids.push_back(it->second.job.job_id());
      held_.erase(it->second.job.job_id());
      it = queue_.erase(it);
    }
    metrics_->Set(sender_metrics::kQueuedJobs, queue_.size());
  }
  for (uint64_t id : ids) leases_->Report(OutcomeReport::Defer(id, why, retry_after));
  if (!ids.empty()) {
    LogInfo("jobs handed back", {{"count", absl::StrCat(ids.size())}, {"reason", why}});
  }
}

bool Engine::SecondaryUsable() const {
  if (!opt_.failover.configured) return false;
  return !opt_.secondary_breaker->open() || opt_.secondary_breaker->NextProbe() <= clock_->Now();
}

absl::Duration Engine::HoldDelay(SendClass c) const {
  absl::Time next = opt_.breaker != nullptr ? opt_.breaker->NextProbe() : absl::InfinitePast();
  if (opt_.failover.FailsOver(c)) {
    next = std::min(next, opt_.secondary_breaker->NextProbe());
  }
  return std::max(next - clock_->Now(), absl::Milliseconds(500));
}

void Engine::NoteActive() {
  if (!opt_.failover.configured) return;
  const bool primary_open = opt_.breaker->open();
  const bool secondary_open = opt_.secondary_breaker->open();
  const Route now = ActiveRoute(opt_.failover, primary_open, secondary_open);
  Route before;
  {
    absl::MutexLock lock(&active_mu_);
    before = active_;
    active_ = now;
  }
  if (now == before) return;
  // One line per change, the only place failover and failback are logged.
  if (now == Route::kSecondary) {
    LogWarn("primary transport unavailable; failing over to the secondary",
            {{"primary", transport_->Name()},
             {"secondary", opt_.secondary->Name()},
             {"reason", opt_.breaker->reason()},
             {"classes", opt_.failover.classes == FailoverClasses::kAll ? "all" : "recovery"}});
  } else if (now == Route::kPrimary) {
    LogInfo("primary transport available again; failing back",
            {{"primary", transport_->Name()}, {"was", RouteName(before)}});
  } else {
    LogError("primary and secondary transports unavailable; holding jobs",
             {{"primary_reason", opt_.breaker->reason()},
              {"secondary_reason", opt_.secondary_breaker->reason()}});
  }
}

bool Engine::AwaitJobs() {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return draining_ || !queue_.empty(); };
  while (!draining_ && queue_.empty()) {
    clock_->AwaitWithDeadline(&mu_, absl::Condition(&ready),
                              clock_->Now() + absl::Milliseconds(200));
  }
  return !draining_;
}

bool Engine::HoldWhileProviderDown() {
  if (opt_.breaker == nullptr || !opt_.breaker->open()) return false;
  // The provider is down: keep the jobs in PostgreSQL until the next probe is due, except
  // those the secondary takes while it can.
  absl::Duration wait = opt_.breaker->NextProbe() - clock_->Now();
  if (wait <= absl::ZeroDuration()) return false;
  const std::string why = absl::StrCat("held: provider unavailable: ", opt_.breaker->reason());
  if (SecondaryUsable()) {
    DeferQueued(std::max(wait, absl::Milliseconds(500)), why,
                [this](const v1::Job& j) { return !opt_.failover.FailsOver(ClassOf(j)); });
    return false;
  }
  // Both down: back when either could send again.
  if (opt_.failover.configured) {
    wait = std::min(wait, opt_.secondary_breaker->NextProbe() - clock_->Now());
  }
  DeferQueued(std::max(wait, absl::Milliseconds(500)), why);
  Pause(std::min(std::max(wait, absl::Milliseconds(1)), absl::Milliseconds(100)));
  return true;
}

bool Engine::TakeNext(LeasedJob* job, int64_t* cost) {
  // Take the head of the queue only together with its budget slot, both under the engine's
  // lock: with several workers, whoever gets the next slot sends the job that is first in
  // priority order at that moment (a recovery that arrived during the wait included), and no
  // worker sits on a job while waiting. Read the clock after the pacer: its answer is never
  // later than "now" when sending is allowed, so this order cannot mistake an open slot for
  // a wait.
  absl::Duration pace_wait = absl::ZeroDuration();
  absl::Duration budget_wait = absl::ZeroDuration();
  // When to look again, from the same reading of the clock as the wait: time that passes
  // before the pause begins shortens it instead of being added to it.
  absl::Time wake_at = absl::InfinitePast();
  {
    absl::MutexLock lock(&mu_);
    if (queue_.empty() || draining_) return false;
    auto head = queue_.begin();
    if (!Expiring(head->second.job)) {
      const SendClass c = ClassOf(head->second.job);
      absl::Time next = pacer_->NextSendTime(c);
      absl::Time now = clock_->Now();
      if (next <= now) {
        *cost = pacer_->TryAcquire(c);
        // The slot went elsewhere (another pacer user): wait for the next one.
        if (*cost < 0) next = std::max(pacer_->NextSendTime(c), now + absl::Milliseconds(1));
      }
      if (next - now > opt_.max_budget_wait) {
        budget_wait = next == absl::InfiniteFuture() ? absl::Hours(1)
                                                     : std::min(next - now, absl::Hours(1));
      } else if (*cost < 0) {
        pace_wait = next - now;
      }
      wake_at = now + (budget_wait > absl::ZeroDuration()
                           ? std::min(budget_wait, absl::Seconds(1))
                           : std::min(pace_wait, absl::Milliseconds(250)));
    }
    // Jobs too close to expiry are taken without a slot: they are reported, not sent.
    if (budget_wait == absl::ZeroDuration() && pace_wait == absl::ZeroDuration()) {
      *job = std::move(head->second);
      queue_.erase(head);
      metrics_->Set(sender_metrics::kQueuedJobs, queue_.size());
      return true;
    }
  }
  if (budget_wait > absl::ZeroDuration()) {
    // Not sendable soon (budget spent for now): keep the jobs in PostgreSQL, not here.
    metrics_->Add(sender_metrics::kBudgetDeferrals, 1);
    DeferQueued(budget_wait, "sending budget exhausted for now");
    PauseUntil(wake_at);
    return false;
  }
  Log(LogLevel::kDebug, "waiting for the pace",
      {{"ms", absl::StrCat(absl::ToDoubleMilliseconds(pace_wait))}});
  metrics_->Add(sender_metrics::kRateLimitWaitSeconds, absl::ToDoubleSeconds(pace_wait));
  PauseUntil(wake_at);
  return false;
}

void Engine::Work() {
  while (AwaitJobs()) {
    NoteActive();
    if (HoldWhileProviderDown()) continue;
    LeasedJob job;
    int64_t cost = -1;
    if (!TakeNext(&job, &cost)) continue;
    absl::Duration send_window;
    const LeaseState lease = CheckLease(job, &send_window);
    if (lease != LeaseState::kOwned && cost >= 0) pacer_->Refund(ClassOf(job.job), cost);
    if (lease == LeaseState::kWait) {
      // Outcomes cannot be reported now: sending would risk a duplicate once the lease runs
      // out. Keep the job and look again shortly.
      Requeue(std::move(job));
      metrics_->Add(sender_metrics::kAckStallWaits, 1);
      Pause(absl::Milliseconds(50));
      continue;
    }
    if (lease == LeaseState::kOwned && Deliver(job, cost, send_window)) continue;  // still held
    absl::MutexLock lock(&mu_);
    held_.erase(job.job.job_id());
  }
}

bool Engine::Expiring(const v1::Job& job) const {
  return absl::FromUnixSeconds(job.expires_at()) - opt_.expiry_margin <= clock_->Now();
}

bool Engine::Deliver(const LeasedJob& leased, int64_t cost, absl::Duration send_window) {
  const v1::Job& job = leased.job;
  AttemptFacts facts;
  facts.job_id = job.job_id();
  facts.failures = static_cast<int>(job.failures()) + 1;
  facts.expiring = Expiring(job);
  absl::StatusOr<OutgoingEmail> email = absl::CancelledError("not rendered");
  if (!facts.expiring) {
    email = render_(job);
    facts.rendered = email.status();
  }
  Attempt attempt;
  if (facts.SendsNext()) attempt = PickRoute(ClassOf(job), cost, &facts);
  if (facts.SendsNext()) {
    email->tags = {{"mailroom_job", absl::StrCat(job.job_id())},
                   {"mailroom_action", ActionLabel(job)}};
    email->timeout = send_window;  // never outlast the lease
    Send(*email, job, attempt, cost, &facts);
  } else if (facts.held.has_value()) {
    facts.hold_delay = HoldDelay(ClassOf(job));
  }
  const Decision decision = DecideOutcome(facts, retry_);
  // What is not sent is not charged; a send that may have reached the provider is.
  if (!decision.charged && cost >= 0) pacer_->Refund(ClassOf(job), cost);
  Count(job, facts, decision, attempt);
  if (!decision.report.has_value()) {
    Requeue(leased);
    return true;
  }
  leases_->Report(*decision.report);
  return false;
}

Engine::Attempt Engine::PickRoute(SendClass send_class, int64_t cost, AttemptFacts* facts) {
  Attempt a{Route::kPrimary, transport_, opt_.breaker, {}};
  if (opt_.breaker == nullptr) return a;
  a.ticket = opt_.breaker->Admit();
  Breaker::Ticket secondary_ticket;
  a.route = ChooseRoute(opt_.failover, send_class, a.ticket.decision, [&] {
    secondary_ticket = opt_.secondary_breaker->Admit();
    return secondary_ticket.decision;
  });
  if (a.route == Route::kHold) {
    Breaker* why = opt_.failover.FailsOver(send_class) ? opt_.secondary_breaker : opt_.breaker;
    facts->held = why->reason();
  } else if (a.route == Route::kSecondary) {
    a.ticket = secondary_ticket;
    a.transport = opt_.secondary;
    a.breaker = opt_.secondary_breaker;
    if (!SlotCovers(opt_.failover, a.route, cost)) {
      // Bought at the primary's price before it went down: the dearer secondary needs a slot
      // at the failover price (the pacer asks at it now). Nothing is sent.
      opt_.secondary_breaker->Cancel(a.ticket);
      facts->slot_short = true;
    }
  }
  return a;
}

void Engine::Send(const OutgoingEmail& email, const v1::Job& job, const Attempt& attempt,
                  int64_t cost, AttemptFacts* facts) {
  // The money this email costs if it may have reached the provider: the price of the one
  // that sent it.
  facts->charge = ChargeFor(opt_.failover, attempt.route, cost);
  facts->breaker = attempt.breaker != nullptr;
  facts->provider = attempt.transport->Name();
  const absl::Time start = clock_->Now();
  auto sent = attempt.transport->Send(email);
  const double send_seconds = absl::ToDoubleSeconds(clock_->Now() - start);
  metrics_->Add(sender_metrics::kSendSeconds, send_seconds);
  metrics_->Observe(sender_metrics::kSendDuration, send_seconds, {attempt.transport->Name()});
  if (attempt.breaker != nullptr) attempt.breaker->Record(attempt.ticket, sent.status());
  NoteActive();
  if (sent.ok()) {
    facts->provider_message_id = std::move(sent->feedback_id);
    return;
  }
  facts->sent = sent.status();
  const SendClass send_class = ClassOf(job);
  if (attempt.breaker != nullptr && attempt.breaker->open()) {
    facts->probe_wait = attempt.breaker->NextProbe() - clock_->Now();
  }
  facts->failover_now = attempt.route == Route::kPrimary && opt_.breaker != nullptr &&
                        opt_.breaker->open() && opt_.failover.FailsOver(send_class) &&
                        SecondaryUsable();
  facts->hold_delay = HoldDelay(send_class);
}

void Engine::Count(const v1::Job& job, const AttemptFacts& facts, const Decision& decision,
                   const Attempt& attempt) {
  const std::string action = ActionLabel(job);
  const std::string id = absl::StrCat(job.job_id());
  const std::string reason = decision.report.has_value() ? decision.report->reason : "";
  auto count_job = [&](const char* outcome) {
    metrics_->Add(sender_metrics::kJobs, 1, {action, outcome});
  };
  auto retry_in_ms = [&] {
    return absl::StrCat(absl::ToInt64Milliseconds(decision.report->retry_after));
  };
  switch (decision.verdict) {
    case Verdict::kExpired:
      count_job("expired");
      LogInfo("job expired before delivery", {{"job", id}, {"action", action}});
      return;
    case Verdict::kUnrenderable:
      count_job("failed");
      metrics_->Add(sender_metrics::kFailures, 1, {"render"});
      LogWarn("job cannot be rendered", {{"job", id}, {"error", reason}});
      return;
    case Verdict::kHeld:
    case Verdict::kRequeued: return;
    case Verdict::kSent: CountSent(job, facts, attempt); return;
    case Verdict::kMaybeSentRetry:
      metrics_->Add(sender_metrics::kMaybeSent, 1);
      metrics_->Add(sender_metrics::kSpentMicros, std::max<int64_t>(facts.charge, 0));
      metrics_->Add(sender_metrics::kRetries, 1);
      LogWarn("send may have reached the provider; charged, will retry once",
              {{"job", id}, {"error", reason}, {"retry_in_ms", retry_in_ms()}});
      return;
    case Verdict::kUnconfirmed:
      metrics_->Add(sender_metrics::kMaybeSent, 1);
      metrics_->Add(sender_metrics::kSpentMicros, std::max<int64_t>(facts.charge, 0));
      count_job("sent");
      metrics_->Add(sender_metrics::kUnconfirmed, 1);
      LogWarn("send may have reached the provider; counted as sent, not retried again",
              {{"job", id},
               {"action", action},
               {"error", std::string(facts.sent.message())},
               {"try", absl::StrCat(facts.failures)}});
      return;
    case Verdict::kFailingOver:
      metrics_->Add(sender_metrics::kFailoverResends, 1);
      Log(LogLevel::kDebug, "primary unavailable; the secondary sends this job",
          {{"job", id}, {"error", std::string(facts.sent.message())}});
      return;
    case Verdict::kProviderDown: metrics_->Add(sender_metrics::kHeld, 1); return;
    case Verdict::kRetry:
      metrics_->Add(sender_metrics::kRetries, 1);
      LogWarn("send failed; will retry", {{"job", id},
                                          {"error", reason},
                                          {"failures", absl::StrCat(facts.failures)},
                                          {"retry_in_ms", retry_in_ms()}});
      return;
    case Verdict::kRejected:
    case Verdict::kGaveUp:
      count_job("failed");
      metrics_->Add(sender_metrics::kFailures, 1,
                    {decision.verdict == Verdict::kRejected ? "permanent" : "retries_exhausted"});
      LogWarn("send failed permanently",
              {{"job", id},
               {"error", reason},
               {"suppress_recipient", decision.report->suppress_recipient ? "true" : "false"}});
      return;
  }
}

void Engine::CountSent(const v1::Job& job, const AttemptFacts& facts, const Attempt& attempt) {
  const std::string action = ActionLabel(job);
  metrics_->Add(sender_metrics::kJobs, 1, {action, "sent"});
  metrics_->Add(sender_metrics::kSpentMicros, facts.charge);
  if (opt_.failover.configured) {
    metrics_->Add(sender_metrics::kTransportSent, 1, {RouteName(attempt.route)});
  }
  metrics_->Observe(
      sender_metrics::kCommitToSent,
      std::max(0.0, absl::ToDoubleSeconds(clock_->Now() - absl::FromUnixSeconds(job.created_at()))),
      {action});
  const std::string id = absl::StrCat(job.job_id());
  const std::string tries = absl::StrCat(job.failures() + 1);
  if (attempt.route == Route::kSecondary) {
    LogInfo("sent", {{"job", id},
                     {"action", action},
                     {"transport", attempt.transport->Name()},
                     {"route", RouteName(attempt.route)},
                     {"cost_micros", absl::StrCat(facts.charge)},
                     {"try", tries}});
  } else {
    LogInfo("sent", {{"job", id},
                     {"action", action},
                     {"transport", attempt.transport->Name()},
                     {"try", tries}});
  }
}

}  // namespace mailroom
