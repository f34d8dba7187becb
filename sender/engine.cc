#include "sender/engine.h"

#include <algorithm>
#include <functional>

#include "absl/container/flat_hash_set.h"

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "sender/retry.h"

namespace mailroom {
namespace {

bool Permanent(const absl::Status& s) { return !RetryPolicy::Retryable(s); }

// Critical jobs (password recoveries, sign-in codes, address changes: Job.priority) are sent
// first and paced as recoveries are; a collector that does not set the priority marks
// recoveries by their action.
bool Critical(const v1::Job& job) {
  return job.priority() == v1::PRIORITY_CRITICAL || job.action() == v1::ACTION_PASSWORD_RECOVERY;
}

SendClass ClassOf(const v1::Job& job) {
  return Critical(job) ? SendClass::kRecovery : SendClass::kStandard;
}

const char* ActionName(v1::Action a) {
  return a == v1::ACTION_PASSWORD_RECOVERY ? "password_recovery" : "activation";
}

// Failover needs all three: the primary's breaker, the secondary and its breaker.
EngineOptions Checked(EngineOptions o) {
  if (o.breaker == nullptr || o.secondary == nullptr || o.secondary_breaker == nullptr) {
    o.failover.configured = false;
  }
  return o;
}

}  // namespace

Engine::Engine(EngineOptions options, RenderFunction render, Transport* transport,
               Pacer* pacer, RetryDecider retry, LeaseHolder* leases, Metrics* metrics,
               Clock* clock)
    : opt_(Checked(options)), render_(std::move(render)), transport_(transport), pacer_(pacer),
      retry_(std::move(retry)), leases_(leases), metrics_(metrics), clock_(clock) {
  metrics_->DescribeHistogram("mailroom_sender_send_duration_seconds",
                              "Transport sends (any result), by transport.", kCallDurationBuckets);
  metrics_->DescribeHistogram("mailroom_sender_commit_to_sent_seconds",
                              "From the token's commit (whole seconds) to SENT, by action.",
                              kDeliveryLatencyBuckets);
}

Engine::~Engine() { Drain(); }

Engine::Key Engine::KeyOf(const v1::Job& j) {
  // Critical, then normal, then notices; by expiry within a class.
  return {Critical(j) ? 0 : j.priority() == v1::PRIORITY_NOTICE ? 2 : 1, j.expires_at(),
          j.job_id()};
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
  metrics_->Set("mailroom_sender_queued_jobs", queue_.size());
}

std::vector<uint64_t> Engine::Held() const {
  absl::MutexLock lock(&mu_);
  return {held_.begin(), held_.end()};
}

void Engine::Drop(const std::vector<uint64_t>& ids) {
  absl::flat_hash_set<uint64_t> drop(ids.begin(), ids.end());
  absl::MutexLock lock(&mu_);
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (drop.count(it->second.job.job_id()) > 0) {
      held_.erase(it->second.job.job_id());
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  metrics_->Set("mailroom_sender_queued_jobs", queue_.size());
}

LeaseState Engine::CheckLease(const LeasedJob& job, absl::Duration* send_window) {
  *send_window = absl::InfiniteDuration();
  LeaseState state = leases_->Check(job, send_window);
  if (state == LeaseState::kLost) {
    metrics_->Add("mailroom_sender_lost_leases_total", 1);
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

void Engine::Pause(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  clock_->AwaitWithDeadline(&mu_, absl::Condition(&draining_), clock_->Now() + d);
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
    metrics_->Set("mailroom_sender_queued_jobs", queue_.size());
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
            {{"primary", transport_->Name()}, {"secondary", opt_.secondary->Name()},
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

void Engine::Work() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return draining_ || !queue_.empty();
      };
      clock_->AwaitWithDeadline(&mu_, absl::Condition(&ready),
                                clock_->Now() + absl::Milliseconds(200));
      if (draining_) return;
      if (queue_.empty()) continue;
    }
    NoteActive();
    if (opt_.breaker != nullptr && opt_.breaker->open()) {
      // The provider is down: keep the jobs in PostgreSQL until the next probe is due, except
      // those the secondary takes while it can.
      absl::Duration wait = opt_.breaker->NextProbe() - clock_->Now();
      if (wait > absl::ZeroDuration()) {
        const std::string why =
            absl::StrCat("held: provider unavailable: ", opt_.breaker->reason());
        if (SecondaryUsable()) {
          DeferQueued(std::max(wait, absl::Milliseconds(500)), why, [this](const v1::Job& j) {
            return !opt_.failover.FailsOver(ClassOf(j));
          });
        } else {
          // Both down: back when either could send again.
          if (opt_.failover.configured) {
            wait = std::min(wait, opt_.secondary_breaker->NextProbe() - clock_->Now());
          }
          DeferQueued(std::max(wait, absl::Milliseconds(500)), why);
          Pause(std::min(std::max(wait, absl::Milliseconds(1)), absl::Milliseconds(100)));
          continue;
        }
      }
    }
    // Take the head of the queue only together with its budget slot, both under the engine's
    // lock: with several workers, whoever gets the next slot sends the job that is first in
    // priority order at that moment (a recovery that arrived during the wait included), and no
    // worker sits on a job while waiting. Read the clock after the pacer: its answer is never
    // later than "now" when sending is allowed, so this order cannot mistake an open slot for
    // a wait.
    LeasedJob job;
    int64_t cost = -1;
    absl::Duration pace_wait = absl::ZeroDuration();
    absl::Duration budget_wait = absl::ZeroDuration();
    {
      absl::MutexLock lock(&mu_);
      if (queue_.empty() || draining_) continue;
      auto head = queue_.begin();
      if (!Expiring(head->second.job)) {
        const SendClass c = ClassOf(head->second.job);
        absl::Time next = pacer_->NextSendTime(c);
        absl::Time now = clock_->Now();
        if (next <= now) {
          cost = pacer_->TryAcquire(c);
          // The slot went elsewhere (another pacer user): wait for the next one.
          if (cost < 0) next = std::max(pacer_->NextSendTime(c), now + absl::Milliseconds(1));
        }
        if (next - now > opt_.max_budget_wait) {
          budget_wait = next == absl::InfiniteFuture() ? absl::Hours(1)
                                                       : std::min(next - now, absl::Hours(1));
        } else if (cost < 0) {
          pace_wait = next - now;
        }
      }
      // Jobs too close to expiry are taken without a slot: they are reported, not sent.
      if (budget_wait == absl::ZeroDuration() && pace_wait == absl::ZeroDuration()) {
        job = std::move(head->second);
        queue_.erase(head);
        metrics_->Set("mailroom_sender_queued_jobs", queue_.size());
      }
    }
    if (budget_wait > absl::ZeroDuration()) {
      // Not sendable soon (budget spent for now): keep the jobs in PostgreSQL, not here.
      metrics_->Add("mailroom_sender_budget_deferrals_total", 1);
      DeferQueued(budget_wait, "sending budget exhausted for now");
      Pause(std::min(budget_wait, absl::Seconds(1)));
      continue;
    }
    if (pace_wait > absl::ZeroDuration()) {
      Log(LogLevel::kDebug, "waiting for the pace",
          {{"ms", absl::StrCat(absl::ToDoubleMilliseconds(pace_wait))}});
      metrics_->Add("mailroom_sender_rate_limit_wait_seconds_total",
                    absl::ToDoubleSeconds(pace_wait));
      Pause(std::min(pace_wait, absl::Milliseconds(250)));
      continue;
    }
    absl::Duration send_window;
    const LeaseState lease = CheckLease(job, &send_window);
    if (lease != LeaseState::kOwned && cost >= 0) pacer_->Refund(ClassOf(job.job), cost);
    if (lease == LeaseState::kWait) {
      // Outcomes cannot be reported now: sending would risk a duplicate once the lease runs
      // out. Keep the job and look again shortly.
      Requeue(std::move(job));
      metrics_->Add("mailroom_sender_ack_stall_waits_total", 1);
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
  const std::string action = ActionName(job.action());
  const std::string id = absl::StrCat(job.job_id());
  // What is not sent is not charged (a failed or rejected send either, below; a send that may
  // have reached the provider is charged).
  auto refund = [&] {
    if (cost >= 0) pacer_->Refund(ClassOf(job), cost);
  };
  if (Expiring(job)) {
    refund();
    metrics_->Add("mailroom_sender_jobs_total", 1, {{"action", action}, {"outcome", "expired"}});
    LogInfo("job expired before delivery", {{"job", id}, {"action", action}});
    leases_->Report(
        OutcomeReport::Expired(job.job_id(), "token expires before it can be delivered"));
    return false;
  }
  auto email = render_(job);
  if (email.ok()) {
    email->tags = {{"mailroom_job", id}, {"mailroom_action", action}};
    email->timeout = send_window;  // never outlast the lease
  }
  if (!email.ok()) {
    refund();
    metrics_->Add("mailroom_sender_jobs_total", 1, {{"action", action}, {"outcome", "failed"}});
    metrics_->Add("mailroom_sender_failures_total", 1, {{"reason", "render"}});
    LogWarn("job cannot be rendered", {{"job", id}, {"error", std::string(email.status().message())}});
    leases_->Report(OutcomeReport::Failed(job.job_id(), std::string(email.status().message())));
    return false;
  }
  const SendClass send_class = ClassOf(job);
  Route route = Route::kPrimary;
  Breaker::Ticket ticket;  // from the breaker of the route taken
  if (opt_.breaker != nullptr) {
    ticket = opt_.breaker->Admit();
    Breaker::Ticket secondary_ticket;
    route = ChooseRoute(opt_.failover, send_class, ticket.decision, [&] {
      secondary_ticket = opt_.secondary_breaker->Admit();
      return secondary_ticket.decision;
    });
    if (route == Route::kHold) {
      refund();
      Breaker* why = opt_.failover.FailsOver(send_class) ? opt_.secondary_breaker : opt_.breaker;
      leases_->Report(OutcomeReport::Defer(
          job.job_id(), absl::StrCat("held: provider unavailable: ", why->reason()),
          HoldDelay(send_class)));
      return false;
    }
    if (route == Route::kSecondary) {
      ticket = secondary_ticket;
      if (!SlotCovers(opt_.failover, route, cost)) {
        // Bought at the primary's price before it went down: the dearer secondary needs a slot
        // at the failover price (the pacer asks at it now). Nothing was sent.
        opt_.secondary_breaker->Cancel(ticket);
        refund();
        Requeue(leased);
        return true;
      }
    }
  }
  Transport* const transport = route == Route::kSecondary ? opt_.secondary : transport_;
  Breaker* const breaker = route == Route::kSecondary ? opt_.secondary_breaker : opt_.breaker;
  // The money this email costs if it may have reached the provider: the price of the one
  // that sent it.
  const int64_t charge = ChargeFor(opt_.failover, route, cost);
  absl::Time start = clock_->Now();
  auto sent = transport->Send(*email);
  const double send_seconds = absl::ToDoubleSeconds(clock_->Now() - start);
  metrics_->Add("mailroom_sender_send_seconds_total", send_seconds);
  metrics_->Observe("mailroom_sender_send_duration_seconds", send_seconds,
                    {{"transport", transport->Name()}});
  if (breaker != nullptr) breaker->Record(ticket, sent.status());
  NoteActive();
  if (sent.ok()) {
    metrics_->Add("mailroom_sender_jobs_total", 1, {{"action", action}, {"outcome", "sent"}});
    metrics_->Add("mailroom_sender_spent_micros_total", charge);
    if (opt_.failover.configured) {
      metrics_->Add("mailroom_sender_transport_sent_total", 1, {{"transport", RouteName(route)}});
    }
    metrics_->Observe("mailroom_sender_commit_to_sent_seconds",
                      std::max(0.0, absl::ToDoubleSeconds(clock_->Now() - absl::FromUnixSeconds(
                                                                         job.created_at()))),
                      {{"action", action}});
    if (route == Route::kSecondary) {
      LogInfo("sent", {{"job", id}, {"action", action}, {"transport", transport->Name()},
                       {"route", RouteName(route)}, {"cost_micros", absl::StrCat(charge)},
                       {"try", absl::StrCat(job.failures() + 1)}});
    } else {
      LogInfo("sent", {{"job", id}, {"action", action}, {"transport", transport->Name()},
                       {"try", absl::StrCat(job.failures() + 1)}});
    }
    leases_->Report(OutcomeReport::Sent(job.job_id(), charge, sent->feedback_id));
    return false;
  }
  const absl::Status& err = sent.status();
  const std::string reason(err.message());
  const int failures = static_cast<int>(job.failures()) + 1;
  if (IsMaybeSent(err)) {
    // The provider may have accepted it (and bills it): charged, never refunded. Retried once
    // at most, so an ambiguous answer costs at most one duplicate.
    metrics_->Add("mailroom_sender_maybe_sent_total", 1);
    metrics_->Add("mailroom_sender_spent_micros_total", std::max<int64_t>(charge, 0));
    std::optional<absl::Duration> delay;
    if (failures == 1) delay = retry_(err, failures);
    if (delay.has_value()) {
      if (breaker != nullptr && breaker->open()) {
        delay = std::max(*delay, breaker->NextProbe() - clock_->Now());
      }
      metrics_->Add("mailroom_sender_retries_total", 1);
      LogWarn("send may have reached the provider; charged, will retry once",
              {{"job", id}, {"error", reason},
               {"retry_in_ms", absl::StrCat(absl::ToInt64Milliseconds(*delay))}});
      leases_->Report(OutcomeReport::Retry(job.job_id(), reason, *delay));
      return false;
    }
    metrics_->Add("mailroom_sender_jobs_total", 1, {{"action", action}, {"outcome", "sent"}});
    metrics_->Add("mailroom_sender_unconfirmed_total", 1);
    LogWarn("send may have reached the provider; counted as sent, not retried again",
            {{"job", id}, {"action", action}, {"error", reason},
             {"try", absl::StrCat(failures)}});
    leases_->Report(OutcomeReport::Sent(job.job_id(), std::max<int64_t>(charge, 0), ""));
    return false;
  }
  refund();  // a rejected or failed send is not charged
  if (breaker != nullptr && IsProviderError(err)) {
    if (route == Route::kPrimary && opt_.breaker->open() && opt_.failover.FailsOver(send_class) &&
        SecondaryUsable()) {
      // The primary is down now and the secondary takes this class: it sends the job at once
      // (still ours, nothing charged) rather than after a round trip through PostgreSQL.
      metrics_->Add("mailroom_sender_failover_resends_total", 1);
      Log(LogLevel::kDebug, "primary unavailable; the secondary sends this job",
          {{"job", id}, {"error", reason}});
      Requeue(leased);
      return true;
    }
    // Not this job's fault: hand it back uncounted until the provider answers again.
    metrics_->Add("mailroom_sender_held_total", 1);
    leases_->Report(OutcomeReport::Defer(
        job.job_id(), absl::StrCat("held: provider unavailable: ", reason),
        HoldDelay(send_class)));
    return false;
  }
  std::optional<absl::Duration> delay;
  if (!Permanent(err)) delay = retry_(err, failures);
  if (delay.has_value()) {
    metrics_->Add("mailroom_sender_retries_total", 1);
    LogWarn("send failed; will retry", {{"job", id}, {"error", reason},
                                        {"failures", absl::StrCat(failures)},
                                        {"retry_in_ms", absl::StrCat(absl::ToInt64Milliseconds(*delay))}});
    leases_->Report(OutcomeReport::Retry(job.job_id(), reason, *delay));
    return false;
  }
  const std::string final_reason =
      Permanent(err) ? reason : absl::StrCat("gave up after ", failures, " attempts: ", reason);
  metrics_->Add("mailroom_sender_jobs_total", 1, {{"action", action}, {"outcome", "failed"}});
  metrics_->Add("mailroom_sender_failures_total", 1,
                {{"reason", Permanent(err) ? "permanent" : "retries_exhausted"}});
  // The server said the address itself is bad (5.1.x on RCPT): no later job for it should be
  // tried, so the collector is asked to suppress it.
  const bool suppress = IsRecipientRejected(err);
  LogWarn("send failed permanently", {{"job", id}, {"error", final_reason},
                                      {"suppress_recipient", suppress ? "true" : "false"}});
  leases_->Report(OutcomeReport::Failed(job.job_id(), final_reason, suppress));
  return false;
}

}  // namespace mailroom
