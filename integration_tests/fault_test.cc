// Fault injection: the whole stack (PostgreSQL, collectors, senders, SMTP server / SES emulator /
// files) while something breaks. Each test asserts that every token ends sent, expired or
// failed with a reason in PostgreSQL (none lost), and counts the emails delivered twice (only
// jobs in flight at a crash may be). Every test prints one "FAULT ..." line with its figures.
#include <signal.h>

#include <cstdio>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "testing/collector_client.h"
#include "testing/process.h"
#include "testing/stack.h"

namespace mailroom {
namespace {

using testing::Ledger;
using testing::Process;
using testing::Received;

class FaultTest : public testing::StackTest {
 protected:
  void Accounts(int from, int to) {
    Exec(absl::StrCat("INSERT INTO accounts (email, login) SELECT 'f' || i || '@example.test', "
                      "'f' || i FROM generate_series(",
                      from, ", ", to, ") i"));
  }
  int64_t Sent() { return Scalar("SELECT count(*) FROM delivery_states WHERE state = 'sent'"); }
  void WaitSent(int64_t at_least, absl::Duration timeout) {
    absl::Time deadline = absl::Now() + timeout;
    while (Sent() < at_least && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  }
  void Kill9(std::unique_ptr<Process>& p) {
    p->Signal(SIGKILL);
    (void)p->Wait(absl::Seconds(10));
    p.reset();
  }
  // Asserts nothing was lost and prints the scenario's figures.
  Ledger Settle(const std::string& scenario, const Received& got, absl::Duration timeout,
                int64_t want_sent, int64_t max_duplicates) {
    Ledger l = WaitSettled(timeout);
    std::printf("FAULT %s: tokens=%lld sent=%lld expired=%lld failed=%lld lost=%lld "
                "emails=%lld duplicates=%lld\n",
                scenario.c_str(), (long long)l.tokens, (long long)l.sent, (long long)l.expired,
                (long long)l.failed, (long long)l.unfinished, (long long)got.emails,
                (long long)got.duplicates());
    RecordProperty("lost", static_cast<int>(l.unfinished));
    RecordProperty("duplicates", static_cast<int>(got.duplicates()));
    EXPECT_EQ(l.unfinished, 0) << "tokens neither sent, expired nor failed with a reason";
    EXPECT_EQ(l.sent, want_sent);
    EXPECT_LE(got.duplicates(), max_duplicates);
    return l;
  }
  // SIGTERM and wait for a clean exit.
  void Term(std::unique_ptr<Process>& p) {
    p->Signal(SIGTERM);
    auto rc = p->Wait(absl::Seconds(60));
    EXPECT_TRUE(rc.ok() && *rc == 0) << p->Log();
    p.reset();
  }
  // The port a collector listens on, from its start line.
  static int PortOf(Process& collector) {
    std::string log = collector.Log();
    size_t at = log.find("listen=127.0.0.1:");
    return at == std::string::npos ? 0 : std::stoi(log.substr(at + 17));
  }
  // Longest time a job was held by one sender before it was sent (jobs handed out once, all
  // inserted before the senders started): the hold must outlast the lease for the rolling
  // restart scenarios to mean anything. A job sent under its first lease has no row
  // of its own: delivery_states gives it its batch's updated_at, the batch's last write (the
  // last outcome recorded in it, or a hand-back of its unsent jobs by a stopping sender, which
  // comes right after that sender's last send), so the figure is still the time from the first
  // token to the last first-lease outcome recorded.
  absl::Duration LongestHold() {
    return absl::Milliseconds(Scalar("SELECT (EXTRACT(EPOCH FROM max(d.updated_at)) * 1000)::BIGINT"
                                     "       - min(t.created_at) * 1000"
                                     "  FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
                                     " WHERE d.state = 'sent' AND d.attempts = 1"));
  }
  // When each job was sent, from a sender's log lines ("ts=... msg=sent job=N ...").
  static std::map<uint64_t, absl::Time> SendTimes(const std::string& log) {
    std::map<uint64_t, absl::Time> sent;
    for (absl::string_view line : absl::StrSplit(log, '\n')) {
      if (!absl::StrContains(line, " msg=sent job=") || !absl::StartsWith(line, "ts=")) continue;
      absl::Time at;
      uint64_t id = 0;
      std::string err;
      absl::string_view job = line.substr(line.find(" msg=sent job=") + 14);
      if (absl::ParseTime("%Y-%m-%dT%H:%M:%E*SZ", line.substr(3, line.find(' ') - 3), &at, &err) &&
          absl::SimpleAtoi(job.substr(0, job.find(' ')), &id)) {
        sent[id] = at;
      }
    }
    return sent;
  }
  std::map<std::string, std::string> FileEnv(const std::string& extra_rate = "") {
    std::map<std::string, std::string> env = {{"MAILROOM_TRANSPORT", "file"},
                                              {"MAILROOM_FILE_DIR", dir_ + "/out"}};
    if (!extra_rate.empty()) env["MAILROOM_PROVIDER_RATE_LIMIT"] = extra_rate;
    return env;
  }
};

TEST_F(FaultTest, KillNineTheCollectorMidStreamAndRestartIt) {
  auto sender = StartSender(FileEnv("300"));
  Accounts(1, 1000);
  WaitSent(200, absl::Seconds(30));
  ASSERT_LT(Sent(), 1000) << "the stream was not mid-way";
  Kill9(collector_);
  absl::SleepFor(absl::Seconds(1));
  collector_ = StartCollector({}, "collector2", collector_port_);
  Accounts(1001, 1200);  // and new work arrives after the restart
  Received got;
  WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 1200, absl::Seconds(60));
  got = ReceivedIn(dir_ + "/out");
  Settle("kill -9 collector", got, absl::Seconds(30), 1200, 0);
  // Acknowledgements the sender could not deliver while the collector was down are kept and
  // sent after it reconnects, so a collector crash costs no duplicate email.
  EXPECT_EQ(got.distinct, 1200);
}

TEST_F(FaultTest, KillNineTheSenderMidBatchAndRestartIt) {
  auto sender = StartSender(FileEnv("300"), "sender1");
  Accounts(1, 1000);
  WaitSent(200, absl::Seconds(30));
  ASSERT_LT(Sent(), 1000);
  Kill9(sender);
  auto again = StartSender(FileEnv("300"), "sender2");
  WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 1000, absl::Seconds(60));
  Received got = ReceivedIn(dir_ + "/out");
  // Only what the killed sender had written but not yet acknowledged may go out twice; the
  // sender acknowledges in small batches, so that is at most its in-flight window.
  Settle("kill -9 sender", got, absl::Seconds(30), 1000, 100);
  EXPECT_EQ(got.distinct, 1000);
}

TEST_F(FaultTest, TerminateEveryCollectorConnectionWhileJobsFlow) {
  auto sender = StartSender(FileEnv("500"));
  std::thread writer([this] {
    for (int i = 0; i < 10; ++i) {
      Accounts(i * 100 + 1, i * 100 + 100);
      absl::SleepFor(absl::Milliseconds(100));
    }
  });
  for (int i = 0; i < 8; ++i) {
    absl::SleepFor(absl::Milliseconds(150));
    Exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
         " WHERE datname = current_database() AND pid <> pg_backend_pid()"
         "   AND application_name = 'mailroom-collector'");
  }
  writer.join();
  WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 1000, absl::Seconds(60));
  Received got = ReceivedIn(dir_ + "/out");
  // A terminated ack transaction rolls back: the sender's retry of it makes it durable, so
  // nothing is sent twice unless a lease ran out meanwhile.
  Settle("pg_terminate_backend", got, absl::Seconds(30), 1000, 100);
  EXPECT_EQ(got.distinct, 1000);
}

TEST_F(FaultTest, StopPostgresqlForTenSecondsAndStartItAgain) {
  auto sender = StartSender(FileEnv("200"));
  Accounts(1, 600);
  WaitSent(100, absl::Seconds(30));
  ASSERT_TRUE(pg_->Stop().ok());
  absl::SleepFor(absl::Seconds(10));
  ASSERT_TRUE(pg_->Resume().ok());
  WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 600, absl::Seconds(90));
  Accounts(601, 700);  // the collector is listening again
  WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 700, absl::Seconds(60));
  Received got = ReceivedIn(dir_ + "/out");
  // The sender kept sending while PostgreSQL was down; its acknowledgements waited. When the
  // collector reconnects it extends the leases of subscribers still connected before it
  // dequeues again, so leases that ran out during the outage are not handed out twice.
  Settle("PostgreSQL stopped 10 s", got, absl::Seconds(30), 700, 5);
  EXPECT_EQ(got.distinct, 700);
}

TEST_F(FaultTest, SmtpServerAnswers451ThenRecovers) {
  int port;
  auto smtp = StartSmtpPeer({"--fail-first", "40", "--fail-code", "451"}, &port);
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "smtp"},
                             {"MAILROOM_SMTP_URL", absl::StrCat("smtp://127.0.0.1:", port)},
                             {"MAILROOM_SMTP_ALLOW_PLAIN", "true"},
                             {"MAILROOM_RETRY_MAX_ATTEMPTS", "20"}});
  Accounts(1, 60);
  WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 60, absl::Seconds(60));
  Received got = ReceivedIn(dir_ + "/smtp");
  Settle("SMTP 451 then recovery", got, absl::Seconds(10), 60, 0);
  EXPECT_GT(Scalar("SELECT sum(failures) FROM delivery_states"), 0);
}

TEST_F(FaultTest, SesThrottles429ThenRecovers) {
  std::string endpoint = StartSes(40);
  if (endpoint.empty()) GTEST_SKIP() << "MAILROOM_NODE_MODULES not set (run .ci/test)";
  auto env = SesEnv(endpoint);
  env["MAILROOM_RETRY_MAX_ATTEMPTS"] = "20";
  auto sender = StartSender(env);
  Accounts(1, 60);
  WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 60, absl::Seconds(60));
  Received got = ReceivedBySes();
  Settle("SES 429 then recovery", got, absl::Seconds(10), 60, 0);
  EXPECT_GT(Scalar("SELECT sum(failures) FROM delivery_states"), 0);
  EXPECT_EQ(got.distinct, 60);
}

TEST_F(FaultTest, PermanentRejectionOfOneAddressAmongMany) {
  int port;
  auto smtp = StartSmtpPeer({"--reject-rcpt", "f50@"}, &port);
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "smtp"},
                             {"MAILROOM_SMTP_URL", absl::StrCat("smtp://127.0.0.1:", port)},
                             {"MAILROOM_SMTP_ALLOW_PLAIN", "true"}});
  Accounts(1, 100);
  WaitFor("SELECT count(*) FROM delivery_states WHERE state IN ('sent', 'failed')", 100,
          absl::Seconds(60));
  Received got = ReceivedIn(dir_ + "/smtp");
  Ledger l = Settle("SMTP 550 for one address", got, absl::Seconds(10), 99, 0);
  EXPECT_EQ(l.failed, 1);
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id "
                   "JOIN accounts a ON a.id = t.account WHERE d.state = 'failed' "
                   "AND a.email = 'f50@example.test' AND d.reason LIKE '%550%'"),
            1);
}

TEST_F(FaultTest, TwoCollectorsAndTwoSendersNeverSendATokenTwice) {
  auto collector2 = StartCollector({}, "collector2");
  int port2 = 0;
  {
    // The second collector's port, from its listen line.
    std::string log = collector2->Log();
    size_t at = log.find("listen=127.0.0.1:");
    ASSERT_NE(at, std::string::npos) << log;
    port2 = std::stoi(log.substr(at + 17));
  }
  auto a = StartSender(FileEnv(), "sender-a");
  auto b = StartSender(FileEnv(), "sender-b", port2);
  std::thread writer([this] {
    for (int i = 0; i < 20; ++i) Accounts(i * 100 + 1, i * 100 + 100);
  });
  writer.join();
  WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 2000, absl::Seconds(60));
  Received got = ReceivedIn(dir_ + "/out");
  Settle("two collectors + two senders", got, absl::Seconds(10), 2000, 0);
  EXPECT_EQ(got.emails, 2000);
  // Both senders did part of the work.
  EXPECT_GT(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'sent'"), 0);
  EXPECT_THAT(a->Log(), ::testing::HasSubstr("msg=sent"));
  EXPECT_THAT(b->Log(), ::testing::HasSubstr("msg=sent"));
}

TEST_F(FaultTest, JobsOfASubscriberThatNeverAcknowledgesGoToAnotherMember) {
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", collector_port_),
                                     grpc::InsecureChannelCredentials());
  testing::TestSubscriber silent(channel, testing::kStackBearer, "mailroom", 30, "silent");
  ASSERT_TRUE(silent.WaitSubscribed(absl::Seconds(10)));
  Accounts(1, 20);
  ASSERT_GT(silent.WaitForJobs(1, absl::Seconds(10)), 0u);
  auto sender = StartSender(FileEnv());
  Accounts(21, 100);
  // The silent member's jobs come back after its 3 s lease and go to the sender, which has
  // room; the silent member's window stays full, so it gets nothing more.
  WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 100, absl::Seconds(60));
  Received got = ReceivedIn(dir_ + "/out");
  Settle("never-acknowledging subscriber", got, absl::Seconds(10), 100, 0);
  // Every job the silent member received lost its lease once and was then sent by the sender.
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE lost_leases > 0"),
            static_cast<int64_t>(silent.Received()));
}

// The manifests ship 2 sender replicas; a deploy restarts them one after the other. Each sender
// is pace-capped (10/s) and holds 800 jobs, so jobs are held longer than the default 60 s lease
// (renewed meanwhile). A stopping sender finishes what it is sending, hands the rest back and
// acknowledges everything before it exits: nothing is lost and nothing is sent twice.
TEST_F(FaultTest, RollingRestartOfTwoSendersHoldingJobsLongerThanALease) {
  collector_->Signal(SIGTERM);
  (void)collector_->Wait(absl::Seconds(30));
  collector_ = StartCollector({{"MAILROOM_LEASE_MS", "60000"}}, "collector60", collector_port_);
  Accounts(1, 1800);
  auto env = FileEnv("10");
  env["MAILROOM_MAX_IN_FLIGHT"] = "900";
  auto a = StartSender(env, "sender-a");
  auto b = StartSender(env, "sender-b");
  // Every job is handed out at once (900 to each sender) ...
  ASSERT_EQ(WaitFor("SELECT count(*) FROM delivery_states", 1800, absl::Seconds(30)), 1800);
  // ... and the senders still hold some of them past the 60 s lease (renewed) at the restart.
  WaitSent(1250, absl::Seconds(180));
  const int64_t held_at_first = Scalar(
      "SELECT count(*) FROM delivery_states WHERE state = 'leased'");
  Term(a);  // finishes its send, hands the rest back at once
  a = StartSender(env, "sender-a2");
  WaitSent(1300, absl::Seconds(60));
  const int64_t held_at_second = Scalar(
      "SELECT count(*) FROM delivery_states WHERE state = 'leased'");
  Term(b);
  b = StartSender(env, "sender-b2");
  WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 1800, absl::Seconds(240));
  Received got = ReceivedIn(dir_ + "/out");
  Settle("rolling restart of 2 senders (60 s lease, jobs held > lease)", got, absl::Seconds(30),
         1800, 0);
  EXPECT_EQ(got.emails, 1800);
  EXPECT_EQ(got.duplicates(), 0);
  std::printf("FAULT rolling restart of 2 senders: held at each SIGTERM %lld / %lld jobs, "
              "longest hold %s\n",
              (long long)held_at_first, (long long)held_at_second,
              absl::FormatDuration(LongestHold()).c_str());
  EXPECT_GE(held_at_first, 400);  // >= 200 held by each sender
  EXPECT_GE(held_at_second, 400);
  EXPECT_GT(LongestHold(), absl::Seconds(60)) << "no job was held longer than a lease";
  // Hand-backs are not lost leases: nothing counts towards poison detection.
  EXPECT_EQ(Scalar("SELECT coalesce(max(lost_leases), 0) FROM delivery_states"), 0);
}

// Both collectors restarted one after the other while two pace-capped senders hold 800 jobs
// each (longer than the 60 s lease). A collector that stops keeps its subscribers' leases;
// the senders go on sending what they hold, acknowledge it once they are reconnected, and
// nothing is handed out twice.
TEST_F(FaultTest, RollingRestartOfTwoCollectorsWhileSendersHoldJobs) {
  collector_->Signal(SIGTERM);
  (void)collector_->Wait(absl::Seconds(30));
  const std::map<std::string, std::string> lease60 = {{"MAILROOM_LEASE_MS", "60000"}};
  auto c1 = StartCollector(lease60, "c1", collector_port_);
  auto c2 = StartCollector(lease60, "c2");
  const int port2 = PortOf(*c2);
  ASSERT_NE(port2, 0);
  Accounts(1, 1600);
  auto env = FileEnv("10");
  env["MAILROOM_MAX_IN_FLIGHT"] = "800";
  auto a = StartSender(env, "sender-a");
  auto b = StartSender(env, "sender-b", port2);
  // Every job is handed out at once (800 to each sender).
  ASSERT_EQ(WaitFor("SELECT count(*) FROM delivery_states", 1600, absl::Seconds(30)), 1600);
  WaitSent(100, absl::Seconds(60));
  Term(c1);
  c1 = StartCollector(lease60, "c1-restarted", collector_port_);
  WaitSent(300, absl::Seconds(60));
  Term(c2);
  c2 = StartCollector(lease60, "c2-restarted", port2);
  WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 1600, absl::Seconds(240));
  Received got = ReceivedIn(dir_ + "/out");
  Settle("rolling restart of 2 collectors (60 s lease, jobs held > lease)", got, absl::Seconds(30),
         1600, 0);
  EXPECT_EQ(got.emails, 1600);
  EXPECT_EQ(got.duplicates(), 0);
  std::printf("FAULT rolling restart of 2 collectors: longest hold %s\n",
              absl::FormatDuration(LongestHold()).c_str());
  EXPECT_GT(LongestHold(), absl::Seconds(60)) << "no job was held longer than a lease";
  EXPECT_EQ(Scalar("SELECT coalesce(max(attempts), 0) FROM delivery_states"), 1)
      << "a job was handed out again";
}

// A sender cut off from its collector (the collector process frozen: the TCP connection stays
// up, nothing answers) longer than a lease. Its leases run out in PostgreSQL and the other
// collector hands those jobs to the other sender. The cut-off sender stops sending as soon as
// its outcomes stop getting through (after a tenth of the lease) and forgets the leases it can
// no longer renew, so only what it sent just before and during that tenth may go out twice:
// about pace x lease / 10 (40/s x 0.3 s = 12) plus the acknowledgement in flight. Without
// those checks it went on sending every job it held (56 duplicates measured here).
TEST_F(FaultTest, SenderCutOffFromItsCollectorLongerThanALeaseStopsSendingThoseJobs) {
  auto c2 = StartCollector({}, "c2");
  const int port2 = PortOf(*c2);
  ASSERT_NE(port2, 0);
  auto env = FileEnv("40");
  env["MAILROOM_MAX_IN_FLIGHT"] = "200";
  auto a = StartSender(env, "sender-a");
  auto b = StartSender(env, "sender-b", port2);
  Accounts(1, 800);
  WaitSent(100, absl::Seconds(30));
  collector_->Signal(SIGSTOP);  // sender-a's collector stops answering
  // Its leases (3 s) run out and reach sender-b through the other collector. The frozen
  // collector may be inside a dequeue's transaction, holding the group's row lock every
  // dequeue needs: PostgreSQL ends that session after 750 ms idle (a quarter of the lease), so
  // the group goes on without it.
  EXPECT_GE(WaitFor("SELECT count(*) FROM delivery_states WHERE attempts > 1 AND state = 'sent'",
                    50, absl::Seconds(60)),
            50)
      << "the frozen collector's jobs did not reach sender-b";
  collector_->Signal(SIGCONT);
  WaitFor("SELECT count(*) FROM delivery_states WHERE state = 'sent'", 800, absl::Seconds(120));
  Received got = ReceivedIn(dir_ + "/out");
  // What sender-a sent and could never report went out again from sender-b: the duplicates.
  // sender-a sends only while its oldest unrecorded outcome is younger than a tenth of the
  // lease (300 ms), so every one of them was sent within 300 ms of the first (plus one send's
  // own time), wherever the freeze fell. Without that hold they spread over the 2.25 s the
  // sender trusts a lease it cannot renew. How many there are depends on where the freeze
  // fell: at most what the provider pace lets through in that window, its burst of 40 (one
  // second at 40/s) plus 40/s for those 450 ms, plus one job per connection (4) in progress.
  const std::map<uint64_t, absl::Time> by_a = SendTimes(a->Log()), by_b = SendTimes(b->Log());
  absl::Time first = absl::InfiniteFuture(), last = absl::InfinitePast();
  int64_t repeated = 0;
  for (const auto& [id, at] : by_a) {
    if (by_b.count(id) == 0) continue;
    ++repeated;
    first = std::min(first, at);
    last = std::max(last, at);
  }
  Settle("sender cut off from its collector > lease", got, absl::Seconds(30), 800, 40 + 18 + 4);
  EXPECT_EQ(repeated, got.duplicates()) << "duplicates other than sender-a's unreported sends";
  if (repeated > 0) {
    std::printf("FAULT sender cut off: sender-a's %lld unreported sends within %.0f ms\n",
                (long long)repeated, absl::ToDoubleMilliseconds(last - first));
    EXPECT_LE(last - first, absl::Milliseconds(300 + 150));
  }
  EXPECT_THAT(a->Log(), ::testing::HasSubstr("lease lost; not sending"));
}

}  // namespace
}  // namespace mailroom
