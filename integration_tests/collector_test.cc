// The collector binary against a throwaway PostgreSQL, over real gRPC on loopback.
#include <signal.h>

#include <algorithm>
#include <future>
#include <map>
#include <pqxx/pqxx>
#include <set>

#include "absl/strings/str_cat.h"
#include "collector/dispatch/signing.h"
#include "collector/schema/migrate.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "testing/collector_client.h"
#include "testing/collector_fixture.h"
#include "testing/pg_server.h"
#include "testing/pgbouncer.h"
#include "testing/process.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::PgServer;
using testing::Process;
using testing::TestSubscriber;

constexpr char kKey[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
constexpr char kBearer[] = "test-subscriber-token-0123456789";

class CollectorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = PgServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    pg_ = server->release();
  }
  static void TearDownTestSuite() { delete pg_; }

  void SetUp() override {
    static int n = 0;
    auto url = pg_->CreateDatabase(absl::StrCat("collector_", ++n));
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
    ASSERT_TRUE(MigrateUp(url_, EmbeddedMigrations()).ok());
  }

  // Starts a collector; returns its gRPC port.
  int StartCollector(std::map<std::string, std::string> extra = {}) {
    int port = testing::FreePort();
    std::map<std::string, std::string> defaults = {
        {"MAILROOM_METRICS_ADDRESS", "127.0.0.1:0"},
        {"MAILROOM_BATCH_LIMIT", "100"},
        {"MAILROOM_BATCH_TIMEOUT", "50"},
        {"MAILROOM_POLL_INTERVAL", "500"},
    };
    for (auto& [k, v] : extra) defaults[k] = v;
    auto p = testing::StartCollectorProcess(
        testing::CollectorEnv(url_, port, kKey, kBearer, defaults));
    EXPECT_NE(p, nullptr);
    collectors_.push_back(std::move(p));
    return port;
  }

  std::shared_ptr<grpc::Channel> Channel(int port) {
    return grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                               grpc::InsecureChannelCredentials());
  }

  // The test's own connections carry an application_name so fault injection can spare them.
  std::string TestUrl() const { return url_ + "?application_name=mailroom-test"; }
  void Exec(const std::string& sql) { testing::TestDb(TestUrl()).Exec(sql); }
  int64_t Scalar(const std::string& sql) { return testing::TestDb(TestUrl()).Scalar(sql); }
  std::string Text(const std::string& sql) { return testing::TestDb(TestUrl()).Text(sql); }
  void InsertAccounts(int n, const std::string& prefix) {
    testing::TestDb(TestUrl()).InsertAccounts(n, prefix);
  }
  static std::vector<uint64_t> Ids(const std::vector<v1::Job>& jobs) {
    std::vector<uint64_t> ids;
    for (const auto& j : jobs) ids.push_back(j.job_id());
    return ids;
  }

  static PgServer* pg_;
  std::string url_;
  std::vector<std::unique_ptr<Process>> collectors_;
};
PgServer* CollectorTest::pg_ = nullptr;

TEST_F(CollectorTest, InsertedAccountStreamsASignedJobThatVerifies) {
  int port = StartCollector();
  TestSubscriber sub(Channel(port), kBearer, "mailroom", 10);
  ASSERT_TRUE(sub.WaitSubscribed(absl::Seconds(10)));
  Exec("INSERT INTO accounts (email, login) VALUES ('alice@example.test', 'alice')");
  ASSERT_EQ(sub.WaitForJobs(1, absl::Seconds(10)), 1u);
  v1::Job job = sub.Jobs()[0];
  EXPECT_EQ(job.action(), v1::ACTION_ACTIVATION);
  EXPECT_EQ(job.email(), "alice@example.test");
  EXPECT_EQ(job.login(), "alice");
  EXPECT_EQ(job.token().size(), 86u);
  EXPECT_EQ(job.code().size(), 5u);
  EXPECT_EQ(job.attempt(), 1u);
  auto key = ParseSigningKey(kKey);
  ASSERT_TRUE(key.ok());
  std::vector<SigningKey> keys = {*key};
  EXPECT_TRUE(VerifyToken(keys, TokenAction::kActivation, job.token(), job.code()).ok());
  // The collector's log never contains the token or the code.
  EXPECT_THAT(collectors_[0]->Log(), Not(HasSubstr(job.token())));
}

// accounts.locale reaches the sender as Job.locale ("" when unset).
TEST_F(CollectorTest, TheAccountsLocaleTravelsWithItsJob) {
  int port = StartCollector();
  TestSubscriber sub(Channel(port), kBearer, "mailroom", 10);
  ASSERT_TRUE(sub.WaitSubscribed(absl::Seconds(10)));
  Exec("INSERT INTO accounts (email, login, locale) VALUES ('de@example.test', 'de', 'de-AT'),"
       " ('none@example.test', 'none', NULL)");
  ASSERT_EQ(sub.WaitForJobs(2, absl::Seconds(10)), 2u);
  std::map<std::string, std::string> locales;
  for (const auto& j : sub.Jobs()) locales[j.login()] = j.locale();
  EXPECT_EQ(locales, (std::map<std::string, std::string>{{"de", "de-AT"}, {"none", ""}}));
}

TEST_F(CollectorTest, PasswordRecoveryTokenSignsTheCode) {
  Exec("INSERT INTO accounts (email, login, status) VALUES ('bob@example.test', 'bob', 'active')");
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts");
  int port = StartCollector();
  TestSubscriber sub(Channel(port), kBearer, "mailroom", 10);
  ASSERT_EQ(sub.WaitForJobs(1, absl::Seconds(10)), 1u);
  v1::Job job = sub.Jobs()[0];
  EXPECT_EQ(job.action(), v1::ACTION_PASSWORD_RECOVERY);
  std::vector<SigningKey> keys = {*ParseSigningKey(kKey)};
  EXPECT_TRUE(VerifyToken(keys, TokenAction::kPasswordRecovery, job.token(), job.code()).ok());
  std::string wrong = job.code() == "00000" ? "00001" : "00000";
  EXPECT_FALSE(VerifyToken(keys, TokenAction::kPasswordRecovery, job.token(), wrong).ok());
}

TEST_F(CollectorTest, TenThousandAccountsInOneTransactionAreAllDispatched) {
  int port = StartCollector({{"MAILROOM_BATCH_LIMIT", "1000"},
                             {"MAILROOM_BATCH_TIMEOUT", "200"},
                             {"MAILROOM_POLL_INTERVAL", "600000"}});  // no catch-up poll help
  TestSubscriber sub(Channel(port), kBearer, "mailroom", 20000);
  ASSERT_TRUE(sub.WaitSubscribed(absl::Seconds(10)));
  absl::Time start = absl::Now();
  InsertAccounts(10000, "bulk");  // one statement, one transaction, one folded NOTIFY
  EXPECT_EQ(sub.WaitForJobs(10000, absl::Seconds(60)), 10000u);
  absl::Duration took = absl::Now() - start;
  std::printf("10,000 tokens from one transaction streamed in %s\n",
              absl::FormatDuration(took).c_str());
  std::set<uint64_t> unique;
  for (const auto& j : sub.Jobs()) unique.insert(j.job_id());
  EXPECT_EQ(unique.size(), 10000u);
}

// pgbouncer in transaction pooling in front of PostgreSQL: the collector's query connections go
// through it, only the sessions that need one (LISTEN, migrations, retention's lock) go direct.
// One server connection serves all the query connections, so each transaction runs on whatever
// server session is free, and RECONNECT replaces the server connections midway: tokens still
// flow end to end and their outcomes are recorded.
TEST_F(CollectorTest, TokensFlowThroughPgbouncerInTransactionPooling) {
  auto bouncer = testing::PgBouncer::Start(pg_->port(), /*pool_size=*/1);
  ASSERT_TRUE(bouncer.ok()) << bouncer.status();
  const std::string db = url_.substr(url_.rfind('/') + 1);
  int port = StartCollector({{"MAILROOM_DATABASE_URL", (*bouncer)->Url(db)},
                             {"MAILROOM_DIRECT_DATABASE_URL", url_},
                             {"MAILROOM_BATCH_TIMEOUT", "0"}});
  TestSubscriber sub(Channel(port), kBearer, "mailroom", 1000);
  ASSERT_TRUE(sub.WaitSubscribed(absl::Seconds(10)));
  for (int round = 0; round < 2; ++round) {
    InsertAccounts(50, absl::StrCat("bouncer", round, "_"));
    ASSERT_EQ(sub.WaitForJobs(50 * (round + 1), absl::Seconds(20)), 50u * (round + 1));
    ASSERT_TRUE(sub.Ack(Ids(sub.Take()), v1::OUTCOME_SENT).ok());
    EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'sent'"),
              50 * (round + 1));
    if (round == 0) {
      // Several client connections of the collector share the one server connection.
      auto clients = (*bouncer)->Admin("SHOW CLIENTS");
      ASSERT_TRUE(clients.ok()) << clients.status();
      EXPECT_GE(std::count(clients->begin(), clients->end(), '\n'), 2) << *clients;
      ASSERT_TRUE((*bouncer)->Admin("RECONNECT").ok());
    }
  }
  std::set<uint64_t> unique;
  for (const auto& j : sub.Jobs()) unique.insert(j.job_id());
  EXPECT_EQ(unique.size(), 100u);
  EXPECT_THAT(collectors_[0]->Log(), Not(HasSubstr("level=error")));
}

// Tokens the application inserts (password recoveries) get their ids in its transactions.
TEST_F(CollectorTest, TokenCommittedAfterAHigherIdIsStillDispatched) {
  Exec("INSERT INTO accounts (email, login, status) VALUES ('slow@example.test', 'slow', 'active'),"
       " ('fast@example.test', 'fast', 'active')");
  int port = StartCollector({{"MAILROOM_BATCH_TIMEOUT", "0"}});
  TestSubscriber sub(Channel(port), kBearer, "mailroom", 100);
  ASSERT_TRUE(sub.WaitSubscribed(absl::Seconds(10)));
  pqxx::connection slow(url_);
  pqxx::work slow_tx(slow);
  slow_tx.exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts"
               " WHERE login = 'slow'");
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts"
       " WHERE login = 'fast'");
  ASSERT_EQ(sub.WaitForJobs(1, absl::Seconds(10)), 1u);
  EXPECT_EQ(sub.Jobs()[0].login(), "fast");
  slow_tx.commit();
  ASSERT_EQ(sub.WaitForJobs(2, absl::Seconds(10)), 2u);
  EXPECT_EQ(sub.Jobs()[1].login(), "slow");
  EXPECT_LT(sub.Jobs()[1].job_id(), sub.Jobs()[0].job_id());
}

TEST_F(CollectorTest, TwoCollectorsNeverDispatchTheSameTokenToOneGroup) {
  int port_a = StartCollector({{"MAILROOM_BATCH_TIMEOUT", "0"}});
  int port_b = StartCollector({{"MAILROOM_BATCH_TIMEOUT", "0"}});
  TestSubscriber a(Channel(port_a), kBearer, "mailroom", 5000, "a");
  TestSubscriber b(Channel(port_b), kBearer, "mailroom", 5000, "b");
  ASSERT_TRUE(a.WaitSubscribed(absl::Seconds(10)));
  ASSERT_TRUE(b.WaitSubscribed(absl::Seconds(10)));
  for (int i = 0; i < 100; ++i) InsertAccounts(20, absl::StrCat("two", i, "_"));
  absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (a.Received() + b.Received() < 2000 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  absl::SleepFor(absl::Milliseconds(500));  // anything extra would be a duplicate
  std::multiset<uint64_t> all;
  for (const auto& j : a.Jobs()) all.insert(j.job_id());
  for (const auto& j : b.Jobs()) all.insert(j.job_id());
  std::set<uint64_t> unique(all.begin(), all.end());
  EXPECT_EQ(all.size(), 2000u);
  EXPECT_EQ(unique.size(), 2000u);
  std::printf("collector a streamed %zu, collector b %zu\n", a.Received(), b.Received());
}

TEST_F(CollectorTest, ExpiredConsumedAndWrongStatusTokensAreNotDispatched) {
  Exec("INSERT INTO accounts (email, login) VALUES ('ok@example.test', 'ok'),"
       " ('expired@example.test', 'expired'), ('consumed@example.test', 'consumed'),"
       " ('active@example.test', 'active')");
  Exec("SELECT mailroom_collect_signups(100)");  // their tokens, as a collector makes them
  Exec("UPDATE tokens SET expires_at = 1 WHERE account = (SELECT id FROM accounts WHERE login = "
       "'expired')");
  Exec("UPDATE tokens SET consumed_at = 1 WHERE account = (SELECT id FROM accounts WHERE login = "
       "'consumed')");
  // An activation token for an already active account; recovery for a provisioned one.
  Exec("UPDATE accounts SET status = 'active', activated_at = 1 WHERE login = 'active'");
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts WHERE "
       "login = 'ok'");
  int port = StartCollector();
  TestSubscriber sub(Channel(port), kBearer, "mailroom", 100);
  ASSERT_EQ(sub.WaitForJobs(1, absl::Seconds(10)), 1u);
  absl::SleepFor(absl::Seconds(1));
  ASSERT_EQ(sub.Received(), 1u);
  EXPECT_EQ(sub.Jobs()[0].login(), "ok");
  EXPECT_EQ(sub.Jobs()[0].action(), v1::ACTION_ACTIVATION);
  // The others are recorded with their reasons, so every token has an outcome.
  auto reason = [&](const std::string& login, const std::string& action) {
    pqxx::connection c(TestUrl());
    pqxx::nontransaction tx(c);
    auto r = tx.exec_params(
        "SELECT d.state::text || ': ' || coalesce(d.reason, '-') FROM delivery_states d"
        " JOIN tokens t ON t.id = d.token_id JOIN accounts a ON a.id = t.account"
        " WHERE a.login = $1 AND t.action = $2::text",
        login, action);
    return r.empty() || r[0][0].is_null() ? std::string("none") : r[0][0].as<std::string>();
  };
  EXPECT_EQ(reason("expired", "activation"), "expired: token expired before delivery");
  EXPECT_EQ(reason("consumed", "activation"), "cancelled: token consumed before delivery");
  EXPECT_EQ(reason("active", "activation"),
            "cancelled: activation token for an account that is active");
  EXPECT_EQ(reason("ok", "password_recovery"),
            "cancelled: password_recovery token for an account that is provisioned");
  EXPECT_EQ(reason("ok", "activation"), "leased: -");
}

TEST_F(CollectorTest, NothingIsDispatchedWithoutRoom) {
  int port = StartCollector();
  InsertAccounts(20, "room");
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states"), 0);  // no subscriber: jobs wait
  TestSubscriber sub(Channel(port), kBearer, "mailroom", 5);
  ASSERT_EQ(sub.WaitForJobs(5, absl::Seconds(10)), 5u);
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(sub.Received(), 5u);  // never more than max_in_flight unacknowledged
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states"), 5);
  ASSERT_TRUE(sub.Ack(Ids(sub.Take()), v1::OUTCOME_SENT).ok());
  EXPECT_EQ(sub.WaitForJobs(10, absl::Seconds(10)), 10u);
}

TEST_F(CollectorTest, TwoGroupsEachSeeEveryJobAndMembersShareOne) {
  int port = StartCollector({{"MAILROOM_BATCH_TIMEOUT", "0"}});
  TestSubscriber a1(Channel(port), kBearer, "mailroom", 1000, "a1");
  TestSubscriber a2(Channel(port), kBearer, "mailroom", 1000, "a2");
  TestSubscriber audit(Channel(port), kBearer, "audit", 1000, "audit");
  ASSERT_TRUE(a1.WaitSubscribed(absl::Seconds(10)));
  ASSERT_TRUE(a2.WaitSubscribed(absl::Seconds(10)));
  ASSERT_TRUE(audit.WaitSubscribed(absl::Seconds(10)));
  absl::SleepFor(absl::Milliseconds(500));  // the audit group exists before the inserts
  for (int i = 0; i < 30; ++i) InsertAccounts(10, absl::StrCat("g", i, "_"));
  EXPECT_EQ(audit.WaitForJobs(300, absl::Seconds(20)), 300u);
  absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (a1.Received() + a2.Received() < 300 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  std::set<uint64_t> group;
  for (const auto& j : a1.Jobs()) group.insert(j.job_id());
  for (const auto& j : a2.Jobs()) group.insert(j.job_id());
  EXPECT_EQ(a1.Received() + a2.Received(), 300u);
  EXPECT_EQ(group.size(), 300u);
  EXPECT_GT(a1.Received(), 0u);
  EXPECT_GT(a2.Received(), 0u);
}

TEST_F(CollectorTest, UnacknowledgedJobsGoToAnotherMemberWhenTheLeaseRunsOut) {
  int port = StartCollector({{"MAILROOM_LEASE_MS", "1000"}, {"MAILROOM_POLL_INTERVAL", "200"}});
  TestSubscriber silent(Channel(port), kBearer, "mailroom", 10, "silent");
  ASSERT_TRUE(silent.WaitSubscribed(absl::Seconds(10)));
  InsertAccounts(3, "lease");
  ASSERT_EQ(silent.WaitForJobs(3, absl::Seconds(10)), 3u);
  TestSubscriber other(Channel(port), kBearer, "mailroom", 10, "other");
  ASSERT_EQ(other.WaitForJobs(3, absl::Seconds(10)), 3u);  // after the 1 s lease
  for (const auto& j : other.Jobs()) EXPECT_EQ(j.attempt(), 2u);
  ASSERT_TRUE(other.Ack(Ids(other.Jobs()), v1::OUTCOME_SENT).ok());
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'sent'"), 3);
}

// A subscription that ends (network blip, collector restart, sender restart) keeps its leases:
// the sender behind it may still be sending those jobs. It acknowledges them under the id it
// received them with, and no other member is handed them meanwhile.
TEST_F(CollectorTest, EndedSubscriptionKeepsItsLeasesForItsSender) {
  int port = StartCollector({{"MAILROOM_LEASE_MS", "600000"}});
  auto first = std::make_unique<TestSubscriber>(Channel(port), kBearer, "mailroom", 10, "first");
  InsertAccounts(4, "cancel");
  ASSERT_EQ(first->WaitForJobs(4, absl::Seconds(10)), 4u);
  TestSubscriber second(Channel(port), kBearer, "mailroom", 10, "second");
  ASSERT_TRUE(second.WaitSubscribed(absl::Seconds(10)));
  first->Cancel();  // mid-stream, nothing acknowledged
  first->Finished(absl::Seconds(10));
  // The collector has seen the stream end (its subscriber count drops) ...
  auto stub = v1::Collector::NewStub(Channel(port));
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    v1::GetQueueStatsRequest req;
    req.set_consumer_group("mailroom");
    v1::GetQueueStatsResponse resp;
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, kBearer);
    if (stub->GetQueueStats(&ctx, req, &resp).ok() && resp.groups(0).subscribers() == 1) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  // ... and a dispatch round for the second member has run (a new job reaches it) ...
  InsertAccounts(1, "later");
  ASSERT_EQ(second.WaitForJobs(1, absl::Seconds(10)), 1u);
  // ... yet the four are still the first's: its sender acknowledges them.
  v1::AcknowledgeResponse resp;
  ASSERT_TRUE(first->Ack(Ids(first->Jobs()), v1::OUTCOME_SENT, "", 0, &resp).ok());
  EXPECT_EQ(resp.recorded(), 4u);
  EXPECT_EQ(second.Received(), 1u);
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'sent' AND attempts = 1"),
            4);
}

TEST_F(CollectorTest, TerminatedConnectionsLoseNothing) {
  int port = StartCollector({{"MAILROOM_BATCH_TIMEOUT", "20"}});
  TestSubscriber sub(Channel(port), kBearer, "mailroom", 100000);
  ASSERT_TRUE(sub.WaitSubscribed(absl::Seconds(10)));
  auto inserter = std::async(std::launch::async, [&] {
    for (int i = 0; i < 60; ++i) {
      InsertAccounts(25, absl::StrCat("term", i, "_"));
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  int64_t terminated = 0;
  for (int i = 0; i < 6; ++i) {
    absl::SleepFor(absl::Milliseconds(150));
    pqxx::connection c(TestUrl());
    pqxx::nontransaction tx(c);
    terminated += tx.exec1("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))"
                           " FROM pg_stat_activity WHERE datname = current_database()"
                           "   AND application_name = 'mailroom-collector'")[0]
                      .as<int64_t>();
  }
  inserter.get();
  absl::Time deadline = absl::Now() + absl::Seconds(60);
  std::set<uint64_t> unique;
  while (absl::Now() < deadline) {
    unique.clear();
    for (const auto& j : sub.Jobs()) unique.insert(j.job_id());
    if (unique.size() >= 1500) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(unique.size(), 1500u);
  // The collector's connections were really cut (while it backs off after an error it may have
  // none to cut in a round), and it noticed.
  EXPECT_GE(terminated, 3);
  EXPECT_THAT(collectors_[0]->Log(),
              ::testing::ContainsRegex("listener connection lost|reconnecting|dispatch failed|"
                                       "database connection lost"));
}

// Both the gRPC port and the plaintext health-only port (MAILROOM_HEALTH_ADDRESS, what
// Kubernetes probes when the gRPC port is TLS) follow the database.
TEST_F(CollectorTest, HealthIsNotServingWhileTheDatabaseIsDown) {
  const int health_port = testing::FreePort();
  int port = StartCollector({{"MAILROOM_RECONNECT_MAX_BACKOFF", "500"},
                             {"MAILROOM_HEALTH_ADDRESS", absl::StrCat("127.0.0.1:", health_port)}});
  using Status = grpc::health::v1::HealthCheckResponse::ServingStatus;
  auto check = [&](int p, const std::string& service) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    grpc::Status st = grpc::health::v1::Health::NewStub(Channel(p))->Check(&ctx, req, &resp);
    return st.ok() ? resp.status() : grpc::health::v1::HealthCheckResponse::UNKNOWN;
  };
  auto all = [&](Status want) {
    for (int p : {port, health_port}) {
      for (const char* service : {"", "mailroom.v1.Collector"}) {
        if (check(p, service) != want) return false;
      }
    }
    return true;
  };
  auto wait_all = [&](Status want) {
    absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (!all(want) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(100));
    return all(want);
  };
  EXPECT_TRUE(wait_all(grpc::health::v1::HealthCheckResponse::SERVING));
  ASSERT_TRUE(pg_->Stop().ok());
  EXPECT_TRUE(wait_all(grpc::health::v1::HealthCheckResponse::NOT_SERVING));
  ASSERT_TRUE(pg_->Resume().ok());
  EXPECT_TRUE(wait_all(grpc::health::v1::HealthCheckResponse::SERVING));
  EXPECT_TRUE(collectors_[0]->Running());  // never exits because PostgreSQL went away
  // The health-only port serves nothing else: no jobs, no credentials cross it.
  grpc::ClientContext ctx;
  v1::GetQueueStatsRequest req;
  v1::GetQueueStatsResponse resp;
  EXPECT_EQ(
      v1::Collector::NewStub(Channel(health_port))->GetQueueStats(&ctx, req, &resp).error_code(),
      grpc::StatusCode::UNIMPLEMENTED);
}

// A collector told to listen on every interface without TLS starts only with
// MAILROOM_ALLOW_PLAINTEXT=true (config_test and bad_input_test check the refusal), and says
// at start, as a warning, that tokens cross the network in clear.
TEST_F(CollectorTest, PlaintextOnEveryInterfaceIsWarnedAbout) {
  const int port = testing::FreePort();
  auto p = testing::StartCollectorProcess(
      testing::CollectorEnv(url_, port, kKey, kBearer,
                            {{"MAILROOM_LISTEN_ADDRESS", absl::StrCat("0.0.0.0:", port)},
                             {"MAILROOM_ALLOW_PLAINTEXT", "true"},
                             {"MAILROOM_METRICS_ADDRESS", "off"}}));
  ASSERT_NE(p, nullptr);
  const std::string log = p->Log();
  EXPECT_THAT(log, HasSubstr("level=warn msg=\"gRPC is plaintext on a network address"));
  EXPECT_THAT(log, HasSubstr("variable=MAILROOM_ALLOW_PLAINTEXT"));
  EXPECT_THAT(log, HasSubstr(" tls=off"));
}

// Every field of an outcome is checked alone: the bad ones are rejected one by one and the
// valid one beside them is recorded (a NUL in one reason used to reject the whole call, and a
// huge cost broke every later acknowledgement of the group with "bigint out of range").
TEST_F(CollectorTest, BadOutcomesAreRejectedOneByOneAndTheRestIsRecorded) {
  int port = StartCollector({{"MAILROOM_MAX_COST_MICROS", "5000"}});
  TestSubscriber sub(Channel(port), kBearer, "mailroom", 100);
  ASSERT_TRUE(sub.WaitSubscribed(absl::Seconds(10)));
  InsertAccounts(8, "bad");
  ASSERT_EQ(sub.WaitForJobs(8, absl::Seconds(20)), 8u);
  std::vector<v1::Job> jobs = sub.Jobs();
  v1::AcknowledgeRequest ack;
  ack.set_consumer_group("mailroom");
  ack.set_subscriber_id(sub.subscriber_id());
  auto add = [&](const v1::Job& j, v1::Outcome outcome) {
    auto* o = ack.add_outcomes();
    o->set_job_id(j.job_id());
    o->set_attempt(j.attempt());
    o->set_outcome(outcome);
    return o;
  };
  add(jobs[0], v1::OUTCOME_SENT)->set_cost_micros(9223372036854775807LL);        // over the cap
  add(jobs[1], v1::OUTCOME_FAILED)->set_reason(std::string("bad\0reason", 10));  // NUL
  add(jobs[2], v1::OUTCOME_RETRY)->set_retry_after_ms(40u * 24 * 3600 * 1000);   // > 31 days
  add(jobs[3], v1::OUTCOME_FAILED);  // FAILED without a reason
  add(jobs[4], v1::OUTCOME_UNSPECIFIED);
  add(jobs[5], v1::OUTCOME_SENT)->set_attempt(0);  // no lease identity
  add(jobs[6], v1::OUTCOME_FAILED)->set_reason(std::string(1500, 'x') + "\xc3\xa9");
  add(jobs[7], v1::OUTCOME_SENT)->set_cost_micros(4000);
  add(jobs[7], v1::OUTCOME_SENT)->set_cost_micros(4000);  // the same job twice
  auto stub = v1::Collector::NewStub(Channel(port));
  v1::AcknowledgeResponse resp;
  grpc::ClientContext ctx;
  testing::Authorize(&ctx, kBearer);
  ASSERT_TRUE(stub->Acknowledge(&ctx, ack, &resp).ok());
  EXPECT_EQ(resp.recorded(), 2u);  // jobs[6] (reason cut) and jobs[7] once
  ASSERT_EQ(resp.rejected_size(), 7);
  std::set<uint64_t> rejected;
  for (const auto& r : resp.rejected()) rejected.insert(r.job_id());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(rejected.count(jobs[i].job_id()), 1u) << i;
  EXPECT_THAT(resp.rejected(0).error(), HasSubstr("MAILROOM_MAX_COST_MICROS"));
  EXPECT_THAT(resp.rejected(1).error(), HasSubstr("NUL"));
  EXPECT_EQ(Scalar(
                absl::StrCat("SELECT octet_length(reason) FROM delivery_states WHERE token_id = ",
                             jobs[6].job_id())),
            1000);
  EXPECT_EQ(Scalar("SELECT cost_micros FROM group_usage"), 4000);
  // The rejected ones keep their lease and can still be acknowledged properly.
  ASSERT_TRUE(sub.Ack({jobs[0].job_id(), jobs[1].job_id()}, v1::OUTCOME_SENT, "", 100).ok());
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'sent'"), 3);
  EXPECT_EQ(Scalar("SELECT cost_micros FROM group_usage"), 4200);
}

// A lease belongs to its holder (subscription id + attempt). A subscription that ends keeps
// its leases until they run out; a late outcome from a former holder changes nothing; nobody
// can renew or acknowledge another subscriber's lease.
TEST_F(CollectorTest, LeasesAreFencedByHolderAndAttempt) {
  int port = StartCollector({{"MAILROOM_LEASE_MS", "1500"}});
  InsertAccounts(5, "fence");
  std::vector<v1::Job> held;
  std::string first_id;
  {
    TestSubscriber a(Channel(port), kBearer, "mailroom", 10, "a");
    ASSERT_EQ(a.WaitForJobs(5, absl::Seconds(20)), 5u);
    held = a.Jobs();
    first_id = a.subscriber_id();
    a.Cancel();
    a.Finished(absl::Seconds(10));
  }
  // The stream is gone but the leases are still the holder's: its sender acknowledges two.
  auto stub = v1::Collector::NewStub(Channel(port));
  auto ack = [&](const std::string& sub, const std::vector<v1::Job>& jobs) {
    v1::AcknowledgeRequest req;
    req.set_consumer_group("mailroom");
    req.set_subscriber_id(sub);
    for (const auto& j : jobs) {
      auto* o = req.add_outcomes();
      o->set_job_id(j.job_id());
      o->set_attempt(j.attempt());
      o->set_outcome(v1::OUTCOME_SENT);
    }
    v1::AcknowledgeResponse resp;
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, kBearer);
    EXPECT_TRUE(stub->Acknowledge(&ctx, req, &resp).ok());
    return resp;
  };
  EXPECT_EQ(ack(first_id, {held[0], held[1]}).recorded(), 2u);

  // The other three run out and go to a new member, as attempt 2.
  TestSubscriber b(Channel(port), kBearer, "mailroom", 10, "b");
  ASSERT_EQ(b.WaitForJobs(3, absl::Seconds(20)), 3u);
  std::vector<v1::Job> again = b.Jobs();
  for (const auto& j : again) EXPECT_EQ(j.attempt(), 2u);
  // The holder that left does not count towards poison detection.
  EXPECT_EQ(Scalar("SELECT max(lost_leases) FROM delivery_states"), 0);

  // Late outcomes of the former holder: ignored, nothing changes.
  v1::AcknowledgeResponse late = ack(first_id, {held[2], held[3], held[4]});
  EXPECT_EQ(late.recorded(), 0u);
  EXPECT_EQ(late.ignored_job_ids_size(), 3);
  // Someone else naming b's leases: ignored too, with b's id but the old attempt as well.
  TestSubscriber c(Channel(port), kBearer, "mailroom", 10, "c");
  ASSERT_TRUE(c.WaitSubscribed(absl::Seconds(10)));
  EXPECT_EQ(ack(c.subscriber_id(), again).recorded(), 0u);
  EXPECT_EQ(ack(b.subscriber_id(), {held[2], held[3], held[4]}).recorded(), 0u);
  {
    v1::RenewLeasesRequest req;
    req.set_consumer_group("mailroom");
    req.set_subscriber_id(c.subscriber_id());
    for (const auto& j : again) req.add_job_ids(j.job_id());
    v1::RenewLeasesResponse resp;
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, kBearer);
    ASSERT_TRUE(stub->RenewLeases(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.lost_job_ids_size(), 3);
  }
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'leased'"), 3);
  // The real holder's outcomes are recorded.
  EXPECT_EQ(ack(b.subscriber_id(), again).recorded(), 3u);
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'sent'"), 5);
}

// Poison detection counts only leases that ran out while their holder was subscribed and gave
// no outcome; hand-backs (DEFER) and RETRY outcomes do not count.
TEST_F(CollectorTest, PoisonDetectionCountsOnlyLeasesLostByALiveHolder) {
  int port = StartCollector({{"MAILROOM_LEASE_MS", "1000"}});
  Exec("UPDATE consumer_groups SET max_lost_leases = 2 WHERE name = 'mailroom'");
  InsertAccounts(2, "poison");
  TestSubscriber sub(Channel(port), kBearer, "mailroom", 10);
  ASSERT_EQ(sub.WaitForJobs(2, absl::Seconds(20)), 2u);
  std::vector<v1::Job> jobs = sub.Jobs();
  const uint64_t silent = jobs[0].job_id(), polite = jobs[1].job_id();
  // The polite job is deferred and retried over and over: it never fails.
  for (int round = 0; round < 3; ++round) {
    const uint32_t attempt = sub.AttemptOf(polite);
    v1::AcknowledgeResponse resp;
    ASSERT_TRUE(
        sub.Ack({polite}, round % 2 ? v1::OUTCOME_RETRY : v1::OUTCOME_DEFER, "busy", 0, &resp)
            .ok());
    ASSERT_EQ(resp.recorded(), 1u);
    // Handed out again, to this subscriber (the only one).
    absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (sub.AttemptOf(polite) == attempt && absl::Now() < deadline) {
      sub.WaitForJobs(sub.Received() + 1, absl::Milliseconds(200));
    }
    ASSERT_GT(sub.AttemptOf(polite), attempt);
  }
  ASSERT_TRUE(sub.Ack({polite}, v1::OUTCOME_SENT).ok());
  // The silent one's lease runs out twice while this subscriber is connected: it fails.
  absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (Scalar(absl::StrCat(
             "SELECT count(*) FROM delivery_states WHERE state = 'failed' AND token_id = ",
             silent)) == 0 &&
         absl::Now() < deadline) {
    sub.WaitForJobs(sub.Received() + 1, absl::Milliseconds(500));
  }
  EXPECT_THAT(Text(absl::StrCat(
                  "SELECT coalesce(reason, '') FROM delivery_states WHERE token_id = ", silent)),
              HasSubstr("lease ran out 2 times"));
  EXPECT_EQ(
      Scalar(absl::StrCat("SELECT lost_leases FROM delivery_states WHERE token_id = ", polite)), 0);
  EXPECT_EQ(Text(absl::StrCat("SELECT state FROM delivery_states WHERE token_id = ", polite)),
            "sent");
}

TEST_F(CollectorTest, OperatorCallsReportDepthFailuresUsageAndRequeue) {
  int port = StartCollector();
  InsertAccounts(7, "ops");
  auto stub = v1::Collector::NewStub(Channel(port));
  auto stats = [&] {
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, kBearer);
    v1::GetQueueStatsRequest req;
    req.set_consumer_group("mailroom");
    v1::GetQueueStatsResponse resp;
    EXPECT_TRUE(stub->GetQueueStats(&ctx, req, &resp).ok());
    return resp.groups(0);
  };
  EXPECT_EQ(stats().depth(), 7u);
  TestSubscriber sub(Channel(port), kBearer, "mailroom", 100);
  ASSERT_EQ(sub.WaitForJobs(7, absl::Seconds(10)), 7u);
  std::vector<uint64_t> ids = Ids(sub.Jobs());
  ASSERT_TRUE(sub.Ack({ids.begin(), ids.begin() + 5}, v1::OUTCOME_SENT, "", 100).ok());
  ASSERT_TRUE(sub.Ack({ids[5], ids[6]}, v1::OUTCOME_FAILED, "550 5.1.1 no such user").ok());
  v1::GroupStats g = stats();
  EXPECT_EQ(g.depth(), 0u);
  EXPECT_EQ(g.sent(), 5u);
  EXPECT_EQ(g.failed(), 2u);
  EXPECT_EQ(g.subscribers(), 1u);
  {
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, kBearer);
    v1::ListFailuresRequest req;
    req.set_consumer_group("mailroom");
    v1::ListFailuresResponse resp;
    ASSERT_TRUE(stub->ListFailures(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.failures_size(), 2);
    EXPECT_EQ(resp.failures(0).reason(), "550 5.1.1 no such user");
  }
  {
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, kBearer);
    v1::GetUsageRequest req;
    req.set_consumer_group("mailroom");
    v1::GetUsageResponse resp;
    ASSERT_TRUE(stub->GetUsage(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.sent(), 5u);
    EXPECT_EQ(resp.cost_micros(), 500);
  }
  {
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, kBearer);
    v1::RequeueRequest req;
    req.set_consumer_group("mailroom");
    v1::RequeueResponse resp;
    ASSERT_TRUE(stub->Requeue(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.requeued(), 2u);
  }
  EXPECT_EQ(sub.WaitForJobs(9, absl::Seconds(10)), 9u);  // the two failed ones come back
}

// Scoped credentials: a subscriber of one group can use only that group; only operators
// requeue; operators see only their groups' statistics.
TEST_F(CollectorTest, CredentialsAreScopedToGroupsAndRoles) {
  const std::string a = "group-a-subscriber-0123456789";
  const std::string b = "group-b-subscriber-0123456789";
  const std::string ops = "group-a-operator-0123456789";
  int port = StartCollector({{"MAILROOM_GROUPS", "groupa,groupb"},
                             {"MAILROOM_SUBSCRIBER_TOKENS",
                              absl::StrCat(a, "@groupa:subscriber,", b, "@groupb:subscriber, ", ops,
                                           "@groupa:operator")}});
  InsertAccounts(3, "scope");
  auto stub = v1::Collector::NewStub(Channel(port));

  // Group A's token cannot subscribe to or acknowledge in group B.
  EXPECT_EQ(TestSubscriber(Channel(port), a, "groupb", 10).Finished(absl::Seconds(10)).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  TestSubscriber in_b(Channel(port), b, "groupb", 10);
  ASSERT_EQ(in_b.WaitForJobs(3, absl::Seconds(10)), 3u);
  {
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, a);
    v1::AcknowledgeRequest req;
    req.set_consumer_group("groupb");
    req.set_subscriber_id(in_b.subscriber_id());
    auto* o = req.add_outcomes();
    o->set_job_id(in_b.Jobs()[0].job_id());
    o->set_outcome(v1::OUTCOME_SENT);
    o->set_attempt(1);
    v1::AcknowledgeResponse resp;
    grpc::Status st = stub->Acknowledge(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr("\"groupb\""));
  }
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'leased'"), 3);

  // In its own group it works, but a subscriber cannot requeue.
  TestSubscriber in_a(Channel(port), a, "groupa", 10);
  ASSERT_EQ(in_a.WaitForJobs(3, absl::Seconds(10)), 3u);
  ASSERT_TRUE(in_a.Ack(Ids(in_a.Jobs()), v1::OUTCOME_FAILED, "550 no such user").ok());
  auto requeue = [&](const std::string& bearer) {
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, bearer);
    v1::RequeueRequest req;
    req.set_consumer_group("groupa");
    v1::RequeueResponse resp;
    grpc::Status st = stub->Requeue(&ctx, req, &resp);
    return std::make_pair(st.error_code(), resp.requeued());
  };
  EXPECT_EQ(requeue(a).first, grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(requeue(b).first, grpc::StatusCode::PERMISSION_DENIED);
  // The operator can; it cannot subscribe, and its statistics cover its groups only.
  EXPECT_EQ(requeue(ops), std::make_pair(grpc::StatusCode::OK, 3u));
  EXPECT_EQ(in_a.WaitForJobs(6, absl::Seconds(10)), 6u);
  EXPECT_EQ(
      TestSubscriber(Channel(port), ops, "groupa", 10).Finished(absl::Seconds(10)).error_code(),
      grpc::StatusCode::PERMISSION_DENIED);
  auto stats = [&](const std::string& group, v1::GetQueueStatsResponse* resp) {
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, ops);
    v1::GetQueueStatsRequest req;
    req.set_consumer_group(group);
    return stub->GetQueueStats(&ctx, req, resp).error_code();
  };
  v1::GetQueueStatsResponse all;
  ASSERT_EQ(stats("", &all), grpc::StatusCode::OK);
  ASSERT_EQ(all.groups_size(), 1);
  EXPECT_EQ(all.groups(0).consumer_group(), "groupa");
  v1::GetQueueStatsResponse other;
  EXPECT_EQ(stats("groupb", &other), grpc::StatusCode::PERMISSION_DENIED);
  // Unknown tokens stay UNAUTHENTICATED; no token reaches the log.
  EXPECT_EQ(TestSubscriber(Channel(port), "unknown-token-0123456789", "groupa", 10)
                .Finished(absl::Seconds(10))
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  for (const std::string& t : {a, b, ops}) {
    EXPECT_THAT(collectors_[0]->Log(), Not(HasSubstr(t)));
  }
}

// An observer's credential (`TOKEN@audit:observer`) receives every job of its group, but never
// a signed token or a code: not on the first hand-out, not when its leases ran out and the
// jobs were handed out again, for activations and recoveries alike. It may not report a job
// SENT or FAILED (PERMISSION_DENIED, nothing recorded); what it acknowledges settles its own
// group only; a sender's group gets its jobs with tokens that verify.
TEST_F(CollectorTest, AnObserverNeverReceivesATokenOrACode) {
  const std::string observer = "audit-observer-token-0123456789";
  const std::string sender = "mailroom-sender-token-0123456789";
  int port = StartCollector(
      {{"MAILROOM_GROUPS", "audit,mailroom"},
       {"MAILROOM_LEASE_MS", "1000"},
       {"MAILROOM_POLL_INTERVAL", "200"},
       {"MAILROOM_SUBSCRIBER_TOKENS",
        absl::StrCat(observer, "@audit:observer,", sender, "@mailroom:sender")}});
  Exec("INSERT INTO accounts (email, login, status) VALUES ('rec@example.test', 'rec', 'active')");
  Exec("INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts");
  InsertAccounts(3, "observed");
  constexpr size_t kJobs = 4;
  auto expect_no_secrets = [](const std::vector<v1::Job>& jobs, uint32_t attempt) {
    for (const v1::Job& j : jobs) {
      EXPECT_EQ(j.token(), "") << j.job_id();
      EXPECT_EQ(j.code(), "") << j.job_id();
      EXPECT_NE(j.email(), "") << j.job_id();
      EXPECT_EQ(j.attempt(), attempt) << j.job_id();
    }
  };
  TestSubscriber watching(Channel(port), observer, "audit", 10, "watching");
  ASSERT_EQ(watching.WaitForJobs(kJobs, absl::Seconds(10)), kJobs);
  std::vector<v1::Job> first = watching.Take();
  ASSERT_EQ(first.size(), kJobs);
  expect_no_secrets(first, 1);
  EXPECT_EQ(std::count_if(first.begin(), first.end(),
                          [](const v1::Job& j) {
                            return j.action() == v1::ACTION_PASSWORD_RECOVERY;
                          }),
            1);
  // Not acknowledged: after the 1 s lease the same jobs come again, still without.
  ASSERT_EQ(watching.WaitForJobs(2 * kJobs, absl::Seconds(10)), 2 * kJobs);
  std::vector<v1::Job> again = watching.Take();
  expect_no_secrets(again, 2);
  const std::vector<uint64_t> first_ids = Ids(first), again_ids = Ids(again);
  EXPECT_EQ(std::set<uint64_t>(again_ids.begin(), again_ids.end()),
            std::set<uint64_t>(first_ids.begin(), first_ids.end()));
  // Not a sender: no budget holder.
  {
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, observer);
    v1::SubscribeRequest req;
    req.set_consumer_group("audit");
    req.set_max_in_flight(1);
    req.set_budget_holder("sender-0123456789ab");
    auto stream = v1::Collector::NewStub(Channel(port))->Subscribe(&ctx, req);
    v1::SubscribeResponse msg;
    EXPECT_FALSE(stream->Read(&msg));
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }

  // The sender's group: the same jobs, with tokens and codes that verify.
  TestSubscriber sending(Channel(port), sender, "mailroom", 10, "sending");
  ASSERT_EQ(sending.WaitForJobs(kJobs, absl::Seconds(10)), kJobs);
  std::vector<SigningKey> keys = {*ParseSigningKey(kKey)};
  for (const v1::Job& j : sending.Jobs()) {
    const TokenAction action = j.action() == v1::ACTION_PASSWORD_RECOVERY
                                   ? TokenAction::kPasswordRecovery
                                   : TokenAction::kActivation;
    EXPECT_TRUE(VerifyToken(keys, action, j.token(), j.code()).ok()) << j.job_id();
  }
  // An observer sends nothing: its SENT or FAILED is refused, and no job's state changes.
  const std::string by_group =
      "SELECT count(*) FROM delivery_states d JOIN consumer_groups g ON g.id = d.group_id "
      "WHERE g.name = '";
  EXPECT_EQ(watching.Ack(Ids(again), v1::OUTCOME_SENT).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(watching.Ack(Ids(again), v1::OUTCOME_FAILED, "not for us").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Scalar(by_group + "audit' AND d.state IN ('sent', 'failed', 'expired')"), 0);
  EXPECT_EQ(Scalar(by_group + "audit' AND d.state = 'leased'"), static_cast<int64_t>(kJobs));
  // It settles the jobs of its own group it has seen (EXPIRED); the sender's stay the sender's.
  ASSERT_TRUE(watching.Ack(Ids(again), v1::OUTCOME_EXPIRED).ok());
  EXPECT_EQ(Scalar(by_group + "audit' AND d.state = 'expired'"), static_cast<int64_t>(kJobs));
  EXPECT_EQ(Scalar(by_group + "mailroom' AND d.state = 'sent'"), 0);
  {
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, observer);
    v1::AcknowledgeRequest req;
    req.set_consumer_group("mailroom");
    req.set_subscriber_id(sending.subscriber_id());
    for (const v1::Job& j : sending.Jobs()) {
      v1::JobOutcome* o = req.add_outcomes();
      o->set_job_id(j.job_id());
      o->set_attempt(j.attempt());
      o->set_outcome(v1::OUTCOME_SENT);
    }
    v1::AcknowledgeResponse resp;
    EXPECT_EQ(v1::Collector::NewStub(Channel(port))->Acknowledge(&ctx, req, &resp).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  EXPECT_EQ(Scalar(by_group + "mailroom' AND d.state = 'sent'"), 0);
  EXPECT_THAT(collectors_[0]->Log(), HasSubstr("secrets=withheld"));
}

// Tenants cannot hurt each other: whatever an `audit` subscriber reports about a recipient
// (FAILED with suppress_recipient), every job of the `mailroom` group for that recipient is
// still delivered, and the suppression list is unchanged.
TEST_F(CollectorTest, AnotherGroupsSuppressionNeverChangesWhatAGroupReceives) {
  const std::string audit = "audit-subscriber-0123456789";
  const std::string mail = "mailroom-subscriber-0123456789";
  int port = StartCollector(
      {{"MAILROOM_GROUPS", "audit,mailroom"},
       {"MAILROOM_SUBSCRIBER_TOKENS",
        absl::StrCat(audit, "@audit:subscriber,", mail, "@mailroom:subscriber")}});
  constexpr int kAccounts = 5;
  InsertAccounts(kAccounts, "tenant");
  TestSubscriber in_audit(Channel(port), audit, "audit", 10);
  ASSERT_EQ(in_audit.WaitForJobs(kAccounts, absl::Seconds(10)), size_t{kAccounts});
  {
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, audit);
    v1::AcknowledgeRequest req;
    req.set_consumer_group("audit");
    req.set_subscriber_id(in_audit.subscriber_id());
    for (const v1::Job& job : in_audit.Jobs()) {
      v1::JobOutcome* o = req.add_outcomes();
      o->set_job_id(job.job_id());
      o->set_attempt(in_audit.AttemptOf(job.job_id()));
      o->set_outcome(v1::OUTCOME_FAILED);
      o->set_reason("smtp RCPT: 550 5.1.1 user unknown");
      o->set_suppress_recipient(true);
    }
    v1::AcknowledgeResponse resp;
    grpc::Status st = v1::Collector::NewStub(Channel(port))->Acknowledge(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.recorded(), uint32_t{kAccounts});
  }
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states d JOIN consumer_groups g"
                   " ON g.id = d.group_id WHERE g.name = 'audit' AND d.state = 'failed'"),
            kAccounts);
  EXPECT_EQ(Scalar("SELECT count(*) FROM suppressions"), 0);
  // `mailroom` comes later: every one of its jobs is handed out, none ends suppressed.
  TestSubscriber in_mailroom(Channel(port), mail, "mailroom", 10);
  EXPECT_EQ(in_mailroom.WaitForJobs(kAccounts, absl::Seconds(10)), size_t{kAccounts});
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states d JOIN consumer_groups g"
                   " ON g.id = d.group_id WHERE g.name = 'mailroom' AND d.state = 'leased'"),
            kAccounts);
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'suppressed'"), 0);
}

// Two credentials of one group: the second, knowing the first's subscription id and holder
// string, can neither settle nor renew its leases, nor give back (or be refunded) its grant.
// Subscription ids and holders are not in the log in full.
TEST_F(CollectorTest, ASecondCredentialOfAGroupCannotActForTheFirst) {
  const std::string first = "first-subscriber-0123456789";
  const std::string second = "second-subscriber-0123456789";
  int port = StartCollector(
      {{"MAILROOM_GROUPS", "mailroom"},
       {"MAILROOM_SUBSCRIBER_TOKENS",
        absl::StrCat(first, "@mailroom:subscriber,", second, "@mailroom:subscriber")}});
  InsertAccounts(2, "twin");
  auto stub = v1::Collector::NewStub(Channel(port));
  const std::string holder = "sender-a-0123456789ab";
  TestSubscriber a(Channel(port), first, "mailroom", 10);
  ASSERT_EQ(a.WaitForJobs(2, absl::Seconds(10)), 2u);
  const std::vector<uint64_t> ids = Ids(a.Jobs());

  {
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, second);
    v1::AcknowledgeRequest req;
    req.set_consumer_group("mailroom");
    req.set_subscriber_id(a.subscriber_id());
    for (uint64_t id : ids) {
      v1::JobOutcome* o = req.add_outcomes();
      o->set_job_id(id);
      o->set_attempt(1);
      o->set_outcome(v1::OUTCOME_RETRY);
    }
    v1::AcknowledgeResponse resp;
    EXPECT_EQ(stub->Acknowledge(&ctx, req, &resp).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, second);
    v1::RenewLeasesRequest req;
    req.set_consumer_group("mailroom");
    req.set_subscriber_id(a.subscriber_id());
    for (uint64_t id : ids) req.add_job_ids(id);
    v1::RenewLeasesResponse resp;
    EXPECT_EQ(stub->RenewLeases(&ctx, req, &resp).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'leased'"), 2);

  // The first sender's live grant of 5 emails; the second names its holder and grant id.
  auto acquire = [&](const std::string& bearer) {
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, bearer);
    v1::AcquireBudgetRequest req;
    req.set_consumer_group("mailroom");
    req.set_holder(holder);
    req.set_emails(5);
    req.set_price_micros(100);
    v1::AcquireBudgetResponse resp;
    EXPECT_TRUE(stub->AcquireBudget(&ctx, req, &resp).ok());
    return resp;
  };
  const v1::AcquireBudgetResponse grant = acquire(first);
  ASSERT_EQ(grant.emails(), 5u);
  const std::string committed = "SELECT granted_micros - returned_micros FROM budget_months";
  EXPECT_EQ(Scalar(committed), 500);
  {
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, second);
    v1::ReturnBudgetRequest req;
    req.set_consumer_group("mailroom");
    req.set_holder(holder);
    req.set_grant_id(grant.grant_id());
    req.set_emails(5);
    v1::ReturnBudgetResponse resp;
    ASSERT_TRUE(stub->ReturnBudget(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.returned(), 0u);
  }
  EXPECT_EQ(Scalar(committed), 500);
  // Grant ids are not sequential: the next grant's id says nothing about the first one's.
  const uint64_t next = acquire(first).grant_id();
  EXPECT_GT(next > grant.grant_id() ? next - grant.grant_id() : grant.grant_id() - next, 1000u);
  // The same holder string from the second credential is another holder.
  ASSERT_EQ(acquire(second).emails(), 5u);
  EXPECT_EQ(Scalar("SELECT count(DISTINCT holder) FROM budget_grants"), 2);

  // The first credential settles its own jobs.
  ASSERT_TRUE(a.Ack(ids, v1::OUTCOME_SENT).ok());
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'sent'"), 2);
  const std::string log = collectors_[0]->Log();
  EXPECT_THAT(log, HasSubstr(a.subscriber_id().substr(0, 12)));
  EXPECT_THAT(log, Not(HasSubstr(a.subscriber_id())));
  EXPECT_THAT(log, Not(HasSubstr(holder)));
}

TEST_F(CollectorTest, LegacyTokensStillWorkAndAreFlaggedAsDeprecated) {
  StartCollector();
  EXPECT_THAT(collectors_[0]->Log(), HasSubstr("deprecated"));
  EXPECT_THAT(collectors_[0]->Log(), Not(HasSubstr(kBearer)));
}

TEST_F(CollectorTest, MaxInFlightIsCappedByTheCollector) {
  int port = StartCollector({{"MAILROOM_MAX_IN_FLIGHT_CAP", "5"}});
  InsertAccounts(20, "cap");
  TestSubscriber sub(Channel(port), kBearer, "mailroom", 1000);
  ASSERT_EQ(sub.WaitForJobs(5, absl::Seconds(10)), 5u);
  // Without the cap the first dequeue (batch limit 100) would have leased all 20 at once.
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states"), 5);
  EXPECT_EQ(sub.Received(), 5u);
  ASSERT_TRUE(sub.Ack(Ids(sub.Take()), v1::OUTCOME_SENT).ok());
  EXPECT_EQ(sub.WaitForJobs(10, absl::Seconds(10)), 10u);
  EXPECT_THAT(collectors_[0]->Log(), HasSubstr("requested_max_in_flight=1000"));
}

// MAILROOM_GROUPS exist from the collector's start: tokens committed before their first
// subscriber are delivered. SubscribeRequest.start_from_earliest does the same for a new group.
TEST_F(CollectorTest, ConfiguredGroupsReceiveTokensCommittedBeforeTheirFirstSubscribe) {
  InsertAccounts(10, "early");
  int port = StartCollector({{"MAILROOM_GROUPS", "mailroom,billing"}});
  EXPECT_EQ(Scalar("SELECT count(*) FROM consumer_groups WHERE name = 'billing'"), 1);
  InsertAccounts(1, "after");
  TestSubscriber billing(Channel(port), kBearer, "billing", 100);
  EXPECT_EQ(billing.WaitForJobs(11, absl::Seconds(10)), 11u);

  // A Subscribe that creates its group from the earliest unexpired token.
  auto stub = v1::Collector::NewStub(Channel(port));
  grpc::ClientContext ctx;
  testing::Authorize(&ctx, kBearer);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::SubscribeRequest req;
  req.set_consumer_group("late-joiner");
  req.set_max_in_flight(100);
  req.set_start_from_earliest(true);
  auto reader = stub->Subscribe(&ctx, req);
  v1::SubscribeResponse msg;
  int jobs = 0;
  while (jobs < 11 && reader->Read(&msg)) jobs += msg.jobs_size();
  EXPECT_EQ(jobs, 11);
  ctx.TryCancel();
  (void)reader->Finish();

  // Without it a new group starts from now.
  TestSubscriber fresh(Channel(port), kBearer, "fresh", 100);
  ASSERT_TRUE(fresh.WaitSubscribed(absl::Seconds(10)));
  for (int i = 0;
       i < 100 && Scalar("SELECT count(*) FROM consumer_groups WHERE name = 'fresh'") == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  InsertAccounts(1, "newest");
  ASSERT_GE(fresh.WaitForJobs(1, absl::Seconds(10)), 1u);
  for (const auto& j : fresh.Jobs()) EXPECT_EQ(j.email(), "newest1@example.test");
}

// The collector's connections carry a statement timeout: a dequeue stuck on a lock fails,
// the dispatcher backs off (growing delays, even though reconnecting succeeds) and recovers.
TEST_F(CollectorTest, StuckStatementsTimeOutAndTheDispatcherBacksOff) {
  InsertAccounts(3, "stuck");
  int port = StartCollector(
      {{"MAILROOM_STATEMENT_TIMEOUT", "300"}, {"MAILROOM_RECONNECT_MAX_BACKOFF", "1000"}});
  auto blocker = std::make_unique<pqxx::connection>(TestUrl());
  auto lock = std::make_unique<pqxx::work>(*blocker);
  lock->exec("SELECT * FROM consumer_groups WHERE name = 'mailroom' FOR UPDATE");
  TestSubscriber sub(Channel(port), kBearer, "mailroom", 100);
  ASSERT_TRUE(collectors_[0]->WaitForLog("statement timeout", absl::Seconds(20)))
      << collectors_[0]->Log();
  ASSERT_TRUE(collectors_[0]->WaitForLog("reconnecting in_ms=400", absl::Seconds(20)))
      << collectors_[0]->Log();
  lock->abort();
  lock.reset();
  EXPECT_EQ(sub.WaitForJobs(3, absl::Seconds(20)), 3u);
}

TEST_F(CollectorTest, SigtermStopsCleanly) {
  StartCollector();
  collectors_[0]->Signal(SIGTERM);
  auto code = collectors_[0]->Wait(absl::Seconds(15));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0);
  EXPECT_THAT(collectors_[0]->Log(), HasSubstr("msg=stopped"));
}

}  // namespace
}  // namespace mailroom
