// Collector benchmarks against a throwaway PostgreSQL and the real collector binary, for each
// PostgreSQL durability setting (--fsync=on,off: on is the production default, fsync and
// synchronous_commit on; off is the tests' setting):
//  1. backlog drain rate: N tokens queued (accounts inserted in transactions of 10,000), then
//     one subscriber (batch limit 1000, max in flight 10,000) drains them, acknowledging every
//     job as SENT in batches; the clock runs from the first Subscribe to the return of the last
//     Acknowledge (which returns once its outcomes are committed). Each N is drained on a table
//     without planner statistics (autovacuum off for the queue's tables, never ANALYZEd) and on
//     one after VACUUM ANALYZE (--stats=without,with);
//  2. commit-to-stream latency with batch timeout 0 at steady rates of single-row commits
//     (--rates=200,1000,3000, for --seconds each, from --connections connections, by default
//     rate/50 between 4 and 64): offered and achieved rates, COMMIT durations, p50/p90/p99/max
//     from each COMMIT returning to the job arriving at the subscriber, and the collector's
//     dequeue calls (pg_stat_user_functions), and how many commits sent a NOTIFY;
//  3. with --signups=8,32,64 (fsync on only): the application's signups/s, one
//     `INSERT INTO accounts` per transaction from pgbench with that many clients, for
//     --signup_seconds each, with mailroom's triggers disabled, with mailroom and a collector
//     awake and draining (a subscriber acknowledging everything; busy-polling at its default
//     interval, or at each of --busy_poll's in ms), and with mailroom and a
//     collector that never turns busy (MAILROOM_BUSY_POLL_INTERVAL=0: every commit NOTIFYs),
//     and with mailroom and no collector (no commit NOTIFYs: the triggers' own cost), in that
//     order, --signup_rounds times (alternating runs on one database).
// Usage: collector_bench [--sizes=100000,1000000] [--fsync=on,off] [--stats=without,with]
//                        [--rates=200,1000,3000] [--seconds=5] [--connections=N]
//                        [--signups=8,32,64] [--signup_seconds=10] [--signup_rounds=2]
//                        [--busy_poll=2,20]
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <pqxx/pqxx>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collector/schema/migrate.h"
#include "common/flags.h"
#include "grpcpp/grpcpp.h"
#include "testing/collector_client.h"
#include "testing/collector_fixture.h"
#include "testing/pg_server.h"
#include "testing/process.h"

namespace mailroom {
namespace {

constexpr char kKey[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
constexpr char kBearer[] = "bench-subscriber-token-0123456789";

struct Collector {
  std::unique_ptr<testing::Process> process;
  int port = 0;
};

Collector StartCollector(const std::string& url, int batch_limit, int batch_timeout_ms,
                         const std::map<std::string, std::string>& extra = {}) {
  Collector c;
  c.port = testing::FreePort();
  std::map<std::string, std::string> env = {
      {"MAILROOM_DATABASE_URL", url},
      {"MAILROOM_SECRET_KEY", kKey},
      {"MAILROOM_LISTEN_ADDRESS", absl::StrCat("127.0.0.1:", c.port)},
      {"MAILROOM_METRICS_ADDRESS", "off"},
      {"MAILROOM_SUBSCRIBER_TOKENS", kBearer},
      {"MAILROOM_BATCH_LIMIT", absl::StrCat(batch_limit)},
      {"MAILROOM_BATCH_TIMEOUT", absl::StrCat(batch_timeout_ms)},
      {"MAILROOM_LOG_LEVEL", "warn"}};
  for (const auto& [k, v] : extra) env[k] = v;
  auto p = testing::Process::Spawn({testing::Runfile("mailroom/collector/collector")}, env,
                                   "/tmp/mailroom-bench-collector.log");
  if (!p.ok()) {
    std::fprintf(stderr, "cannot start collector: %s\n", p.status().ToString().c_str());
    std::exit(1);
  }
  c.process = *std::move(p);
  // Wait for the port.
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", c.port),
                                     grpc::InsecureChannelCredentials());
  channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(20));
  return c;
}

std::string Fresh(testing::PgServer& pg, const std::string& name) {
  auto url = pg.CreateDatabase(name);
  if (!url.ok() || !MigrateUp(*url, EmbeddedMigrations()).ok()) {
    std::fprintf(stderr, "cannot create %s\n", name.c_str());
    std::exit(1);
  }
  return *url;
}

// Acknowledges everything the subscriber received, in batches of up to 5000, until `stop`;
// `acked` counts the outcomes the collector reports recorded (committed), so an outcome it
// ignored or rejected never counts towards the drain.
void AckLoop(testing::TestSubscriber* sub, std::atomic<bool>* stop, std::atomic<size_t>* acked) {
  while (!stop->load()) {
    auto jobs = sub->Take();
    if (jobs.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    for (size_t i = 0; i < jobs.size(); i += 5000) {
      std::vector<uint64_t> ids;
      for (size_t j = i; j < std::min(jobs.size(), i + 5000); ++j) ids.push_back(jobs[j].job_id());
      v1::AcknowledgeResponse resp;
      if (sub->Ack(ids, v1::OUTCOME_SENT, "", 0, &resp).ok()) *acked += resp.recorded();
    }
  }
}

void Drain(testing::PgServer& pg, const std::string& label, int n, bool analyze) {
  std::string url = Fresh(pg, absl::StrCat("drain_", n, analyze ? "_stats" : "_nostats"));
  absl::Time t0 = absl::Now();
  {
    pqxx::connection c(url);
    if (!analyze) {
      // Keep autovacuum's analyze from giving the planner statistics in the middle of the run.
      pqxx::work tx(c);
      for (const char* t : {"tokens", "accounts", "deliveries", "lease_batches"}) {
        tx.exec(absl::StrCat("ALTER TABLE ", t, " SET (autovacuum_enabled = false)"));
      }
      tx.commit();
    }
    for (int done = 0; done < n; done += 10000) {
      pqxx::work tx(c);
      tx.exec(absl::StrCat("INSERT INTO accounts (email, login) SELECT 'u' || i || '@bench.test',"
                           " 'u' || i FROM generate_series(",
                           done + 1, ", ", std::min(n, done + 10000), ") i"));
      tx.commit();
    }
    // The signups' tokens made as the collector makes them (1,000 a call), before the drain
    // is timed: the drain measures handing out a backlog of tokens.
    const absl::Time collect_start = absl::Now();
    testing::TestDb(url).CollectSignups();
    std::printf("  %s: made the %d signups' tokens (1,000 a call) in %.1f s\n", label.c_str(), n,
                absl::ToDoubleSeconds(absl::Now() - collect_start));
    pqxx::nontransaction tx(c);
    if (analyze) tx.exec("VACUUM ANALYZE");
  }
  std::printf("  %s: queued %d tokens in %.1f s\n", label.c_str(), n,
              absl::ToDoubleSeconds(absl::Now() - t0));
  Collector col = StartCollector(url, 1000, 5000);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", col.port),
                                     grpc::InsecureChannelCredentials());
  absl::Time start = absl::Now();
  testing::TestSubscriber sub(channel, kBearer, "mailroom", 10000, "bench");
  std::atomic<bool> stop{false};
  std::atomic<size_t> acked{0};
  std::thread acker(AckLoop, &sub, &stop, &acked);
  absl::Time deadline = start + absl::Minutes(30);
  while (acked.load() < size_t(n) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  absl::Time end = absl::Now();
  stop = true;
  acker.join();
  auto arrivals = sub.Arrivals();
  double secs = absl::ToDoubleSeconds(end - start);
  auto rate_of = [&](size_t from, size_t to) {
    if (to <= from || to > arrivals.size()) return 0.0;
    double s = absl::ToDoubleSeconds(arrivals[to - 1].second - arrivals[from].second);
    return s > 0 ? (to - from) / s : 0.0;
  };
  size_t tenth = arrivals.size() / 10;
  std::printf("  %s: drained %zu of %d (acknowledged) in %.2f s: %.0f jobs/s (arrivals: first"
              " tenth %.0f jobs/s, last tenth %.0f jobs/s)\n",
              label.c_str(), acked.load(), n, secs, acked.load() / secs, rate_of(0, tenth),
              rate_of(arrivals.size() - tenth, arrivals.size()));
  std::fflush(stdout);
}

// p-th quantile of sorted `v` (0 when empty).
double Quantile(const std::vector<double>& v, double p) {
  return v.empty() ? 0.0 : v[std::min(v.size() - 1, size_t(p * v.size()))];
}

// Calls and total milliseconds of each PL/pgSQL function so far (track_functions = 'pl').
std::map<std::string, std::pair<int64_t, double>> PgFunctions(const std::string& url) {
  pqxx::connection c(url);
  pqxx::nontransaction tx(c);
  std::map<std::string, std::pair<int64_t, double>> out;
  for (const auto& row :
       tx.exec("SELECT funcname, calls, total_time FROM pg_stat_user_functions")) {
    out[row[0].as<std::string>()] = {row[1].as<int64_t>(), row[2].as<double>()};
  }
  return out;
}

// A LISTEN connection of the benchmark's own beside the collector's: when PostgreSQL delivers
// each commit's NOTIFY to a listener, by the committing backend's pid (one connection's
// commits notify in its commit order).
class NotifyWatch : public pqxx::notification_receiver {
 public:
  NotifyWatch(pqxx::connection_base& c, const std::string& channel)
      : pqxx::notification_receiver(c, channel) {}
  void operator()(const std::string&, int backend_pid) override {
    seen_[backend_pid].push_back(absl::Now());
  }
  // Arrival times of the notifications of `backend_pid`, in order.
  const std::vector<absl::Time>& Of(int backend_pid) { return seen_[backend_pid]; }

 private:
  std::map<int, std::vector<absl::Time>> seen_;
};

void Latency(testing::PgServer& pg, const std::string& label, int rate, int seconds,
             int connections) {
  const std::string db = absl::StrCat("latency_", rate);
  std::string url = Fresh(pg, db);
  {
    pqxx::connection c(url);
    pqxx::nontransaction tx(c);
    tx.exec("VACUUM ANALYZE");
    // Dequeue calls and their time (set before the collector connects).
    tx.exec(absl::StrCat("ALTER DATABASE ", db, " SET track_functions = 'pl'"));
  }
  Collector col = StartCollector(url, 1000, 0);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", col.port),
                                     grpc::InsecureChannelCredentials());
  testing::TestSubscriber sub(channel, kBearer, "mailroom", 10000, "latency");
  sub.WaitSubscribed(absl::Seconds(10));
  std::atomic<bool> stop{false}, stop_watch{false};
  std::atomic<size_t> acked{0};
  std::thread acker(AckLoop, &sub, &stop, &acked);
  pqxx::connection watch_conn(url);
  NotifyWatch watch(watch_conn, "token_insert");
  std::thread watcher([&] {
    while (!stop_watch.load()) watch_conn.await_notification(0, 20000);
  });
  // Commits on a fixed schedule (commit i is due at start + i / rate) from `connections`
  // connections, each a transaction of one INSERT (BEGIN, INSERT, COMMIT, as an application
  // does). With fsync on a commit waits for its WAL flush, so each connection commits at most
  // once per flush; a connection that falls behind the schedule commits at once.
  const int count = rate * seconds;
  std::mutex mu;
  std::vector<std::pair<uint64_t, absl::Time>> commits;   // account id -> commit time
  std::map<int, std::vector<absl::Time>> commits_by_pid;  // backend pid -> its commit times
  std::vector<double> commit_ms;                          // duration of each COMMIT
  commits.reserve(count);
  commit_ms.reserve(count);
  std::vector<std::unique_ptr<pqxx::connection>> pool;
  for (int w = 0; w < connections; ++w) pool.push_back(std::make_unique<pqxx::connection>(url));
  std::atomic<int> next{0};
  absl::Time begin = absl::Now() + absl::Milliseconds(100);
  std::vector<std::thread> writers;
  for (int w = 0; w < connections; ++w) {
    writers.emplace_back([&, w] {
      pqxx::connection& c = *pool[w];
      for (int i; (i = next.fetch_add(1)) < count;) {
        absl::SleepFor(begin + absl::Seconds(1) * i / rate - absl::Now());
        pqxx::work tx(c);
        auto row = tx.exec1(absl::StrCat("INSERT INTO accounts (email, login) VALUES ('l", i,
                                         "@bench.test', 'l", i, "') RETURNING id"));
        const absl::Time commit_start = absl::Now();
        tx.commit();
        const absl::Time t = absl::Now();
        std::lock_guard<std::mutex> lock(mu);
        commits.emplace_back(row[0].as<uint64_t>(), t);
        commits_by_pid[c.backendpid()].push_back(t);
        commit_ms.push_back(absl::ToDoubleMilliseconds(t - commit_start));
      }
    });
  }
  for (auto& t : writers) t.join();
  const double achieved = count / absl::ToDoubleSeconds(absl::Now() - begin);
  sub.WaitForJobs(count, absl::Seconds(60));
  stop = true;
  acker.join();
  stop_watch = true;
  watcher.join();
  // From COMMIT returning to PostgreSQL's NOTIFY reaching a listener (the share of the latency
  // that is PostgreSQL's and the machine's, before the collector can act).
  std::vector<double> notify_ms;
  for (const auto& [pid, times] : commits_by_pid) {
    const std::vector<absl::Time>& seen = watch.Of(pid);
    // Pairs by order: only for connections whose every commit notified.
    if (seen.size() != times.size()) continue;
    for (size_t i = 0; i < std::min(times.size(), seen.size()); ++i) {
      notify_ms.push_back(absl::ToDoubleMilliseconds(seen[i] - times[i]));
    }
  }
  std::sort(notify_ms.begin(), notify_ms.end());
  size_t notified = 0;
  for (const auto& [pid, times] : commits_by_pid) notified += watch.Of(pid).size();
  std::map<uint64_t, absl::Time> arrived;
  auto arrivals = sub.Arrivals();
  auto jobs = sub.Jobs();
  for (size_t i = 0; i < jobs.size(); ++i) arrived[jobs[i].account_id()] = arrivals[i].second;
  std::vector<double> ms;
  // By second of the run: a collector that falls behind shows a growing latency.
  std::map<int64_t, std::vector<double>> by_second;
  for (const auto& [account, t] : commits) {
    auto it = arrived.find(account);
    if (it == arrived.end()) continue;
    ms.push_back(absl::ToDoubleMilliseconds(it->second - t));
    by_second[absl::ToInt64Seconds(t - begin)].push_back(ms.back());
  }
  std::sort(ms.begin(), ms.end());
  std::sort(commit_ms.begin(), commit_ms.end());
  for (auto& [second, v] : by_second) std::sort(v.begin(), v.end());
  const double first_p99 = by_second.empty() ? 0 : Quantile(by_second.begin()->second, 0.99);
  const double last_p99 = by_second.empty() ? 0 : Quantile(by_second.rbegin()->second, 0.99);
  // The collector's backend reports its function statistics when it exits (a live backend
  // reports at most once a second, and idle ones later still).
  pool.clear();
  col.process.reset();
  {
    pqxx::connection c(url);
    pqxx::nontransaction tx(c);
    const std::string others = absl::StrCat(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '", db,
        "' AND pid <> pg_backend_pid()");
    for (absl::Time until = absl::Now() + absl::Seconds(10);
         tx.exec1(others)[0].as<int>() > 1 && absl::Now() < until;) {  // 1: the watch
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  auto functions = PgFunctions(url);
  const auto [dequeues, dequeue_ms] = functions["mailroom_dequeue"];
  const auto [collects, collect_ms] = functions["mailroom_collect_signups"];
  std::printf(
      "  %s: %zu of %d single-row commits from %d connections, offered %d/s, achieved"
      " %.0f/s (COMMIT p50 %.2f ms, p99 %.2f ms), batch timeout 0: commit-to-stream"
      " latency p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms (p99 first second %.2f ms,"
      " last second %.2f ms; %zu commits sent a NOTIFY, to a second"
      " listener p50 %.2f ms, p90 %.2f ms, p99 %.2f ms); %lld dequeues (%.1f jobs,"
      " %.2f ms each)\n",
      label.c_str(), ms.size(), count, connections, rate, achieved, Quantile(commit_ms, 0.50),
      Quantile(commit_ms, 0.99), Quantile(ms, 0.50), Quantile(ms, 0.90), Quantile(ms, 0.99),
      ms.empty() ? 0 : ms.back(), first_p99, last_p99, notified, Quantile(notify_ms, 0.50),
      Quantile(notify_ms, 0.90), Quantile(notify_ms, 0.99), static_cast<long long>(dequeues),
      dequeues > 0 ? double(jobs.size()) / dequeues : 0.0,
      dequeues > 0 ? dequeue_ms / dequeues : 0.0);
  if (collects > 0) {
    std::printf("    %lld signup collections, %.2f ms each in PostgreSQL (%.0f ms in all)\n",
                static_cast<long long>(collects), collect_ms / collects, collect_ms);
  }
  // Every function the collector called, by its time in PostgreSQL (nested calls counted in
  // their callers' time too).
  std::vector<std::pair<double, std::string>> by_time;
  for (const auto& [name, f] : functions) by_time.push_back({f.second, name});
  std::sort(by_time.rbegin(), by_time.rend());
  std::string all;
  for (const auto& [t, name] : by_time) {
    if (t < 1) break;
    absl::StrAppend(&all, all.empty() ? "" : ", ", name, " ", int64_t(t + 0.5), " ms (",
                    functions[name].first, " calls)");
  }
  if (!all.empty()) std::printf("    functions: %s\n", all.c_str());
  std::fflush(stdout);
}

// One pgbench run of `clients` clients for `seconds`: one signup (`INSERT INTO accounts`) per
// transaction. Returns the transactions per second pgbench reports (0 on failure).
double Pgbench(testing::PgServer& pg, const std::string& db, const std::string& script, int clients,
               int seconds) {
  const std::string log = absl::StrCat("/tmp/mailroom-bench-pgbench-", clients, ".log");
  std::remove(log.c_str());
  auto p = testing::Process::Spawn({"/usr/bin/pgbench", "-n", "-f", script, "-c",
                                    absl::StrCat(clients), "-j", absl::StrCat(std::min(clients, 8)),
                                    "-T", absl::StrCat(seconds), "-h", "127.0.0.1", "-p",
                                    absl::StrCat(pg.port()), "-U", "postgres", db},
                                   {}, log);
  if (!p.ok()) return 0;
  auto code = (*p)->Wait(absl::Seconds(seconds + 120));
  const std::string out = (*p)->Log();
  const size_t at = out.find("tps = ");
  double tps = 0;
  if (!code.ok() || *code != 0 || at == std::string::npos ||
      std::sscanf(out.c_str() + at, "tps = %lf", &tps) != 1) {
    std::fprintf(stderr, "pgbench failed:\n%s\n", out.c_str());
    return 0;
  }
  return tps;
}

void Signups(testing::PgServer& pg, const std::vector<int>& clients,
             const std::vector<int>& busy_polls, int seconds, int rounds) {
  const std::string db = "signups";
  std::string url = Fresh(pg, db);
  const std::string script = "/tmp/mailroom-bench-signup.sql";
  {
    pqxx::connection c(url);
    pqxx::nontransaction tx(c);
    tx.exec("CREATE SEQUENCE bench_signup");
    std::FILE* f = std::fopen(script.c_str(), "w");
    std::fputs("WITH n AS (SELECT nextval('bench_signup') AS v)\n"
               "INSERT INTO accounts (email, login) SELECT 's' || v || '@bench.test', 's' || v"
               " FROM n;\n",
               f);
    std::fclose(f);
  }
  auto set_triggers = [&](bool on) {
    pqxx::connection c(url);
    pqxx::nontransaction tx(c);
    tx.exec(absl::StrCat("ALTER TABLE accounts ", on ? "ENABLE" : "DISABLE", " TRIGGER USER"));
    // Each run starts with no queued signup (the run without a collector leaves all of its).
    tx.exec("DO $$ BEGIN IF to_regclass('mailroom_signups') IS NOT NULL THEN"
            " TRUNCATE mailroom_signups; END IF; END $$");
    tx.exec("CHECKPOINT");
  };
  // Signups queued and not yet collected (their tokens not made): the work a run left behind.
  auto queued = [&]() -> int64_t {
    pqxx::connection c(url);
    pqxx::nontransaction tx(c);
    return tx
        .exec1("SELECT CASE WHEN to_regclass('mailroom_signups') IS NULL THEN 0"
               " ELSE (SELECT count(*) FROM mailroom_signups) END")[0]
        .as<int64_t>();
  };
  std::printf("application signups/s (pgbench, one INSERT INTO accounts per transaction, %d s"
              " per run, fsync on, alternating runs on one database):\n",
              seconds);
  for (int n : clients) {
    std::map<std::string, std::vector<double>> tps;
    std::map<std::string, std::vector<int64_t>> left;
    std::map<std::string, std::vector<double>> catch_up;
    // A collector busy-polling at its default interval, or at each of --busy_poll's (the
    // kind's MAILROOM_BUSY_POLL_INTERVAL, unset for the default), then one that never turns
    // busy, then none.
    std::vector<std::string> kinds = {"triggers disabled"};
    std::map<std::string, std::string> poll_ms;
    if (busy_polls.empty()) {
      kinds.push_back("mailroom, collector busy-polling");
      poll_ms[kinds.back()] = "";
    }
    for (int ms : busy_polls) {
      kinds.push_back(absl::StrCat("mailroom, collector busy-polling every ", ms, " ms"));
      poll_ms[kinds.back()] = absl::StrCat(ms);
    }
    kinds.push_back("mailroom, every commit notifies");
    kinds.push_back("mailroom, no collector");
    poll_ms[kinds[kinds.size() - 2]] = "0";
    for (int round = 0; round < rounds; ++round) {
      for (const std::string& kind : kinds) {
        const bool disabled = kind == kinds[0];
        // Without a collector no commit NOTIFYs (none is registered idle): the triggers' own
        // cost, the diagnosis row.
        const bool collector = poll_ms.count(kind) > 0;
        set_triggers(!disabled);
        std::unique_ptr<Collector> col;
        std::unique_ptr<testing::TestSubscriber> sub;
        std::atomic<bool> stop{false};
        std::atomic<size_t> acked{0};
        std::thread acker;
        if (collector) {
          std::map<std::string, std::string> env;
          if (!poll_ms[kind].empty()) env["MAILROOM_BUSY_POLL_INTERVAL"] = poll_ms[kind];
          col = std::make_unique<Collector>(StartCollector(url, 1000, 0, env));
          auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", col->port),
                                             grpc::InsecureChannelCredentials());
          sub = std::make_unique<testing::TestSubscriber>(channel, kBearer, "mailroom", 10000,
                                                          "signups");
          sub->WaitSubscribed(absl::Seconds(10));
          acker = std::thread(AckLoop, sub.get(), &stop, &acked);
        }
        tps[kind].push_back(Pgbench(pg, db, script, n, seconds));
        left[kind].push_back(queued());
        // The collector catches up once the burst is over: how long until nothing is queued.
        if (collector && left[kind].back() > 0) {
          const absl::Time start = absl::Now();
          while (queued() > 0 && absl::Now() - start < absl::Seconds(300)) {
            absl::SleepFor(absl::Milliseconds(100));
          }
          catch_up[kind].push_back(absl::ToDoubleSeconds(absl::Now() - start));
        }
        if (collector) {
          stop = true;
          acker.join();
          sub.reset();
          // Stopped as in production (SIGTERM): it removes its wake-up mark, so the run
          // without a collector has no commit NOTIFY. A killed one would leave it.
          col->process->Signal(SIGTERM);
          (void)col->process->Wait(absl::Seconds(30));
          col.reset();
        }
      }
    }
    for (const std::string& kind : kinds) {
      std::string runs, queue;
      for (double t : tps[kind]) absl::StrAppend(&runs, runs.empty() ? "" : ", ", int(t + 0.5));
      for (int64_t q : left[kind]) absl::StrAppend(&queue, queue.empty() ? "" : ", ", q);
      std::string caught;
      for (double c : catch_up[kind]) {
        char one[32];
        std::snprintf(one, sizeof(one), "%.1f", c);
        absl::StrAppend(&caught, caught.empty() ? "" : ", ", one);
      }
      std::printf("  clients=%d %s: %s signups/s (signups still queued at the end: %s%s%s)\n", n,
                  kind.c_str(), runs.c_str(), queue.c_str(),
                  caught.empty() ? "" : "; collected after the run in s: ", caught.c_str());
    }
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace mailroom

ABSL_FLAG(mailroom::IntList, sizes, (mailroom::IntList{{100000, 1000000}}),
          "backlogs to drain (tokens)");
ABSL_FLAG(std::vector<std::string>, fsync, std::vector<std::string>({"on", "off"}),
          "PostgreSQL durability settings to run (on, off)");
ABSL_FLAG(std::vector<std::string>, stats, std::vector<std::string>({"without", "with"}),
          "drain without and/or with planner statistics");
ABSL_FLAG(mailroom::IntList, rates, (mailroom::IntList{{200, 1000, 3000}}),
          "commit-to-stream latency at these commits/s (empty: none)");
ABSL_FLAG(int, seconds, 5, "seconds per latency rate");
ABSL_FLAG(int, connections, 0, "connections of the latency runs (0: rate/50 within 4..64)");
ABSL_FLAG(mailroom::IntList, signups, {}, "pgbench client counts of the signup runs (fsync on)");
ABSL_FLAG(int, signup_seconds, 10, "seconds per signup run");
ABSL_FLAG(int, signup_rounds, 2, "alternating rounds of the signup runs");
ABSL_FLAG(mailroom::IntList, busy_poll, {}, "busy-poll intervals (ms) of the signup runs");

int main(int argc, char** argv) {
  if (auto done = mailroom::ParseToolFlags("collector_bench", "usage: collector_bench [flags]\n",
                                           argc, argv)) {
    return *done;
  }
  const std::vector<int> sizes = absl::GetFlag(FLAGS_sizes).values;
  const std::vector<int> rates = absl::GetFlag(FLAGS_rates).values;
  const std::vector<int> signups = absl::GetFlag(FLAGS_signups).values;
  const std::vector<int> busy_polls = absl::GetFlag(FLAGS_busy_poll).values;
  const std::vector<std::string> fsyncs = absl::GetFlag(FLAGS_fsync);
  const std::vector<std::string> stats = absl::GetFlag(FLAGS_stats);
  const int seconds = absl::GetFlag(FLAGS_seconds);
  const int connections = absl::GetFlag(FLAGS_connections);
  const int signup_seconds = absl::GetFlag(FLAGS_signup_seconds);
  const int signup_rounds = absl::GetFlag(FLAGS_signup_rounds);
  for (const std::string& fsync : fsyncs) {
    auto pg = mailroom::testing::PgServer::Start(/*durable=*/fsync == "on");
    if (!pg.ok()) {
      std::fprintf(stderr, "%s\n", pg.status().ToString().c_str());
      return 1;
    }
    std::printf("PostgreSQL fsync=%s%s\n", fsync.c_str(),
                fsync == "on" ? " (synchronous_commit=on, full_page_writes=on)"
                              : " (synchronous_commit=off, full_page_writes=off)");
    std::printf("collector backlog drain (batch limit 1000, max in flight 10000, first Subscribe"
                " to last acknowledgement committed):\n");
    for (const std::string& st : stats) {
      for (int n : sizes) {
        mailroom::Drain(**pg, absl::StrCat("fsync=", fsync, " stats=", st, " n=", n), n,
                        st == "with");
      }
    }
    if (!rates.empty()) std::printf("commit-to-stream latency:\n");
    for (int rate : rates) {
      mailroom::Latency(**pg, absl::StrCat("fsync=", fsync, " rate=", rate), rate, seconds,
                        connections > 0 ? connections : std::clamp(rate / 50, 4, 64));
    }
    if (fsync == "on" && !signups.empty()) {
      mailroom::Signups(**pg, signups, busy_polls, signup_seconds, signup_rounds);
    }
  }
  return 0;
}
