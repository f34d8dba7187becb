// The dispatcher's time decisions on simulated time: batch limit and timeout, the catch-up
// poll, per-group and reconnect backoff. The store and the LISTEN connection are fakes; only
// the loop's wait on descriptors is real, and the test wakes it after moving the clock.
#include "collector/dispatch/dispatcher.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <thread>

#include "collector/dispatch/hub.h"
#include "collector/store/testing/fake_store.h"
#include "common/testing/fake_clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using testing::FakeStore;

// What the fake LISTEN connections share with the test: notifications to hand out, and how
// often the loop has gone back to waiting (it asks for the descriptor each time).
struct ListenerState {
  absl::Mutex mu;
  int pending ABSL_GUARDED_BY(mu) = 0;
  int waits ABSL_GUARDED_BY(mu) = 0;  // the loop asked for the descriptor to wait on
  int takes ABSL_GUARDED_BY(mu) = 0;  // ... and came back from waiting
  int connects ABSL_GUARDED_BY(mu) = 0;
  // With `marks`, the listener has a busy mark: MarkBusy/MarkIdle are logged in `marked`, and
  // StillRunning answers `running`. Without, it behaves as a listener without a mark.
  bool marks ABSL_GUARDED_BY(mu) = false;
  std::vector<std::string> marked ABSL_GUARDED_BY(mu);
  int running ABSL_GUARDED_BY(mu) = 0;
  int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ~ListenerState() { close(fd); }

  void Notify(int n) {
    {
      absl::MutexLock lock(&mu);
      pending += n;
    }
    uint64_t one = 1;
    ASSERT_EQ(write(fd, &one, sizeof one), static_cast<ssize_t>(sizeof one));
  }
  int Takes() {
    absl::MutexLock lock(&mu);
    return takes;
  }
  int Connects() {
    absl::MutexLock lock(&mu);
    return connects;
  }
  std::vector<std::string> Marked() {
    absl::MutexLock lock(&mu);
    return marked;
  }
  void SetRunning(int n) {
    absl::MutexLock lock(&mu);
    running = n;
  }
  // Blocks until the loop has come back from waiting more than `after` times in all and is
  // waiting again (asked for the descriptor since).
  bool WaitIdle(int after) {
    absl::MutexLock lock(&mu);
    auto done = [this, after]()
                    ABSL_SHARED_LOCKS_REQUIRED(mu) { return takes > after && waits > takes; };
    return mu.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(10));
  }
};

class FakeListener : public NotificationListener {
 public:
  explicit FakeListener(ListenerState* s) : s_(s) {}
  int fd() override {
    absl::MutexLock lock(&s_->mu);
    ++s_->waits;
    return s_->fd;
  }
  absl::StatusOr<int> TakeNotifications() override {
    uint64_t v;
    while (read(s_->fd, &v, sizeof v) > 0) {
    }
    absl::MutexLock lock(&s_->mu);
    ++s_->takes;
    int n = s_->pending;
    s_->pending = 0;
    return n;
  }
  absl::Status Ping() override { return absl::OkStatus(); }
  absl::Status MarkBusy() override {
    absl::MutexLock lock(&s_->mu);
    if (s_->marks) s_->marked.push_back("busy");
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> MarkIdle() override {
    absl::MutexLock lock(&s_->mu);
    if (!s_->marks) return std::string();
    s_->marked.push_back("idle");
    return std::string("10:12:10,11");
  }
  absl::StatusOr<int> StillRunning(const std::string&) override {
    absl::MutexLock lock(&s_->mu);
    return s_->running;
  }

 private:
  ListenerState* s_;
};

constexpr char kKey[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

class DispatcherTest : public ::testing::Test {
 protected:
  DispatcherTest() : clock_(absl::FromUnixSeconds(1700000000)) {
    opt_.batch_limit = 10;
    opt_.batch_timeout = absl::Seconds(5);
    opt_.poll_interval = absl::Hours(1);
    opt_.healthcheck_interval = absl::Hours(1);
    opt_.reconnect_max_backoff = absl::Seconds(30);
    opt_.groups = {"mailroom"};
  }
  ~DispatcherTest() override {
    if (dispatcher_) {
      dispatcher_->Stop();
      loop_.join();
    }
  }

  // Starts the loop with one subscriber of "mailroom" (it never receives anything: with no
  // stream attached, deliveries fail and are released) and waits for the first round.
  // `max_in_flight` 0 stands for a window that is full (its recovery lane is 10).
  void Start(int max_in_flight = 1000) {
    member_ = std::make_shared<Subscriber>("sub-1", "mailroom", "test", max_in_flight,
                                           JobSecrets::kIncluded, &clock_);
    hub_.Add(member_);
    StartLoop();
  }
  // Starts the loop with the hub's members as they are.
  void StartLoop() {
    dispatcher_ = std::make_unique<Dispatcher>(
        opt_, &store_, &hub_, *ParseSigningKey(kKey), &metrics_, [](bool) {}, &clock_,
        [this](const std::string&) -> absl::StatusOr<std::unique_ptr<NotificationListener>> {
          {
            absl::MutexLock lock(&listener_.mu);
            ++listener_.connects;
          }
          return std::make_unique<FakeListener>(&listener_);
        });
    loop_ = std::thread([this] { dispatcher_->Run(); });
  }
  // Wakes the loop without giving it anything to do, and waits until it waits again.
  void Poke() {
    const int takes = listener_.Takes();
    dispatcher_->Kick("nobody", /*force=*/false);
    ASSERT_TRUE(listener_.WaitIdle(takes));
  }
  // Sends `n` notifications and waits until the loop has taken them and waits again.
  void Notify(int n) {
    const int takes = listener_.Takes();
    listener_.Notify(n);
    ASSERT_TRUE(listener_.WaitIdle(takes));
  }
  // Waits until the loop waits (after its first round).
  void Settle() { ASSERT_TRUE(listener_.WaitIdle(-1)); }

  DispatcherOptions opt_;
  FakeClock clock_;
  FakeStore store_;
  Hub hub_;
  Metrics metrics_;
  ListenerState listener_;
  std::shared_ptr<Subscriber> member_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::thread loop_;
};

TEST_F(DispatcherTest, ADispatchIsDueAtTheTimeoutAfterTheFirstNotification) {
  Start();
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 1));  // the drain after connecting
  Settle();
  Notify(1);
  EXPECT_EQ(store_.CallCount("Dequeue"), 1);
  clock_.Advance(absl::Milliseconds(4999));
  Poke();
  EXPECT_EQ(store_.CallCount("Dequeue"), 1);
  clock_.Advance(absl::Milliseconds(1));
  Poke();
  EXPECT_EQ(store_.CallCount("Dequeue"), 2);
  EXPECT_EQ(metrics_.Value("mailroom_collector_wakeups_total"), 1);
}

TEST_F(DispatcherTest, ADispatchIsDueAtOnceWhenTheLimitIsReached) {
  Start();
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 1));
  Settle();
  Notify(9);
  EXPECT_EQ(store_.CallCount("Dequeue"), 1);
  listener_.Notify(1);  // the tenth: no time needs to pass
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 2));
}

TEST_F(DispatcherTest, TheCatchUpPollRunsEveryPollInterval) {
  opt_.poll_interval = absl::Seconds(2);
  Start();
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 1));
  Settle();
  clock_.Advance(absl::Milliseconds(1999));
  Poke();
  EXPECT_EQ(store_.CallCount("Dequeue"), 1);
  clock_.Advance(absl::Milliseconds(1));
  Poke();
  EXPECT_EQ(store_.CallCount("Dequeue"), 2);
  clock_.Advance(absl::Seconds(2));
  Poke();
  EXPECT_EQ(store_.CallCount("Dequeue"), 3);
}

TEST_F(DispatcherTest, ABusyCollectorPollsUntilTheLingerPassesThenRechecksAfterTheReaders) {
  opt_.busy_poll_interval = absl::Milliseconds(2);
  opt_.busy_linger = absl::Milliseconds(100);
  {
    absl::MutexLock lock(&listener_.mu);
    listener_.marks = true;
    listener_.running = 2;
  }
  Start();
  // Busy from the connect on: the drain, then a dequeue every 2 ms (none hands out a job).
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 1));
  Settle();
  EXPECT_EQ(listener_.Marked(), std::vector<std::string>({"busy"}));
  clock_.Advance(absl::Milliseconds(1));
  Poke();
  EXPECT_EQ(store_.CallCount("Dequeue"), 1);
  clock_.Advance(absl::Milliseconds(1));
  Poke();
  EXPECT_EQ(store_.CallCount("Dequeue"), 2);
  clock_.Advance(absl::Milliseconds(97));
  Poke();
  EXPECT_EQ(store_.CallCount("Dequeue"), 3);
  EXPECT_EQ(listener_.Marked(), std::vector<std::string>({"busy"}));
  // 100 ms without a job: idle. Of the two transactions running then, one has ended by the
  // first check: dequeue again.
  listener_.SetRunning(1);
  clock_.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 4));
  Settle();
  EXPECT_EQ(listener_.Marked(), std::vector<std::string>({"busy", "idle"}));
  // The other one still runs: checked every 2 ms, then 4 ms, without dequeuing.
  clock_.Advance(absl::Milliseconds(2));
  Poke();
  EXPECT_EQ(store_.CallCount("Dequeue"), 4);
  // It ended: the re-check dequeue, and no more polling.
  listener_.SetRunning(0);
  clock_.Advance(absl::Milliseconds(4));
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 5));
  Settle();
  clock_.Advance(absl::Seconds(10));
  Poke();
  EXPECT_EQ(store_.CallCount("Dequeue"), 5);
  // The next wake-up's dispatch marks it busy again; its round hands out nothing (a NOTIFY any
  // role may send), so it is idle again at once: its dequeue and the re-check once the
  // transactions running then have ended (none here), no busy polls.
  listener_.Notify(10);
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 7));
  Settle();
  EXPECT_EQ(listener_.Marked(), std::vector<std::string>({"busy", "idle", "busy", "idle"}));
  clock_.Advance(absl::Milliseconds(50));
  Poke();
  EXPECT_EQ(store_.CallCount("Dequeue"), 7);
}

// A wake-up whose round finds work (here: a collected signup) keeps the collector busy
// through the linger, polling.
TEST_F(DispatcherTest, AWakeUpThatFindsWorkStaysBusyThroughTheLinger) {
  opt_.busy_poll_interval = absl::Milliseconds(2);
  opt_.busy_linger = absl::Milliseconds(100);
  {
    absl::MutexLock lock(&listener_.mu);
    listener_.marks = true;
  }
  Start();
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 1));
  Settle();
  clock_.Advance(absl::Milliseconds(101));
  Poke();
  Settle();
  ASSERT_EQ(listener_.Marked(), std::vector<std::string>({"busy", "idle"}));
  const int before = store_.CallCount("Dequeue");
  store_.QueueCollected({1});
  listener_.Notify(10);
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", before + 1));
  Settle();
  EXPECT_EQ(listener_.Marked(), std::vector<std::string>({"busy", "idle", "busy"}));
  clock_.Advance(absl::Milliseconds(2));
  Poke();
  EXPECT_GT(store_.CallCount("Dequeue"), before + 1);
  EXPECT_EQ(listener_.Marked(), std::vector<std::string>({"busy", "idle", "busy"}));
}

// Every round collects the queued signups before its dequeues, so that the tokens it made are
// in the dequeue's snapshot.
TEST_F(DispatcherTest, EachRoundCollectsSignupsBeforeItsDequeues) {
  Start();
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 1));
  Settle();
  Notify(10);
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 2));
  std::vector<std::string> order;
  for (const std::string& m : store_.Methods()) {
    if (m == "CollectSignups" || m == "Dequeue") order.push_back(m);
  }
  EXPECT_EQ(order,
            (std::vector<std::string>{"CollectSignups", "Dequeue", "CollectSignups", "Dequeue"}));
  EXPECT_EQ(store_.Calls("CollectSignups")[0].limit, opt_.dequeue_limit);
}

// A collection that took a whole batch leaves more queued: the next round runs at once, with no
// notification, poll or time passing.
TEST_F(DispatcherTest, AFullCollectionStartsTheNextRoundAtOnce) {
  store_.QueueCollected({opt_.dequeue_limit, opt_.dequeue_limit, 7});
  Start();
  ASSERT_TRUE(store_.WaitForCalls("CollectSignups", 3));
  Settle();
  EXPECT_EQ(store_.CallCount("CollectSignups"), 3);
  EXPECT_EQ(store_.CallCount("Dequeue"), 3);
  EXPECT_EQ(metrics_.Value("mailroom_collector_signups_collected_total"),
            2 * opt_.dequeue_limit + 7);
}

// A collection that fails with an SQL error is retried after a backoff on its own, without
// reconnecting; the groups are dequeued meanwhile.
TEST_F(DispatcherTest, AFailingCollectionBacksOffAndTheGroupsGoOn) {
  store_.FailWith("CollectSignups", absl::FailedPreconditionError("check violation"));
  Start();
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 1));
  Settle();
  EXPECT_EQ(store_.CallCount("CollectSignups"), 1);
  Notify(10);
  EXPECT_EQ(store_.CallCount("Dequeue"), 2);
  EXPECT_EQ(store_.CallCount("CollectSignups"), 1);  // still backing off (100 ms)
  clock_.Advance(absl::Milliseconds(100));
  Poke();
  EXPECT_EQ(store_.CallCount("CollectSignups"), 2);  // retried at its time, on its own
  EXPECT_EQ(listener_.Connects(), 1);
  store_.FailWith("CollectSignups", absl::OkStatus());
  clock_.Advance(absl::Milliseconds(200));
  Poke();
  EXPECT_EQ(store_.CallCount("CollectSignups"), 3);
  Notify(10);
  EXPECT_EQ(store_.CallCount("CollectSignups"), 4);  // every round again
}

TEST_F(DispatcherTest, ASqlErrorBacksOffThatGroupExponentially) {
  store_.FailWith("Dequeue", absl::FailedPreconditionError("syntax error"));
  Start();
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 1));
  Settle();
  // 100 ms, then 200 ms; the connection is kept (no reconnect).
  clock_.Advance(absl::Milliseconds(99));
  Poke();
  EXPECT_EQ(store_.CallCount("Dequeue"), 1);
  clock_.Advance(absl::Milliseconds(1));
  Poke();
  EXPECT_EQ(store_.CallCount("Dequeue"), 2);
  clock_.Advance(absl::Milliseconds(199));
  Poke();
  EXPECT_EQ(store_.CallCount("Dequeue"), 2);
  clock_.Advance(absl::Milliseconds(1));
  Poke();
  EXPECT_EQ(store_.CallCount("Dequeue"), 3);
  EXPECT_EQ(listener_.Connects(), 1);
  // Once the error is gone the group is served again at its next retry.
  store_.FailWith("Dequeue", absl::OkStatus());
  clock_.Advance(absl::Milliseconds(400));
  Poke();
  EXPECT_EQ(store_.CallCount("Dequeue"), 4);
}

TEST_F(DispatcherTest, ALostDatabaseReconnectsAfterABackoff) {
  store_.FailWith("Dequeue", absl::UnavailableError("connection lost"));
  Start();
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 1));
  // The reconnect is scheduled (counted) once the backoff is chosen, on simulated time.
  for (int i = 0; i < 10000 && metrics_.Value("mailroom_collector_reconnects_total") < 1; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(metrics_.Value("mailroom_collector_reconnects_total"), 1);
  EXPECT_EQ(listener_.Connects(), 1);  // no simulated time has passed: no reconnect yet
  store_.FailWith("Dequeue", absl::OkStatus());
  clock_.Advance(absl::Milliseconds(100));
  dispatcher_->Kick("nobody", false);
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 2));  // reconnected, drained
  EXPECT_EQ(listener_.Connects(), 2);
  EXPECT_EQ(metrics_.Value("mailroom_collector_reconnects_total"), 1);
}

TEST_F(DispatcherTest, JobsThatCannotReachTheStreamAreReleasedAndMalformedRowsFail) {
  StoredJob good;
  good.id = 1;
  good.secret = std::string(32, 'k');
  good.code = "12345";
  good.attempt = 1;
  StoredJob malformed = good;
  malformed.id = 2;
  malformed.secret = "short";
  store_.QueueJobs({good, malformed});
  Start();
  // The member has no stream attached: Deliver fails and the signed job goes straight back.
  ASSERT_TRUE(store_.WaitForCalls("Release", 1));
  auto release = store_.Calls("Release")[0];
  EXPECT_EQ(release.owner, "sub-1");
  EXPECT_EQ(release.ids, std::vector<uint64_t>{1});
  auto acks = store_.Calls("Ack");
  ASSERT_EQ(acks.size(), 1u);
  ASSERT_EQ(acks[0].results.size(), 1u);
  EXPECT_EQ(acks[0].results[0].id, 2u);
  EXPECT_EQ(acks[0].results[0].kind, JobResult::Kind::kFailed);
  // The dequeue asked for what the member has room for (capped by the dequeue limit, not by
  // the batch limit of 10), under the member's id.
  auto dq = store_.Calls("Dequeue")[0];
  EXPECT_EQ(dq.owner, "sub-1");
  EXPECT_EQ(dq.limit, 1000);
  EXPECT_EQ(dq.lease, opt_.lease);
}

TEST_F(DispatcherTest, DepartedSubscribersAreRecordedAndTheirUnsentJobsReleased) {
  Start();
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 1));
  dispatcher_->HolderLeft("mailroom", "sub-9", {7, 8});
  ASSERT_TRUE(store_.WaitForCalls("Release", 1));
  ASSERT_EQ(store_.CallCount("HolderLeft"), 1);
  EXPECT_EQ(store_.Calls("HolderLeft")[0].owner, "sub-9");
  EXPECT_EQ(store_.Calls("Release")[0].ids, (std::vector<uint64_t>{7, 8}));
}

}  // namespace
}  // namespace mailroom

namespace mailroom {
namespace {

// The reputation guard's hook: a paused group is not dequeued (its jobs wait in PostgreSQL)
// until the hook says otherwise; the catch-up poll then resumes it.
TEST_F(DispatcherTest, APausedGroupIsNotDequeuedUntilResumed) {
  std::atomic<bool> paused{true};
  opt_.poll_interval = absl::Seconds(2);
  opt_.paused = [&paused](const std::string& group) { return group == "mailroom" && paused; };
  Start();
  Settle();
  Notify(10);
  clock_.Advance(absl::Seconds(10));
  Poke();
  EXPECT_EQ(store_.CallCount("Dequeue"), 0);
  paused = false;
  clock_.Advance(absl::Seconds(2));
  Poke();
  EXPECT_EQ(store_.CallCount("Dequeue"), 1);
}

}  // namespace
}  // namespace mailroom

namespace mailroom {
namespace {

// With every window full, password recoveries go through the recovery lane:
// a recoveries-only dequeue sized to the lane, on the drain and on every notification at once
// (not at the batch timeout's deadline), never an activations' dequeue.
TEST_F(DispatcherTest, AFullWindowDequeuesRecoveriesIntoTheLaneOnEveryNotification) {
  StoredJob recovery;
  recovery.id = 7;
  recovery.action = "password_recovery";
  recovery.critical = true;
  recovery.secret = std::string(32, 'k');
  recovery.code = "12345";
  recovery.attempt = 1;
  store_.QueueJobs({recovery});
  Start(/*max_in_flight=*/0);
  ASSERT_TRUE(store_.WaitForCalls("DequeueRecoveries", 1));  // the drain after connecting
  // The member has no stream attached: the recovery goes straight back, and the loop asks
  // again (the lane still has room) and finds no more.
  ASSERT_TRUE(store_.WaitForCalls("Release", 1));
  EXPECT_EQ(store_.Calls("Release")[0].ids, std::vector<uint64_t>{7});
  Settle();
  EXPECT_EQ(store_.CallCount("DequeueRecoveries"), 2);
  EXPECT_EQ(store_.CallCount("Dequeue"), 0);
  auto dq = store_.Calls("DequeueRecoveries")[0];
  EXPECT_EQ(dq.owner, "sub-1");
  EXPECT_EQ(dq.limit, 10);  // the lane's room (RecoveryLane(0) = 10)
  EXPECT_EQ(dq.lease, opt_.lease);
  // One notification, no time passing: the starved group tries its lane at once.
  Notify(1);
  EXPECT_EQ(store_.CallCount("DequeueRecoveries"), 3);
  Poke();  // nothing new: no dequeue
  EXPECT_EQ(store_.CallCount("DequeueRecoveries"), 3);
  Notify(2);
  EXPECT_EQ(store_.CallCount("DequeueRecoveries"), 4);
  EXPECT_EQ(store_.CallCount("Dequeue"), 0);
}

// A group with room in a window is not starved: a notification waits for the batch limit or timeout
// as before and the lane is not used.
TEST_F(DispatcherTest, AGroupWithRoomIgnoresTheLane) {
  Start();
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 1));
  Settle();
  Notify(1);
  clock_.Advance(absl::Seconds(5));
  Poke();
  EXPECT_EQ(store_.CallCount("Dequeue"), 2);
  EXPECT_EQ(store_.CallCount("DequeueRecoveries"), 0);
}

}  // namespace
}  // namespace mailroom

namespace mailroom {
namespace {

// Batch timeout 0 at thousands of commits a second: notifications that are
// pending together when the loop wakes cost one dequeue (not one each), and a subscriber's
// acknowledgement that frees room in a group that is not starved costs none.
TEST_F(DispatcherTest, WithTimeoutZeroPendingNotificationsCostOneDequeue) {
  opt_.batch_timeout = absl::ZeroDuration();
  opt_.batch_limit = 1000;
  Start();
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 1));  // the drain after connecting
  Settle();
  Notify(25);  // 25 commits' notifications read in one go; no simulated time passes
  EXPECT_EQ(store_.CallCount("Dequeue"), 2);
  Notify(1);
  EXPECT_EQ(store_.CallCount("Dequeue"), 3);
  EXPECT_EQ(metrics_.Value("mailroom_collector_wakeups_total"), 26);
  // What an Acknowledge of SENT jobs does: the group had room and found the queue empty.
  const int takes = listener_.Takes();
  dispatcher_->Kick("mailroom", /*force=*/false);
  ASSERT_TRUE(listener_.WaitIdle(takes));
  EXPECT_EQ(store_.CallCount("Dequeue"), 3);
  EXPECT_EQ(store_.Calls("Dequeue")[2].limit, 1000);  // the member's room, not one per notification
}

// Batch timeout 0 at thousands of commits a second: each wake-up's "notified" and "processing
// wake-ups" lines are debug-level (they would be two lines per dequeue); with a timeout they are
// info-level, one pair per dispatch.
TEST_F(DispatcherTest, WithTimeoutZeroWakeUpsAreLoggedAtDebugOnly) {
  opt_.batch_timeout = absl::ZeroDuration();
  Start();
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 1));
  Settle();
  ::testing::internal::CaptureStderr();
  Notify(3);
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(store_.CallCount("Dequeue"), 2);
  EXPECT_EQ(logged.find("processing wake-ups"), std::string::npos) << logged;
  EXPECT_EQ(logged.find("waking up"), std::string::npos) << logged;
}

TEST_F(DispatcherTest, WithATimeoutEachDispatchIsLoggedAtInfo) {
  Start();
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 1));
  Settle();
  ::testing::internal::CaptureStderr();
  Notify(10);  // the batch limit
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(store_.CallCount("Dequeue"), 2);
  EXPECT_NE(logged.find("level=info msg=\"notified; waking up\""), std::string::npos) << logged;
  EXPECT_NE(logged.find("level=info msg=\"processing wake-ups\" notifications=10 reason=limit"),
            std::string::npos)
      << logged;
}

}  // namespace
}  // namespace mailroom

namespace mailroom {
namespace {

// The batch limit counts notifications; a dequeue asks for what the member has room for, up
// to the dequeue limit: a subscriber that frees 40 slots gets them in one dequeue (one
// statement and one commit), not in four of the batch limit's 10.
TEST_F(DispatcherTest, ADequeueAsksForTheMembersRoomUpToTheDequeueLimit) {
  opt_.batch_limit = 10;
  opt_.dequeue_limit = 250;
  Start(/*max_in_flight=*/1000);
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 1));
  Settle();
  EXPECT_EQ(store_.Calls("Dequeue")[0].limit, 250);  // room 1000, capped at 250
}

TEST_F(DispatcherTest, ADequeueAsksForNoMoreThanTheMembersRoom) {
  opt_.batch_limit = 10;
  opt_.dequeue_limit = 1000;
  Start(/*max_in_flight=*/40);
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 1));
  Settle();
  EXPECT_EQ(store_.Calls("Dequeue")[0].limit, 40);
}

}  // namespace
}  // namespace mailroom

namespace mailroom {
namespace {

// Serves Subscribe with the real SubscribeReactor, adding each stream's Subscriber (on
// `clock`) to `hub`: jobs messages the dispatcher hands to it really go out and fill its window.
class StreamsIntoHub : public v1::Collector::CallbackService {
 public:
  StreamsIntoHub(Hub* hub, Clock* clock) : hub_(hub), clock_(clock) {}
  grpc::ServerWriteReactor<v1::SubscribeResponse>* Subscribe(
      grpc::CallbackServerContext*, const v1::SubscribeRequest* req) override {
    auto sub = std::make_shared<Subscriber>("sub-1", req->consumer_group(), "test",
                                            static_cast<int>(req->max_in_flight()),
                                            JobSecrets::kIncluded, clock_);
    auto* reactor = new SubscribeReactor(sub, [hub = hub_](const std::shared_ptr<Subscriber>& s) {
      hub->Remove(s);
    });
    hub_->Add(sub);
    v1::SubscribeResponse welcome;
    welcome.set_subscriber_id(sub->id());
    sub->Attach(reactor, std::move(welcome));
    return reactor;
  }

 private:
  Hub* hub_;
  Clock* clock_;
};

class LaneTest : public DispatcherTest {
 protected:
  // A member with a real stream and a window of `max_in_flight`.
  void Subscribe(int max_in_flight) {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    stub_ = v1::Collector::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
    v1::SubscribeRequest req;
    req.set_consumer_group("mailroom");
    req.set_max_in_flight(max_in_flight);
    reader_ = stub_->Subscribe(&ctx_, req);
    v1::SubscribeResponse welcome;
    ASSERT_TRUE(reader_->Read(&welcome));
  }
  void TearDown() override {
    if (dispatcher_) {
      dispatcher_->Stop();
      loop_.join();
      dispatcher_.reset();
    }
    if (reader_) {
      ctx_.TryCancel();
      (void)reader_->Finish();
    }
    if (server_) server_->Shutdown();
  }
  static StoredJob Job(uint64_t id, bool recovery) {
    StoredJob j;
    j.id = id;
    j.action = recovery ? "password_recovery" : "activation";
    j.critical = recovery;
    j.email = "a@example.test";
    j.login = "a";
    j.secret = std::string(32, 'k');
    if (recovery) j.code = "12345";
    j.attempt = 1;
    return j;
  }

  StreamsIntoHub service_{&hub_, &clock_};
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Collector::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::SubscribeResponse>> reader_;
};

// A drain fills the window round after round; a dequeue hands out due recoveries before any
// activation, so once the window dequeue has reached the activations the lane would find
// nothing: no recoveries-only dequeue follows it.
TEST_F(LaneTest, AWindowFilledWithActivationsSkipsTheEmptyLaneDequeue) {
  Subscribe(2);
  store_.QueueJobs({Job(1, true), Job(2, false)});
  StartLoop();
  ASSERT_TRUE(store_.WaitForCalls("Dequeue", 1));
  Settle();
  EXPECT_EQ(store_.CallCount("Dequeue"), 1);
  EXPECT_EQ(store_.CallCount("DequeueRecoveries"), 0);
  EXPECT_EQ(store_.CallCount("Release"), 0);  // both went out on the stream
  EXPECT_EQ(store_.CallCount("Ack"), 0);      // (none was malformed)
  // In one jobs message.
  EXPECT_EQ(metrics_.Value("mailroom_collector_job_messages_total", {{"group", "mailroom"}}), 1);
  EXPECT_EQ(metrics_.Value("mailroom_collector_jobs_dispatched_total", {{"group", "mailroom"}}), 2);
}

// A window filled with recoveries only may have left more: the lane is asked.
TEST_F(LaneTest, AWindowFilledWithRecoveriesOnlyAsksTheLane) {
  Subscribe(2);
  store_.QueueJobs({Job(1, true), Job(2, true)});
  StartLoop();
  ASSERT_TRUE(store_.WaitForCalls("DequeueRecoveries", 1));
  Settle();
  EXPECT_EQ(store_.CallCount("Dequeue"), 1);
  EXPECT_EQ(store_.CallCount("DequeueRecoveries"), 1);
  EXPECT_EQ(store_.Calls("DequeueRecoveries")[0].limit, 10);  // RecoveryLane(2)
}

// The lease a message carries is counted on the dispatcher's clock from before the dequeue:
// with no simulated time gone by, the whole lease is left.
TEST_F(LaneTest, AMessageCarriesTheLeaseLeftOnTheDispatchersClock) {
  Subscribe(2);
  store_.QueueJobs({Job(1, false)});
  StartLoop();
  v1::SubscribeResponse got;
  ASSERT_TRUE(reader_->Read(&got));
  ASSERT_EQ(got.jobs_size(), 1);
  EXPECT_EQ(got.lease_left_ms(), static_cast<uint32_t>(absl::ToInt64Milliseconds(opt_.lease)));
}

}  // namespace
}  // namespace mailroom
