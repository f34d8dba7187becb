// The wake-up around the collector's busy/idle switch, with the collector binary against a
// throwaway PostgreSQL: commits skip their NOTIFY while the collector is busy, so the side
// that turns idle must dequeue once more after every transaction that may have read the busy
// mark; none of their tokens may wait for the catch-up poll.
#include <csignal>
#include <pqxx/pqxx>

#include <map>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "collector/schema/migrate.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "testing/collector_client.h"
#include "testing/collector_fixture.h"
#include "testing/pg_server.h"
#include "testing/process.h"

namespace mailroom {
namespace {

constexpr char kKey[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
constexpr char kBearer[] = "test-subscriber-token-0123456789";
// The catch-up poll is set to a minute: a token whose wake-up was lost arrives no earlier.
constexpr int kCatchUpPollMs = 60000;
// What "did not wait for the catch-up poll" is checked against: every token of a round must
// arrive within this long after its commit (the re-check follows the transactions' end within
// the busy poll interval, backing off to 100 ms while none ends).
constexpr absl::Duration kArrivalBound = absl::Seconds(10);

class WakeupTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = testing::PgServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    pg_ = server->release();
  }
  static void TearDownTestSuite() { delete pg_; }

  void SetUp() override {
    // A database of its own for each test of the suite (they share the server).
    static int databases = 0;
    auto url = pg_->CreateDatabase(absl::StrCat("wakeup_", ++databases));
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
    ASSERT_TRUE(MigrateUp(url_, EmbeddedMigrations()).ok());
    port_ = testing::FreePort();
    // Production wake-up settings (busy poll, linger) apart from the catch-up poll; a batch
    // timeout of 0 dispatches at each wake-up.
    collector_ = testing::StartCollectorProcess(
        testing::CollectorEnv(url_, port_, kKey, kBearer,
                              {{"MAILROOM_METRICS_ADDRESS", "off"},
                               {"MAILROOM_BATCH_TIMEOUT", "0"},
                               {"MAILROOM_POLL_INTERVAL", absl::StrCat(kCatchUpPollMs)}}));
    ASSERT_NE(collector_, nullptr);
  }

  // The number of idle collectors the token trigger reads.
  int64_t IdleCollectors() {
    return testing::TestDb(url_).Scalar("SELECT last_value FROM mailroom_idle_collectors");
  }
  // Waits until the collector has marked itself idle.
  bool WaitIdle() {
    for (absl::Time until = absl::Now() + absl::Seconds(10); absl::Now() < until;) {
      if (IdleCollectors() == 1) return true;
      absl::SleepFor(absl::Milliseconds(2));
    }
    return false;
  }

  static testing::PgServer* pg_;
  std::string url_;
  int port_ = 0;
  std::unique_ptr<testing::Process> collector_;
};
testing::PgServer* WakeupTest::pg_ = nullptr;

// A collector stopped with SIGTERM while idle removes its mark: with no collector left, the
// application's commits do not NOTIFY (nobody would hear them). Killed, it would keep counting
// until another collector changes its mark.
TEST_F(WakeupTest, ACollectorStoppedCleanlyNoLongerCountsAsIdle) {
  ASSERT_TRUE(WaitIdle());
  collector_->Signal(SIGTERM);
  auto code = collector_->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  EXPECT_EQ(IdleCollectors(), 0);
  EXPECT_EQ(testing::TestDb(url_).Scalar("SELECT count(*) FROM mailroom_collectors"), 0);
}

// Each round: one commit wakes the collector (it turns busy and dispatches that job); then
// several connections insert a token at random moments around the time the collector turns
// idle again (100 ms after its last job), each holding its transaction open for a random while
// before COMMIT, so that some transactions read the busy mark (and skip their NOTIFY) but
// commit after the collector cleared it. Every token must reach the stream within
// kArrivalBound of its commit. A round straddles the switch by chance (a few of 40 rounds
// typically, none in some runs on a loaded machine): rounds go on past kRounds, up to
// kMaxRounds, until one has.
TEST_F(WakeupTest, TokensCommittedAroundTheBusyIdleSwitchNeverWaitForTheCatchUpPoll) {
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_),
                                     grpc::InsecureChannelCredentials());
  testing::TestSubscriber sub(channel, kBearer, "mailroom", 10000);
  ASSERT_TRUE(sub.WaitSubscribed(absl::Seconds(10)));
  constexpr int kRounds = 40, kMaxRounds = 400, kWriters = 4;
  std::vector<std::unique_ptr<pqxx::connection>> conns;
  for (int w = 0; w <= kWriters; ++w) conns.push_back(std::make_unique<pqxx::connection>(url_));
  std::mt19937 rng(std::random_device{}());
  size_t expected = 0;
  int straddled = 0;
  absl::Duration slowest;
  int round = 0;
  for (; round < kRounds || (straddled == 0 && round < kMaxRounds); ++round) {
    ASSERT_TRUE(WaitIdle()) << collector_->Log();
    {
      pqxx::work tx(*conns[0]);
      tx.exec(absl::StrCat("INSERT INTO accounts (email, login) VALUES ('wake", round,
                           "@example.test', 'wake", round, "')"));
      tx.commit();
    }
    ++expected;
    ASSERT_EQ(sub.WaitForJobs(expected, kArrivalBound), expected) << "round " << round;
    const absl::Time woken = absl::Now();
    // Inserts from 50 to 110 ms after the wake-up's job arrived, held 0 to 50 ms: around the
    // switch at about 100 ms.
    std::vector<std::pair<int, int>> plan;
    for (int w = 0; w < kWriters; ++w) {
      plan.emplace_back(std::uniform_int_distribution<int>(50, 110)(rng),
                        std::uniform_int_distribution<int>(0, 50)(rng));
    }
    absl::Mutex mu;
    std::map<std::string, absl::Time> committed;  // login -> commit time
    std::vector<std::thread> writers;
    for (int w = 0; w < kWriters; ++w) {
      writers.emplace_back([&, w] {
        const std::string login = absl::StrCat("r", round, "w", w);
        absl::SleepFor(woken + absl::Milliseconds(plan[w].first) - absl::Now());
        pqxx::work tx(*conns[w + 1]);
        tx.exec(absl::StrCat("INSERT INTO accounts (email, login) VALUES ('", login,
                             "@example.test', '", login, "')"));
        // Whether the trigger found the collector busy (no NOTIFY from this transaction).
        const bool read_busy =
            tx.exec1("SELECT last_value = 0 FROM mailroom_idle_collectors")[0].as<bool>();
        absl::SleepFor(absl::Milliseconds(plan[w].second));
        tx.commit();
        const absl::Time t = absl::Now();
        const bool idle_at_commit = IdleCollectors() == 1;
        absl::MutexLock lock(&mu);
        committed[login] = t;
        if (read_busy && idle_at_commit) ++straddled;
      });
    }
    for (auto& t : writers) t.join();
    expected += kWriters;
    const size_t arrived = sub.WaitForJobs(expected, kArrivalBound);
    const auto jobs = sub.Jobs();
    const auto arrivals = sub.Arrivals();
    for (size_t i = 0; i < jobs.size(); ++i) {
      auto it = committed.find(jobs[i].login());
      if (it != committed.end()) slowest = std::max(slowest, arrivals[i].second - it->second);
    }
    ASSERT_EQ(arrived, expected) << "round " << round << ": " << expected - arrived
                                 << " tokens did not reach the stream within " << kArrivalBound
                                 << " of their commit";
  }
  // The rounds did exercise the switch: some transactions read the busy mark and committed
  // after the collector had gone idle.
  EXPECT_GT(straddled, 0);
  std::printf("%d rounds, %zu tokens, %d transactions read the busy mark and committed after"
              " the switch; slowest commit-to-stream %s\n",
              round, expected, straddled, absl::FormatDuration(slowest).c_str());
}

}  // namespace
}  // namespace mailroom
