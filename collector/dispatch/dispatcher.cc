#include "collector/dispatch/dispatcher.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "collector/dispatch/job_builder.h"
#include "collector/dispatch/wakeup_gate.h"
#include "collector/metrics/collector_metrics.h"
#include "common/log.h"

namespace mailroom {
namespace {

// The settling re-check doubles its interval up to this while no transaction ends (or stays at
// a busy poll interval that is longer).
constexpr absl::Duration kMaxSettleCheck = absl::Milliseconds(100);

// One jobs message with `jobs` signed for a subscriber with `secrets`; a row that cannot be
// signed goes to `malformed` as a failure instead.
v1::SubscribeResponse SignJobs(const SigningKey& key, const std::vector<StoredJob>& jobs,
                               const JobSecrets& secrets, std::vector<JobResult>* malformed) {
  v1::SubscribeResponse message;
  message.mutable_jobs()->Reserve(static_cast<int>(jobs.size()));
  for (const StoredJob& j : jobs) {
    auto job = BuildJob(key, j, secrets);
    if (!job.ok()) {
      // A malformed row (legacy data without the schema's checks) fails alone.
      JobResult failed;
      failed.id = j.id;
      failed.attempt = j.attempt;
      failed.kind = JobResult::Kind::kFailed;
      failed.reason = std::string(job.status().message());
      malformed->push_back(std::move(failed));
      continue;
    }
    *message.add_jobs() = *std::move(job);
  }
  return message;
}

}  // namespace

Dispatcher::Dispatcher(DispatcherOptions options, Store* store, Hub* hub, SigningKey key,
                       Metrics* metrics, std::function<void(bool)> on_health, Clock* clock,
                       ListenerFactory listen)
    : opt_(std::move(options)), clock_(clock),
      listen_(listen ? std::move(listen)
                     : ListenerFactory(
                           [url = opt_.listen_database_url.empty()
                                      ? opt_.database_url
                                      : opt_.listen_database_url](const std::string& channel) {
                             return ConnectPgListener(url, channel);
                           })),
      store_(store), hub_(hub), key_(key), metrics_(metrics), on_health_(std::move(on_health)),
      reconnect_backoff_(kFirstBackoff, opt_.reconnect_max_backoff) {
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

Dispatcher::~Dispatcher() {
  CloseListener();
  if (event_fd_ >= 0) close(event_fd_);
}

void Dispatcher::Stop() {
  stop_ = true;
  Wake();
}

void Dispatcher::Kick(const std::string& group, bool force) {
  {
    absl::MutexLock lock(&mu_);
    bool& f = kicks_[group];
    f = f || force;
  }
  Wake();
}

void Dispatcher::StartFromEarliest(const std::string& group) {
  absl::MutexLock lock(&mu_);
  from_earliest_.insert(group);
}

void Dispatcher::HolderLeft(const std::string& group, const std::string& owner,
                            std::vector<uint64_t> unsent) {
  {
    absl::MutexLock lock(&mu_);
    departures_.push_back(Departure{group, owner, std::move(unsent)});
  }
  Wake();
}

void Dispatcher::Wake() {
  uint64_t one = 1;
  ssize_t unused = write(event_fd_, &one, sizeof one);
  (void)unused;
}

void Dispatcher::DrainEventFd() {
  uint64_t v;
  while (read(event_fd_, &v, sizeof v) > 0) {
  }
}

bool Dispatcher::ConnectListener() {
  auto channel = store_->Channel();
  if (!channel.ok()) {
    LogWarn("cannot read the channel", {{"error", std::string(channel.status().message())}});
    return false;
  }
  auto listener = listen_(*channel);
  if (!listener.ok()) {
    LogWarn("database connection failed", {{"error", std::string(listener.status().message())}});
    listener_.reset();
    return false;
  }
  listener_ = *std::move(listener);
  LogInfo("listening", {{"channel", *channel}});
  return true;
}

void Dispatcher::CloseListener() { listener_.reset(); }

void Dispatcher::Wait(absl::Time deadline) {
  absl::Duration left = deadline - clock_->Now();
  int timeout_ms = left <= absl::ZeroDuration()
                       ? 0
                       : static_cast<int>(std::min<int64_t>(
                             absl::ToInt64Milliseconds(left + absl::Microseconds(999)), 60000));
  pollfd fds[2];
  int n = 0;
  fds[n++] = {event_fd_, POLLIN, 0};
  if (listener_) fds[n++] = {listener_->fd(), POLLIN, 0};
  poll(fds, n, timeout_ms);
  if (fds[0].revents & POLLIN) DrainEventFd();
}

void Dispatcher::Disconnect() {
  CloseListener();
  // The mark belonged to the connection (a new one starts busy and drains).
  busy_ = false;
  settle_.reset();
  const absl::Duration delay = reconnect_backoff_.NextBackOff();
  reconnect_at_ = clock_->Now() + delay;
  LogWarn("reconnecting", {{"in_ms", absl::StrCat(absl::ToInt64Milliseconds(delay))}});
  metrics_->Add(collector_metrics::kReconnects, 1);
}

absl::Status Dispatcher::EnsureConfiguredGroups() {
  for (const std::string& group : opt_.groups) {
    absl::Status st = store_->EnsureGroup(group, /*from_earliest=*/true);
    if (!st.ok()) return st;
    known_groups_.insert(group);
  }
  return absl::OkStatus();
}

void Dispatcher::Run() {
  WakeupGate gate(opt_.batch_limit, opt_.batch_timeout);
  // With batch timeout 0 every wake-up is dispatched on its own: at thousands of commits a second
  // its two lines would be thousands of lines a second, so they are debug-level there.
  const LogLevel wakeup_log = opt_.batch_timeout <= absl::ZeroDuration() ? LogLevel::kDebug
                                                                         : LogLevel::kInfo;
  absl::Time next_poll = clock_->Now();
  absl::Time next_health = clock_->Now() + opt_.healthcheck_interval;
  absl::Time connected_at = clock_->Now();
  bool drain = true;
  bool notified_since_dispatch = false;

  while (!stop_) {
    if (!listener_ && !Reconnect(&connected_at, &next_health, &drain)) continue;
    if (!healthy_) BecomeHealthy();
    const std::map<std::string, bool> kicks = TakeRequests();

    absl::Time now = clock_->Now();
    if (settle_ && now >= settle_->check_at && !CheckSettling(now, &drain)) continue;
    std::vector<std::string> groups;
    const bool busy_poll = busy_ && now >= busy_poll_at_;
    const bool full_round = drain || gate.Ready(now) || now >= next_poll || busy_poll ||
                            (collect_retry_ && now >= collect_retry_->at);
    // An idle collector woken by notifications: if its round finds nothing, the wake-up was
    // not about work (any role that can connect may NOTIFY the channel), and it is idle again
    // at once rather than polling through the busy linger.
    bool woken_from_idle = false;
    if (full_round) {
      woken_from_idle = gate.Ready(now) && !busy_;
      if (gate.Ready(now) && !StartWakeups(gate.pending(), wakeup_log)) continue;
      groups = hub_->Groups();
      gate.Reset();
      drain = false;
      next_poll = now + opt_.poll_interval;
      if (busy_) busy_poll_at_ = now + opt_.busy_poll_interval;
    } else {
      groups = KickedGroups(now, kicks, notified_since_dispatch);
    }
    notified_since_dispatch = false;
    if (!DispatchRound(now, full_round, woken_from_idle, groups, &drain)) continue;

    // Wait for a notification, a kick, the batch timeout's deadline, the poll, the busy poll, the
    // settling re-check, the health check or the end of a group's backoff.
    absl::Time deadline = std::min({gate.Deadline(), next_poll, next_health});
    if (busy_) deadline = std::min(deadline, busy_poll_at_);
    if (settle_) deadline = std::min(deadline, settle_->check_at);
    for (const auto& [group, retry] : group_retry_) deadline = std::min(deadline, retry.at);
    if (collect_retry_) deadline = std::min(deadline, collect_retry_->at);
    if (drain) deadline = clock_->Now();  // more signups queued than one round collected
    Wait(deadline);
    if (stop_) break;
    absl::StatusOr<int> notified = listener_->TakeNotifications();
    absl::Status st = notified.status();
    if (st.ok() && *notified > 0) {
      if (gate.pending() == 0) Log(wakeup_log, "notified; waking up");
      metrics_->Add(collector_metrics::kWakeups, *notified);
      gate.OnNotify(clock_->Now(), *notified);
      notified_since_dispatch = true;
    }
    if (st.ok() && clock_->Now() >= next_health) {
      st = listener_->Ping();
      next_health = clock_->Now() + opt_.healthcheck_interval;
    }
    if (!st.ok()) {
      LogWarn("listener connection lost", {{"error", std::string(st.message())}});
      Disconnect();
      continue;
    }
    // A connection that stayed up a while ends the reconnect backoff; one that keeps
    // dropping right after connecting keeps backing off.
    if (clock_->Now() - connected_at >= absl::Seconds(10)) reconnect_backoff_.Reset();
  }
  // A clean stop: this collector no longer counts as idle, so commits stop notifying when no
  // collector is left (a killed one counts until another changes its mark).
  if (listener_) {
    absl::Status st = listener_->Leave();
    if (!st.ok()) LogWarn("removing the busy mark failed", {{"error", std::string(st.message())}});
  }
  CloseListener();
}

bool Dispatcher::Reconnect(absl::Time* connected_at, absl::Time* next_health, bool* drain) {
  // Every database error, whatever its class, leads either to Disconnect() (the connection
  // is suspect: reconnect after a capped exponential backoff) or to a per-group backoff (a SQL
  // error in one group); nothing is retried at once.
  auto unhealthy = [this] {
    if (healthy_ || on_health_) on_health_(false);
    healthy_ = false;
  };
  if (clock_->Now() < reconnect_at_) {
    Wait(reconnect_at_);
    return false;
  }
  if (!ConnectListener()) {
    unhealthy();
    Disconnect();
    return false;
  }
  known_groups_.clear();
  // Configured groups exist before anything is dispatched, so that a Subscribe cannot
  // create one "from now on" first.
  absl::Status st = EnsureConfiguredGroups();
  if (!st.ok()) {
    LogWarn("creating the configured consumer groups failed",
            {{"error", std::string(st.message())}});
    unhealthy();
    Disconnect();
    return false;
  }
  // Busy while draining what arrived while disconnected: goes idle (and re-checks) like
  // after any wake-up.
  if (!GoBusy()) {
    unhealthy();
    return false;
  }
  *connected_at = clock_->Now();
  *drain = true;  // whatever arrived while disconnected
  *next_health = clock_->Now() + opt_.healthcheck_interval;
  return true;
}

void Dispatcher::BecomeHealthy() {
  healthy_ = true;
  LogInfo("connected");
  on_health_(true);
  // Subscribers that stayed connected through an outage kept working, but their
  // acknowledgements and renewals could not be recorded: extend their leases before the
  // next dequeue hands those jobs to someone else (which would send them twice).
  for (const std::string& group : hub_->Groups()) {
    for (const std::string& owner : hub_->MemberIds(group)) {
      absl::Status st = store_->RenewAll(group, owner, opt_.lease);
      if (!st.ok()) {
        LogWarn("renewing leases after reconnect failed", {{"group", group},
                                                           {"subscriber", ShortId(owner)},
                                                           {"error", std::string(st.message())}});
      }
    }
  }
}

std::map<std::string, bool> Dispatcher::TakeRequests() {
  // Subscriptions that ended (their leases stop counting towards poison detection).
  std::vector<Departure> departures;
  std::map<std::string, bool> kicks;
  {
    absl::MutexLock lock(&mu_);
    departures.swap(departures_);
    kicks.swap(kicks_);
    earliest_.insert(from_earliest_.begin(), from_earliest_.end());
    from_earliest_.clear();
  }
  for (const Departure& d : departures) {
    absl::Status st = store_->HolderLeft(d.group, d.owner);
    // Jobs messages that never reached the stream go to another member at once.
    if (st.ok() && !d.unsent.empty()) st = store_->Release(d.group, d.owner, d.unsent);
    if (!st.ok()) {
      LogWarn("recording a departed subscriber's leases failed",
              {{"group", d.group},
               {"subscriber", ShortId(d.owner)},
               {"error", std::string(st.message())}});
    }
  }
  return kicks;
}

bool Dispatcher::CheckSettling(absl::Time now, bool* drain) {
  // After going idle: once some of the transactions that may have read the busy mark (and
  // skipped their NOTIFY) have ended, dequeue again for every group.
  absl::StatusOr<int> running = listener_->StillRunning(settle_->snapshot);
  if (!running.ok()) {
    LogWarn("listener connection lost", {{"error", std::string(running.status().message())}});
    Disconnect();
    return false;
  }
  Log(LogLevel::kDebug, "settling", {{"running", absl::StrCat(*running)}});
  if (*running < settle_->running) {
    *drain = true;
    settle_->every.Reset();
  }
  settle_->running = *running;
  settle_->check_at = now + settle_->every.NextBackOff();
  if (*running == 0) settle_.reset();
  return true;
}

bool Dispatcher::StartWakeups(int pending, LogLevel log) {
  Log(log, "processing wake-ups",
      {{"notifications", absl::StrCat(pending)},
       {"reason", pending >= opt_.batch_limit ? "limit" : "timeout"}});
  // A wake-up's dispatch marks the collector busy: commits stop notifying, it polls.
  return busy_ || opt_.busy_poll_interval <= absl::ZeroDuration() || GoBusy();
}

std::vector<std::string> Dispatcher::KickedGroups(absl::Time now,
                                                  const std::map<std::string, bool>& kicks,
                                                  bool notified) const {
  std::vector<std::string> groups;
  for (const auto& [group, force] : kicks) {
    if (force || starved_.count(group) > 0) groups.push_back(group);
  }
  // A notification may be a new password recovery: starved groups try their recovery
  // lanes at once rather than at the batch timeout's deadline (one index probe when none waits).
  if (notified) {
    for (const std::string& group : starved_) {
      if (kicks.count(group) == 0) groups.push_back(group);
    }
  }
  // Groups whose backoff after an error is over.
  for (const auto& [group, retry] : group_retry_) {
    if (now >= retry.at) groups.push_back(group);
  }
  return groups;
}

bool Dispatcher::DispatchRound(absl::Time now, bool full_round, bool woken_from_idle,
                               const std::vector<std::string>& groups, bool* drain) {
  const uint64_t dispatched_before = dispatched_;
  const uint64_t collected_before = collected_;
  // Queued signups become activation tokens before the groups dequeue (whether or not any
  // group is dispatched: the signups queue stays short).
  if (full_round && !CollectSignups(now, drain)) return false;
  if (!groups.empty()) {
    DispatchGroups(groups);
    if (!listener_) return false;
  }
  if (dispatched_ > dispatched_before) last_work_ = clock_->Now();
  const bool found_nothing = dispatched_ == dispatched_before && collected_ == collected_before;
  if (busy_ &&
      (opt_.busy_poll_interval <= absl::ZeroDuration() ||
       clock_->Now() - last_work_ >= opt_.busy_linger || (woken_from_idle && found_nothing))) {
    if (!GoIdle()) return false;
  }
  return true;
}

bool Dispatcher::GoBusy() {
  absl::Status st = listener_->MarkBusy();
  if (!st.ok()) {
    LogWarn("listener connection lost", {{"error", std::string(st.message())}});
    Disconnect();
    return false;
  }
  busy_ = true;
  Log(LogLevel::kDebug, "busy");
  metrics_->Add(collector_metrics::kBusy, 1);
  // The busy polls dequeue after whatever the settling re-check was waiting for.
  settle_.reset();
  last_work_ = clock_->Now();
  busy_poll_at_ = clock_->Now();
  return true;
}

bool Dispatcher::GoIdle() {
  absl::StatusOr<std::string> snapshot = listener_->MarkIdle();
  if (!snapshot.ok()) {
    LogWarn("listener connection lost", {{"error", std::string(snapshot.status().message())}});
    Disconnect();
    return false;
  }
  busy_ = false;
  Log(LogLevel::kDebug, "idle", {{"snapshot", *snapshot}});
  if (!snapshot->empty()) {
    // Checked at once: when nothing was running, the re-check dequeue runs right away.
    const absl::Duration first = std::max(opt_.busy_poll_interval, absl::Milliseconds(1));
    settle_ = Settle{*std::move(snapshot),
                     std::numeric_limits<int>::max(),
                     clock_->Now(),
                     {first, std::max(first, kMaxSettleCheck)}};
  }
  return true;
}

void Dispatcher::DispatchGroups(const std::vector<std::string>& groups) {
  const absl::Time now = clock_->Now();
  for (const std::string& group : groups) {
    auto retry = group_retry_.find(group);
    if (retry != group_retry_.end() && now < retry->second.at) continue;  // still backing off
    absl::Status st = DispatchGroup(group);
    if (st.ok()) {
      if (retry != group_retry_.end()) group_retry_.erase(retry);
      continue;
    }
    if (absl::IsUnavailable(st)) {
      // The database is unreachable: start over from a fresh connection (drains on success).
      LogWarn("dispatch failed", {{"group", group}, {"error", std::string(st.message())}});
      Disconnect();
      return;
    }
    // A SQL error that a new connection would not fix: this group waits, the others go on.
    if (retry == group_retry_.end()) {
      retry = group_retry_.emplace(group, Retry(opt_.reconnect_max_backoff)).first;
    }
    const absl::Duration delay = retry->second.After(now);
    LogWarn("dispatch failed", {{"group", group},
                                {"error", std::string(st.message())},
                                {"retry_in_ms", absl::StrCat(absl::ToInt64Milliseconds(delay))}});
  }
}

bool Dispatcher::CollectSignups(absl::Time now, bool* drain) {
  if (collect_retry_ && now < collect_retry_->at) return true;  // still backing off
  absl::StatusOr<int> taken = store_->CollectSignups(opt_.dequeue_limit);
  if (taken.ok()) {
    collect_retry_.reset();
    if (*taken > 0) {
      metrics_->Add(collector_metrics::kSignupsCollected, *taken);
      collected_ += *taken;
      last_work_ = clock_->Now();
    }
    // A whole batch: more are queued, and the next round collects again at once.
    if (*taken >= opt_.dequeue_limit) *drain = true;
    return true;
  }
  if (absl::IsUnavailable(taken.status())) {
    LogWarn("collecting signups failed", {{"error", std::string(taken.status().message())}});
    Disconnect();
    return false;
  }
  // A SQL error that a new connection would not fix: tried again after a backoff.
  if (!collect_retry_) collect_retry_.emplace(opt_.reconnect_max_backoff);
  const absl::Duration delay = collect_retry_->After(now);
  LogWarn("collecting signups failed",
          {{"error", std::string(taken.status().message())},
           {"retry_in_ms", absl::StrCat(absl::ToInt64Milliseconds(delay))}});
  return true;
}

absl::Status Dispatcher::DispatchGroup(const std::string& group) {
  if (known_groups_.count(group) == 0) {
    absl::Status st = store_->EnsureGroup(group, earliest_.count(group) > 0);
    if (!st.ok()) return st;
    known_groups_.insert(group);
    earliest_.erase(group);
  }
  if (opt_.paused && opt_.paused(group)) return absl::OkStatus();  // jobs wait in PostgreSQL
  const LabelValues<1> labels(group);
  // Whether this call's last window dequeue handed out an activation.
  bool reached_activations = false;
  while (!stop_) {
    std::shared_ptr<Subscriber> member = hub_->PickMember(group);
    // With no room in any window, password recoveries still go through a member's recovery
    // lane (activations wait in PostgreSQL until an acknowledgement frees some room).
    const bool lane = member == nullptr;
    if (lane) {
      starved_.insert(group);
      // A dequeue hands out every due recovery before any activation: the window dequeue just
      // made left none for the lane (a drain would pay an empty lane dequeue per round). The
      // lane is tried again on the next notification, acknowledgement or poll.
      if (reached_activations) return absl::OkStatus();
      member = hub_->PickLaneMember(group);
      if (member == nullptr) return absl::OkStatus();  // lanes full too: everything waits
    }
    const int want = std::min(opt_.dequeue_limit, lane ? member->LaneRoom() : member->Room());
    const absl::Time dequeue_start = clock_->Now();
    auto jobs = store_->Dequeue(member->NextDequeue(want, opt_.lease, lane));
    if (!jobs.ok()) return jobs.status();
    member->DequeueDone();
    if (!lane) {
      reached_activations = std::any_of(jobs->begin(), jobs->end(),
                                        [](const StoredJob& j) { return !j.critical; });
    }
    metrics_->Observe(collector_metrics::kDequeueDuration,
                      absl::ToDoubleSeconds(clock_->Now() - dequeue_start), labels);
    metrics_->Add(collector_metrics::kDequeues, 1, labels);
    // Queue empty for now; after a lane dequeue only the recoveries are (the group stays
    // starved: activations may still wait for room).
    if (jobs->empty()) {
      if (!lane) starved_.erase(group);
      return absl::OkStatus();
    }

    std::vector<JobResult> malformed;
    v1::SubscribeResponse message = SignJobs(key_, *jobs, member->secrets(), &malformed);
    if (!malformed.empty()) {
      auto r = store_->Ack(group, member->id(), malformed);
      if (!r.ok()) return r.status();
      metrics_->Add(collector_metrics::kMalformed, malformed.size(), labels);
      LogWarn("malformed token rows failed",
              {{"group", group}, {"count", absl::StrCat(malformed.size())}});
    }
    const int n = message.jobs_size();
    if (n > 0) {
      std::vector<uint64_t> ids;
      ids.reserve(n);
      for (const auto& j : message.jobs()) ids.push_back(j.job_id());
      if (!member->Deliver(std::move(message), dequeue_start + opt_.lease, lane)) {
        // The stream ended between picking and delivering: these jobs never left, hand them to
        // someone else now (and only them: what the member received earlier is still its own).
        absl::Status st = store_->Release(group, member->id(), ids);
        if (!st.ok()) return st;
        continue;
      }
      dispatched_ += n;
      metrics_->Add(collector_metrics::kJobMessages, 1, labels);
      metrics_->Add(collector_metrics::kJobsDispatched, n, labels);
    }
    if (static_cast<int>(jobs->size()) < want) {
      if (!lane) starved_.erase(group);
      return absl::OkStatus();  // the queue (of recoveries, after a lane dequeue) is empty
    }
  }
  return absl::OkStatus();
}

}  // namespace mailroom
