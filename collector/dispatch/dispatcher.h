#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collector/dispatch/hub.h"
#include "collector/dispatch/pg_listener.h"
#include "collector/dispatch/signing.h"
#include "collector/store/store.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/metrics.h"

namespace mailroom {

// MAILROOM_LEASE_MS's default: how long a subscriber holds a job before another member gets it.
inline constexpr absl::Duration kDefaultLease = absl::Seconds(60);

struct DispatcherOptions {
  std::string database_url;  // the query connections (Store)
  std::string
      listen_database_url;  // the LISTEN connection, direct to PostgreSQL ("": database_url)
  // Dispatch as soon as this many notifications arrived (or the batch timeout passed).
  int batch_limit = 10;
  // The most jobs one dequeue hands one subscriber (bounded by its room). Apart from the batch
  // limit: a subscriber acknowledging 40 jobs gets 40 new ones in one dequeue (one statement,
  // one commit) instead of four dequeues of a batch limit of 10.
  int dequeue_limit = 1000;
  absl::Duration batch_timeout = absl::Milliseconds(5000);
  absl::Duration healthcheck_interval = absl::Milliseconds(270000);
  // Catch-up poll: covers notifications missed while disconnected, leases that ran out and
  // retries that came due.
  absl::Duration poll_interval = absl::Milliseconds(2000);
  // The busy poll (docs/design.md, "Wake-up"): from the first dispatch of a wake-up until
  // `busy_linger` passed without dispatching a job, the collector is marked busy (commits skip
  // their NOTIFY) and dequeues for every group every `busy_poll_interval`. Zero: never busy
  // (every commit notifies; the mark is only set while draining after a connect).
  absl::Duration busy_poll_interval = absl::ZeroDuration();
  absl::Duration busy_linger = absl::Milliseconds(100);
  absl::Duration lease = kDefaultLease;
  absl::Duration reconnect_max_backoff = absl::Seconds(30);
  // Groups that must exist: created (from the earliest unexpired token) on every connect,
  // before anything is dispatched.
  std::vector<std::string> groups = {"mailroom"};
  // Applied to both the pool's and the LISTEN connection (see WithConnectionDefaults).
  absl::Duration statement_timeout = absl::Seconds(30);
  // Optional: true while a group's sending is paused (the reputation guard); its jobs are not
  // dequeued and wait in PostgreSQL. Thread-safe, fast (no database).
  std::function<bool(const std::string& group)> paused;
};

// Opens the LISTEN connection for `channel` (ConnectPgListener in production; tests pass
// fakes). Called from the dispatcher's loop on every (re)connect.
using ListenerFactory = std::function<absl::StatusOr<std::unique_ptr<NotificationListener>>(
    const std::string& channel)>;

// The collector's main loop, on its own thread: LISTENs on the channel (a NotificationListener),
// gathers wake-ups (WakeupGate), dequeues for subscribers that have room (on every notification,
// a starved group tries its members' recovery lanes at once), signs the jobs
// (BuildJob) and hands them to the subscribers' streams. Reconnects with capped exponential
// backoff forever. Every time decision (batch timeout, catch-up poll, health check, backoffs)
// reads `clock`, so tests run it on simulated time; only the wait for the listener's descriptor
// is real (a test moving simulated time wakes the loop with Kick). Other threads talk to it only
// through Kick/HolderLeft/Stop, which never block on the database.
class Dispatcher {
 public:
  // `listen` defaults to ConnectPgListener(options.database_url, channel); `clock` to the wall
  // clock. Pointers are borrowed and must outlive the dispatcher.
  Dispatcher(DispatcherOptions options, Store* store, Hub* hub, SigningKey key, Metrics* metrics,
             std::function<void(bool serving)> on_health, Clock* clock = RealClock::Get(),
             ListenerFactory listen = nullptr);
  ~Dispatcher();

  // Runs the loop until Stop(). Call once, from the thread that owns the dispatcher.
  void Run();
  // Asks Run() to return soon. Thread-safe.
  void Stop();
  // A subscriber of `group` has new room (`force`: a new subscriber, or jobs were released:
  // dequeue even if the group did not look starved). Thread-safe, non-blocking.
  void Kick(const std::string& group, bool force);
  // A subscriber asked that `group`, if it does not exist yet, start from the earliest
  // unexpired token rather than from now. Call before Kick. Thread-safe, non-blocking.
  void StartFromEarliest(const std::string& group);
  // The subscription `owner` of `group` ended. Its leases are kept until they run out (its
  // sender may still be delivering them and acknowledges them on its next stream); they stop
  // counting as lost leases for poison detection. Thread-safe, non-blocking.
  // `unsent`: jobs leased to it that never reached its stream; they are released at once.
  void HolderLeft(const std::string& group, const std::string& owner,
                  std::vector<uint64_t> unsent = {});

 private:
  // The first delay of the reconnect and retry backoffs.
  static constexpr absl::Duration kFirstBackoff = absl::Milliseconds(100);

  // The steps of one round of Run's loop, in order. Each returning bool returns false when the
  // round ends early (the connection was lost, or the reconnect backoff is still running): the
  // loop then starts the next one.
  //
  // Without a LISTEN connection: waits out the reconnect backoff, connects, creates the
  // configured groups and goes busy to drain what arrived meanwhile; on success sets the
  // connection time, the next health check and `drain`.
  bool Reconnect(absl::Time* connected_at, absl::Time* next_health, bool* drain);
  // Reports health and renews the leases of the subscribers that stayed through an outage.
  void BecomeHealthy();
  // Takes what other threads asked for (HolderLeft, StartFromEarliest, Kick): records the
  // departures and returns the kicks (group -> force).
  std::map<std::string, bool> TakeRequests();
  // The settling re-check after going idle (see settle_); sets `drain` when some of the
  // snapshot's transactions ended.
  bool CheckSettling(absl::Time now, bool* drain);
  // The wake-ups gathered are dispatched now (`pending` notifications): logs them at `log` and
  // goes busy when busy polls are on.
  bool StartWakeups(int pending, LogLevel log);
  // The groups a round that is not a full one dequeues for: the kicked ones that were forced or
  // starved, every starved one after a notification, and those whose backoff is over.
  std::vector<std::string> KickedGroups(absl::Time now, const std::map<std::string, bool>& kicks,
                                        bool notified) const;
  // Collects signups (a full round), dequeues for `groups`, and goes idle once the busy linger
  // passed without work, or at once when `woken_from_idle` (notifications woke an idle
  // collector, which this round marked busy) and the round found nothing.
  bool DispatchRound(absl::Time now, bool full_round, bool woken_from_idle,
                     const std::vector<std::string>& groups, bool* drain);
  bool ConnectListener();
  void CloseListener();
  // Dequeues for every listed group until the queue is empty or no member has room (in its
  // window, or for password recoveries in its recovery lane).
  void DispatchGroups(const std::vector<std::string>& groups);
  // The busy mark: MarkBusy/MarkIdle on the listener (false: the connection was lost and the
  // loop disconnected). Going idle starts the settling re-check (see settle_).
  bool GoBusy();
  bool GoIdle();
  absl::Status DispatchGroup(const std::string& group);
  // Makes queued signups tokens (before a round's dequeues); sets `drain` when a whole batch was
  // taken. False when the connection was lost (the loop disconnected).
  bool CollectSignups(absl::Time now, bool* drain);
  // Creates the configured groups (from the earliest unexpired token) if missing.
  absl::Status EnsureConfiguredGroups();
  // A database error: close the LISTEN connection and reconnect after the next backoff.
  void Disconnect();
  void Wait(absl::Time deadline);
  // Interrupts the loop's wait (thread-safe, non-blocking).
  void Wake();
  void DrainEventFd();

  const DispatcherOptions opt_;
  Clock* const clock_;
  const ListenerFactory listen_;
  Store* const store_;
  Hub* const hub_;
  const SigningKey key_;
  Metrics* const metrics_;
  std::function<void(bool)> on_health_;

  std::atomic<bool> stop_{false};
  int event_fd_ = -1;

  absl::Mutex mu_;
  std::map<std::string, bool> kicks_ ABSL_GUARDED_BY(mu_);  // group -> force
  struct Departure {
    std::string group, owner;
    std::vector<uint64_t> unsent;
  };
  std::vector<Departure> departures_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> from_earliest_ ABSL_GUARDED_BY(mu_);

  // Loop-thread state.
  std::unique_ptr<NotificationListener> listener_;
  std::set<std::string> known_groups_;
  std::set<std::string> starved_;   // groups that ran out of room with work left
  std::set<std::string> earliest_;  // groups to create from the earliest token if missing
  // Reconnects: 100 ms, doubling up to reconnect_max_backoff, exact (no jitter: the delays are
  // what MAILROOM_RECONNECT_MAX_BACKOFF's documentation and the tests say).
  JitteredExponentialBackOffStrategy reconnect_backoff_;
  absl::Time reconnect_at_ = absl::InfinitePast();
  // A step that failed without losing the connection (a SQL error) waits before it runs again,
  // with the reconnects' backoff.
  struct Retry {
    explicit Retry(absl::Duration max) : backoff(kFirstBackoff, max) {}
    absl::Time at = absl::InfinitePast();
    JitteredExponentialBackOffStrategy backoff;
    // Schedules the next attempt after `now`; returns the delay.
    absl::Duration After(absl::Time now) {
      const absl::Duration delay = backoff.NextBackOff();
      at = now + delay;
      return delay;
    }
  };
  // A group's dispatch (the other groups go on).
  std::map<std::string, Retry> group_retry_;
  // The collection of signups (the groups go on).
  std::optional<Retry> collect_retry_;
  bool healthy_ = false;
  // Jobs handed to subscribers and signups collected so far (a round that moved either found
  // work).
  uint64_t dispatched_ = 0;
  uint64_t collected_ = 0;
  // Marked busy: polling every busy_poll_interval (at busy_poll_at_); last_work_ is when a
  // dispatch last handed out a job.
  bool busy_ = false;
  absl::Time busy_poll_at_ = absl::InfinitePast();
  absl::Time last_work_ = absl::InfinitePast();
  // After going idle: the transactions running then (MarkIdle's snapshot) may have read the
  // busy mark and skipped their NOTIFY. Checked at `check_at` (every busy poll interval,
  // doubling up to 100 ms, or the busy poll interval if longer, while none ends); each time some
  // of them have ended the loop dequeues for every group, the last time once all have ended.
  struct Settle {
    std::string snapshot;
    int running = 0;  // of the snapshot's transactions, still running at the last check
    absl::Time check_at;
    // From the busy poll interval (at least 1 ms), reset each time some of them ended.
    JitteredExponentialBackOffStrategy every;
  };
  std::optional<Settle> settle_;
};

}  // namespace mailroom
