// The whole pipeline: PostgreSQL -> collector -> gRPC -> sender -> SMTP (postfix's smtp-sink) or
// SES (the aws-ses-v2-local emulator behind the project's SigV4-checking ses_front), budget
// unlimited. For each transport a backlog of N tokens is queued while no sender runs, then one
// sender (--connections) is started and timed from its start to the last delivery recorded as
// sent in PostgreSQL. smtp-source (postfix's own client) is timed against the same sink in the
// same run: the SMTP ceiling. Also prints the resident set size and thread count of the
// collector and the sender from /proc, idle (subscribed, empty queue) and under load (the
// largest sample, every 100 ms), and for each run the CPU time per email of the sender, the
// collector, PostgreSQL and the SMTP sink, the calls and time (total and self) of the PL/pgSQL
// functions, what the active backends were doing at each poll and the budget grants (where the
// time goes).
// Usage: pipeline_bench [--messages=20000] [--ses_messages=2000] [--connections=8]
//                       [--fsync=on|off] [--max_in_flight=N]
// Needs postfix's smtp-sink/smtp-source (apt-get install postfix) and, for SES,
// MAILROOM_NODE_MODULES (the npm peers, as for the integration tests).
//
// At a network distance: --rtt_ms=20,50,100 puts bench/latency_proxy.py (half the round trip
// each way) between the sender and its peer (smtp-sink, the SES front) and between smtp-source
// and the sink, and runs every round trip with every count of --connections=16,64,128 (one
// sender per run, MAILROOM_CONNECTIONS and smtp-source's sessions alike; MAILROOM_MAX_IN_FLIGHT
// 4 x the connections unless --max_in_flight). Each run also prints what the proxy counted of
// the SMTP conversations (round trips per message, bodies awaiting their reply at once), and a
// table of every run's emails/s closes the output. --http_messages=N also runs the postmark
// transport (an HTTP API, one request per email) to bench/http_sink.py through a proxy.
// --sender=PATH times another sender binary (an earlier build, for before/after runs); --no_ceiling
// skips smtp-source. bash bench/distance_bench.sh wraps it.
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <pqxx/pqxx>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "collector/schema/migrate.h"
#include "common/flags.h"
#include "grpcpp/grpcpp.h"
#include "testing/collector_fixture.h"
#include "testing/pg_server.h"
#include "testing/process.h"

namespace mailroom {
namespace {

using testing::Process;

constexpr char kKey[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
constexpr char kBearer[] = "bench-subscriber-token-0123456789";
// The emulator's front checks SigV4 with this made-up key (AWS's documentation example).
constexpr char kAwsSecret[] = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "pipeline_bench: %s\n", what.c_str());
  std::exit(1);
}

std::unique_ptr<Process> Spawn(const std::vector<std::string>& argv,
                               const std::map<std::string, std::string>& env,
                               const std::string& log, const std::string& ready) {
  auto p = Process::Spawn(argv, env, log);
  if (!p.ok()) Die(absl::StrCat("cannot start ", argv[0], ": ", p.status().ToString()));
  if (!ready.empty() && !(*p)->WaitForLog(ready, absl::Seconds(30))) {
    Die(absl::StrCat(argv[0], " not ready; log ", log));
  }
  return *std::move(p);
}

// Resident set size (MB) and thread count of a process, from /proc/<pid>/status.
struct Usage {
  double rss_mb = 0;
  int threads = 0;
};

Usage UsageOf(pid_t pid) {
  Usage u;
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view v = line;
    if (absl::ConsumePrefix(&v, "VmRSS:")) {
      int64_t kb = 0;
      (void)absl::SimpleAtoi(absl::StripSuffix(absl::StripAsciiWhitespace(v), " kB"), &kb);
      u.rss_mb = kb / 1024.0;
    } else if (absl::ConsumePrefix(&v, "Threads:")) {
      (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(v), &u.threads);
    }
  }
  return u;
}

void PrintUsage(const char* what, const char* when, Usage u, double target_mb) {
  std::printf("  %-9s %-26s RSS %6.1f MB (target < %.0f MB: %s by %.1f MB), %d threads\n", what,
              when, u.rss_mb, target_mb, u.rss_mb < target_mb ? "met" : "missed",
              std::abs(u.rss_mb - target_mb), u.threads);
}

// CPU time (user + system, seconds) a process has used so far, from /proc/<pid>/stat; 0 when
// it is gone.
double CpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  // After "pid (comm) ": state is field 3; utime and stime are fields 14 and 15.
  std::vector<absl::string_view> f = absl::StrSplit(absl::string_view(stat).substr(paren + 1), ' ',
                                                    absl::SkipEmpty());
  int64_t utime = 0, stime = 0;
  if (f.size() < 13 || !absl::SimpleAtoi(f[11], &utime) || !absl::SimpleAtoi(f[12], &stime)) {
    return 0;
  }
  return static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
}

// Calls and milliseconds of a tracked function (pg_stat_user_functions: wall time, lock waits
// included; `total` counts the tracked functions it calls, `self` does not).
struct FunctionTime {
  int64_t calls = 0;
  double total_ms = 0;
  double self_ms = 0;
};

// Each tracked function's figures so far, by name.
std::map<std::string, FunctionTime> PgFunctions(pqxx::connection& c) {
  pqxx::nontransaction tx(c);
  std::map<std::string, FunctionTime> out;
  for (const auto& row :
       tx.exec("SELECT funcname, calls, total_time, self_time FROM pg_stat_user_functions")) {
    out[row[0].as<std::string>()] = {row[1].as<int64_t>(), row[2].as<double>(),
                                     row[3].as<double>()};
  }
  return out;
}

// CPU seconds of every PostgreSQL process pg_stat_activity lists (backends and background
// workers), by pid, except the asking backend.
std::map<int, double> PgCpu(pqxx::connection& c) {
  pqxx::nontransaction tx(c);
  std::map<int, double> out;
  for (const auto& row :
       tx.exec("SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()")) {
    const int pid = row[0].as<int>();
    out[pid] = CpuSeconds(pid);
  }
  return out;
}

int64_t Scalar(pqxx::connection& c, const std::string& sql) {
  pqxx::nontransaction tx(c);
  return tx.exec1(sql)[0].as<int64_t>();
}

// Queues n more tokens (accounts inserted in transactions of 10,000) and analyzes.
void Queue(const std::string& url, int from, int n) {
  pqxx::connection c(url);
  for (int done = 0; done < n; done += 10000) {
    pqxx::work tx(c);
    tx.exec(absl::StrCat("INSERT INTO accounts (email, login) SELECT 'u' || i || '@bench.test',"
                         " 'u' || i FROM generate_series(",
                         from + done + 1, ", ", from + std::min(n, done + 10000), ") i"));
    tx.commit();
  }
  // Their tokens made as the collector makes them, before the pipeline is timed (a backlog of
  // tokens, as before signups were queued; the running collector collects some of them).
  testing::TestDb(url).CollectSignups();
  pqxx::nontransaction tx(c);
  tx.exec("VACUUM ANALYZE");
}

struct Options {
  int messages = 20000;
  int ses_messages = 2000;
  std::vector<int> connections = {8};
  bool durable = true;
  int max_in_flight = 0;    // 0: the sender's default (at a distance: 4 x the connections)
  std::vector<int> rtt_ms;  // empty: no proxy
  std::string sender;       // "": the built sender
  bool ceiling = true;      // time smtp-source
  int http_messages = 0;    // at a distance: the postmark transport to its stand-in too
};

// A latency proxy (bench/latency_proxy.py) in front of 127.0.0.1:`upstream`, `rtt_ms` of
// round trip, counting the SMTP conversations into `stats_file`.
std::unique_ptr<Process> StartProxy(int rtt_ms, int upstream, int* port,
                                    const std::string& stats_file, const std::string& log) {
  *port = testing::FreePort();
  return Spawn({"/usr/bin/python3", testing::Runfile("mailroom/bench/latency_proxy.py"), "--listen",
                absl::StrCat("127.0.0.1:", *port), "--upstream",
                absl::StrCat("127.0.0.1:", upstream), "--delay-ms", absl::StrCat(rtt_ms / 2.0),
                "--stats", stats_file},
               {}, log, "ready");
}

// Stops a proxy started by StartProxy and returns the first line of its statistics.
std::string StopProxy(std::unique_ptr<Process> proxy, const std::string& stats_file) {
  proxy->Signal(SIGTERM);
  (void)proxy->Wait(absl::Seconds(10));
  std::ifstream in(stats_file);
  std::string line;
  std::getline(in, line);
  return line;
}

class Pipeline {
 public:
  explicit Pipeline(const Options& o) : o_(o) {
    char tmpl[] = "/tmp/mailroom-pipeline.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) Die("mkdtemp");
    dir_ = tmpl;
    auto pg = testing::PgServer::Start(o.durable);
    if (!pg.ok()) Die(pg.status().ToString());
    pg_ = *std::move(pg);
    auto url = pg_->CreateDatabase("pipeline");
    if (!url.ok() || !MigrateUp(*url, EmbeddedMigrations()).ok()) Die("cannot migrate");
    url_ = *url;
    {
      // Calls and time of the PL/pgSQL functions (mailroom_dequeue, mailroom_ack, ...) for the
      // breakdown; set before the collector connects.
      pqxx::connection c(url_);
      pqxx::nontransaction tx(c);
      tx.exec("ALTER DATABASE pipeline SET track_functions = 'pl'");
    }
    collector_port_ = testing::FreePort();
    collector_ = Spawn({testing::Runfile("mailroom/collector/collector")},
                       {{"MAILROOM_DATABASE_URL", url_},
                        {"MAILROOM_SECRET_KEY", kKey},
                        {"MAILROOM_LISTEN_ADDRESS", absl::StrCat("127.0.0.1:", collector_port_)},
                        {"MAILROOM_METRICS_ADDRESS", "off"},
                        {"MAILROOM_SUBSCRIBER_TOKENS", kBearer},
                        {"GNUTLS_NO_IMPLICIT_INIT", "1"}},  // as in the container images
                       dir_ + "/collector.log", "");
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", collector_port_),
                                       grpc::InsecureChannelCredentials());
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(20))) {
      Die("collector did not start; log " + dir_ + "/collector.log");
    }
  }
  ~Pipeline() {
    collector_.reset();
    pg_.reset();
    std::error_code ignored;  // best effort: a leftover temp dir is not worth failing the bench
    std::filesystem::remove_all(dir_, ignored);
  }

  std::unique_ptr<Process> StartSender(std::map<std::string, std::string> env,
                                       const std::string& name) {
    std::map<std::string, std::string> all = {
        {"MAILROOM_COLLECTOR_ADDRESS", absl::StrCat("127.0.0.1:", collector_port_)},
        {"MAILROOM_COLLECTOR_TOKEN", kBearer},
        {"MAILROOM_FROM", "mailroom <no-reply@example.test>"},
        {"MAILROOM_LINK_BASE_URL", "https://app.example.test/"},
        {"MAILROOM_METRICS_ADDRESS", "off"},
        {"MAILROOM_HEALTH_ADDRESS", "off"},
        {"MAILROOM_BUDGET", "unlimited"},
        {"MAILROOM_CONNECTIONS", absl::StrCat(o_.connections.front())},
        {"MAILROOM_SENDER_NAME", name},
        {"GNUTLS_NO_IMPLICIT_INIT", "1"},  // as in the container images
    };
    if (o_.max_in_flight > 0) all["MAILROOM_MAX_IN_FLIGHT"] = absl::StrCat(o_.max_in_flight);
    for (auto& [k, v] : env) all[k] = v;
    return Spawn({o_.sender.empty() ? testing::Runfile("mailroom/sender/sender") : o_.sender}, all,
                 absl::StrCat(dir_, "/", name, ".log"), "msg=subscribed");
  }

  // Idle figures: collector and a sender subscribed, nothing queued.
  void Idle(const std::map<std::string, std::string>& env) {
    auto sender = StartSender(env, "idle-sender");
    absl::SleepFor(absl::Seconds(3));
    std::printf("memory and threads (/proc/<pid>/status):\n");
    PrintUsage("collector", "idle", UsageOf(collector_->pid()), 20);
    PrintUsage("sender", "idle (subscribed)", UsageOf(sender->pid()), 30);
    sender->Signal(SIGTERM);
    (void)sender->Wait(absl::Seconds(20));
  }

  // Queues n tokens, starts a sender with `env` and times it to the last delivery sent;
  // returns its emails/s. `peer` (the SMTP sink's pid, or 0) is counted in the CPU breakdown.
  double Run(const std::string& label, int n, const std::map<std::string, std::string>& env,
             pid_t peer = 0) {
    Queue(url_, queued_, n);
    queued_ += n;
    pqxx::connection poll(url_);  // one connection for all the polling below
    const int64_t grants_before = Scalar(poll, "SELECT count(*) FROM budget_grants");
    const std::map<int, double> pg_before = PgCpu(poll);
    const auto functions_before = PgFunctions(poll);
    const double collector_before = CpuSeconds(collector_->pid());
    const double peer_before = peer > 0 ? CpuSeconds(peer) : 0;
    absl::Time start = absl::Now();
    auto sender = StartSender(env, label);
    Usage col, snd;
    int64_t sent = 0;
    // What the active client backends (the collector's) were doing at each poll: running or
    // waiting for the CPU ("CPU"), or the wait event (Lock:transactionid, IO:WALSync, ...).
    int64_t polls = 0;
    std::map<std::string, int64_t> activity;
    absl::Time deadline = start + absl::Minutes(20);
    while (absl::Now() < deadline) {
      Usage c = UsageOf(collector_->pid()), s = UsageOf(sender->pid());
      col = {std::max(col.rss_mb, c.rss_mb), std::max(col.threads, c.threads)};
      snd = {std::max(snd.rss_mb, s.rss_mb), std::max(snd.threads, s.threads)};
      // The SENT outcomes so far, from the outcome counters (exact: every SENT outcome is
      // counted in its acknowledgement's transaction). Since 0021 a job sent under its first
      // lease has no deliveries row, and counting them through delivery_states (every batch's
      // ids unnested) every 100 ms would add its own PostgreSQL time to the run's figures.
      sent = Scalar(poll, "SELECT coalesce(sum(n), 0) FROM delivery_counts WHERE state = 'sent'");
      {
        pqxx::nontransaction tx(poll);
        for (const auto& row :
             tx.exec("SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU'), count(*)"
                     "  FROM pg_stat_activity WHERE backend_type = 'client backend'"
                     "   AND state = 'active' AND pid <> pg_backend_pid() GROUP BY 1")) {
          activity[row[0].as<std::string>()] += row[1].as<int64_t>();
        }
      }
      ++polls;
      if (sent >= queued_) break;
      absl::SleepFor(absl::Milliseconds(100));
    }
    double secs = absl::ToDoubleSeconds(absl::Now() - start);
    // CPU used during the run (the sender's from its start), before anything else runs.
    const double sender_cpu = CpuSeconds(sender->pid());
    const double collector_cpu = CpuSeconds(collector_->pid()) - collector_before;
    const double peer_cpu = peer > 0 ? CpuSeconds(peer) - peer_before : 0;
    double pg_cpu = 0;
    for (const auto& [pid, cpu] : PgCpu(poll)) {
      auto it = pg_before.find(pid);
      pg_cpu += cpu - (it == pg_before.end() ? 0 : it->second);
    }
    int64_t failed = Scalar(poll, "SELECT count(*) FROM delivery_states WHERE state <> 'sent'");
    sent -= queued_ - n;
    std::printf("  %s: %lld of %d sent in %.2f s (from the sender's start): %.0f emails/s"
                " (%lld not sent)\n",
                label.c_str(), static_cast<long long>(sent), n, secs, sent / secs,
                static_cast<long long>(failed));
    if (sent > 0) {
      const double us = 1e6 / sent;
      const double total = (sender_cpu + collector_cpu + pg_cpu + peer_cpu) * us;
      std::printf("  %s: CPU per email: sender %.0f us, collector %.0f us, PostgreSQL %.0f us,"
                  " peer %.0f us; total %.0f us (%.0f%% of 2 cores busy for the run)\n",
                  label.c_str(), sender_cpu * us, collector_cpu * us, pg_cpu * us, peer_cpu * us,
                  total, total * sent / 1e6 / secs / 2 * 100);
    }
    // The statistics collector reports a backend's counts when it goes idle: give it a moment.
    absl::SleepFor(absl::Seconds(1));
    for (const auto& [name, now] : PgFunctions(poll)) {
      auto it = functions_before.find(name);
      const FunctionTime before = it == functions_before.end() ? FunctionTime{} : it->second;
      const int64_t calls = now.calls - before.calls;
      const double ms = now.total_ms - before.total_ms;
      const double self_ms = now.self_ms - before.self_ms;
      if (calls > 0 && sent > 0) {
        std::printf("  %s: %s: %lld calls (%.1f emails per call), %.0f us per email"
                    " (self %.0f us), %.2f ms per call\n",
                    label.c_str(), name.c_str(), static_cast<long long>(calls),
                    static_cast<double>(sent) / calls, ms * 1000 / sent, self_ms * 1000 / sent,
                    ms / calls);
      }
    }
    std::printf("  %s: active client backends over %lld polls 100 ms apart, on average:",
                label.c_str(), static_cast<long long>(polls));
    for (const auto& [what, n] : activity) {
      std::printf(" %s %.2f", what.c_str(), static_cast<double>(n) / std::max<int64_t>(polls, 1));
    }
    std::printf("\n");
    // Each grant is one AcquireBudget round trip and one PostgreSQL transaction.
    std::printf(
        "  %s: %lld budget grants (AcquireBudget calls that granted emails)\n", label.c_str(),
        static_cast<long long>(Scalar(poll, "SELECT count(*) FROM budget_grants") - grants_before));
    PrintUsage("collector", absl::StrCat("under load (", label, ")").c_str(), col, 20);
    PrintUsage("sender", absl::StrCat("under load (", label, ")").c_str(), snd, 30);
    std::fflush(stdout);
    sender->Signal(SIGTERM);
    (void)sender->Wait(absl::Seconds(30));
    return sent / secs;
  }

  const std::string& dir() const { return dir_; }

 private:
  Options o_;
  std::string dir_, url_;
  std::unique_ptr<testing::PgServer> pg_;
  int collector_port_ = 0;
  std::unique_ptr<Process> collector_;
  int queued_ = 0;
};

// Times postfix's smtp-source: `n` messages of 1500 bytes over `sessions` sessions to `addr`,
// each session closed after its message (-d, its usual mode); messages per second.
double SmtpSource(const std::string& addr, int sessions, int n, bool* ok) {
  absl::Time t0 = absl::Now();
  int rc = std::system(absl::StrCat("/usr/sbin/smtp-source -d -l 1500 -m ", n, " -s ", sessions,
                                    " -f no-reply@example.test -t bench@example.test ", addr,
                                    " >/dev/null 2>&1")
                           .c_str());
  *ok = rc == 0;
  return n / absl::ToDoubleSeconds(absl::Now() - t0);
}

// The SES v2 emulator behind the project's SigV4-checking front; `front_port` is the front's.
struct SesPeer {
  std::unique_ptr<Process> emulator, front;
  int front_port = 0;
};

// Starts the SES peer, or returns nullopt (printed) without MAILROOM_NODE_MODULES.
std::optional<SesPeer> StartSes(const std::string& dir) {
  const char* modules = std::getenv("MAILROOM_NODE_MODULES");
  if (modules == nullptr || *modules == '\0') {
    std::printf("  ses: skipped (MAILROOM_NODE_MODULES unset)\n");
    return std::nullopt;
  }
  SesPeer ses;
  int emu = testing::FreePort();
  ses.front_port = testing::FreePort();
  ses.emulator = Spawn({"node", absl::StrCat(modules, "/aws-ses-v2-local/dist/cli.js"), "--host",
                        "127.0.0.1", "--port", absl::StrCat(emu)},
                       {}, dir + "/ses.log", "server running");
  // The front's account quota would cap the sender at 14/s (its GetAccount default): the
  // run measures the pipeline, so the account allows far more than it can send.
  const std::string account = dir + "/account.json";
  std::ofstream(account) << R"({"SendQuota": {"MaxSendRate": 1000000.0, "Max24HourSend": 1e12}})";
  ses.front = Spawn(
      {"/usr/bin/python3", testing::Runfile("mailroom/sender/transport/testing/ses_front.py"),
       "--port", absl::StrCat(ses.front_port), "--upstream", absl::StrCat("http://127.0.0.1:", emu),
       "--access-key", "AKIDEXAMPLE", "--secret-key", kAwsSecret, "--throttle-first", "0",
       "--account-file", account},
      {}, dir + "/front.log", "ready");
  return ses;
}

std::map<std::string, std::string> SesEnv(int port) {
  return {{"MAILROOM_TRANSPORT", "ses"},
          {"MAILROOM_SES_ENDPOINT", absl::StrCat("http://127.0.0.1:", port)},
          {"MAILROOM_SES_REGION", "us-east-1"},
          {"AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"},
          {"AWS_SECRET_ACCESS_KEY", kAwsSecret}};
}

// A sink that answers as Postmark accepts an email (bench/http_sink.py: one event loop, so the
// peer is not what limits the run); returns its port.
std::unique_ptr<Process> StartPostmark(const std::string& dir, int* port) {
  *port = testing::FreePort();
  return Spawn({"/usr/bin/python3", testing::Runfile("mailroom/bench/http_sink.py"), "--port",
                absl::StrCat(*port), "--token", "bench-token"},
               {}, dir + "/postmark.log", "ready");
}

// Every --rtt_ms with every --connections, through latency proxies: smtp-source, the
// pipeline over SMTP, the pipeline over SES, the pipeline over the postmark transport
// (--http_messages); then the table.
void Distance(Pipeline& p, const Options& o, int sink_port, pid_t sink_pid) {
  std::optional<SesPeer> ses;
  if (o.ses_messages > 0) ses = StartSes(p.dir());
  int postmark_port = 0;
  std::unique_ptr<Process> postmark;
  if (o.http_messages > 0) postmark = StartPostmark(p.dir(), &postmark_port);
  struct Row {
    int rtt_ms, connections;
    double source = -1, smtp = -1, ses = -1, http = -1;
    std::string round_trips{};
  };
  std::vector<Row> rows;
  int run = 0;
  for (int rtt : o.rtt_ms) {
    for (int c : o.connections) {
      Row row{rtt, c};
      const std::string stats = absl::StrCat(p.dir(), "/proxy", ++run, ".stats");
      const std::string log = absl::StrCat(p.dir(), "/proxy", run, ".log");
      int port = 0;
      const std::string at = absl::StrCat(rtt, " ms RTT, ", c, " connections");
      if (o.ceiling && o.messages > 0) {
        auto proxy = StartProxy(rtt, sink_port, &port, stats + ".source", log);
        bool ok = true;
        row.source = SmtpSource(absl::StrCat("127.0.0.1:", port), c, o.messages, &ok);
        const std::string counted = StopProxy(std::move(proxy), stats + ".source");
        std::printf("  smtp-source, %s: %d messages: %.0f msg/s%s\n    proxy: %s\n", at.c_str(),
                    o.messages, row.source, ok ? "" : " (smtp-source failed)", counted.c_str());
      }
      std::map<std::string, std::string> window = {
          {"MAILROOM_CONNECTIONS", absl::StrCat(c)},
          {"MAILROOM_MAX_IN_FLIGHT",
           absl::StrCat(o.max_in_flight > 0 ? o.max_in_flight : std::max(100, 4 * c))}};
      if (o.messages > 0) {
        auto proxy = StartProxy(rtt, sink_port, &port, stats + ".smtp", log);
        std::map<std::string, std::string> env = {{"MAILROOM_TRANSPORT", "smtp"},
                                                  {"MAILROOM_SMTP_URL",
                                                   absl::StrCat("smtp://127.0.0.1:", port)},
                                                  {"MAILROOM_SMTP_ALLOW_PLAIN", "true"}};
        env.insert(window.begin(), window.end());
        row.smtp = p.Run(absl::StrCat("smtp, ", at), o.messages, env, sink_pid);
        row.round_trips = StopProxy(std::move(proxy), stats + ".smtp");
        std::printf("    proxy: %s\n", row.round_trips.c_str());
      }
      if (ses) {
        auto proxy = StartProxy(rtt, ses->front_port, &port, stats + ".ses", log);
        std::map<std::string, std::string> env = SesEnv(port);
        env.insert(window.begin(), window.end());
        row.ses = p.Run(absl::StrCat("ses, ", at), o.ses_messages, env);
        (void)StopProxy(std::move(proxy), stats + ".ses");
      }
      if (postmark) {
        auto proxy = StartProxy(rtt, postmark_port, &port, stats + ".http", log);
        std::map<std::string, std::string> env = {{"MAILROOM_TRANSPORT", "postmark"},
                                                  {"MAILROOM_POSTMARK_SERVER_TOKEN", "bench-token"},
                                                  {"MAILROOM_POSTMARK_API_URL",
                                                   absl::StrCat("http://127.0.0.1:", port)}};
        env.insert(window.begin(), window.end());
        row.http = p.Run(absl::StrCat("postmark, ", at), o.http_messages, env);
        (void)StopProxy(std::move(proxy), stats + ".http");
      }
      rows.push_back(row);
      std::fflush(stdout);
    }
  }
  auto cell = [](double v) { return v < 0 ? std::string("-") : absl::StrCat(std::lround(v)); };
  std::printf("\n| RTT | connections | mailroom SMTP | smtp-source -d | mailroom SES |"
              " mailroom postmark | SMTP round trips per message (proxy) |\n"
              "|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::string turns = "-";
    const size_t at = r.round_trips.find("turns_per_message=");
    if (at != std::string::npos) {
      turns = r.round_trips.substr(at + 18, r.round_trips.find(' ', at) - at - 18);
    }
    std::printf("| %d ms | %d | %s | %s | %s | %s | %s |\n", r.rtt_ms, r.connections,
                cell(r.smtp).c_str(), cell(r.source).c_str(), cell(r.ses).c_str(),
                cell(r.http).c_str(), turns.c_str());
  }
}

}  // namespace
}  // namespace mailroom

ABSL_FLAG(int, messages, 20000, "emails through smtp-sink (0: none)");
ABSL_FLAG(int, ses_messages, 2000, "emails through the SES emulator (0: none)");
ABSL_FLAG(int, http_messages, 0, "emails through the postmark transport and its sink (0: none)");
ABSL_FLAG(mailroom::IntList, connections, {{8}},
          "the sender's connections (several only with --rtt_ms)");
ABSL_FLAG(mailroom::IntList, rtt_ms, {}, "round trips (ms) of the latency proxy (empty: none)");
ABSL_FLAG(std::string, sender, "", "another sender binary to time (empty: the one built)");
ABSL_FLAG(bool, no_ceiling, false, "do not time smtp-source");
ABSL_FLAG(int, max_in_flight, 0, "the sender's MAILROOM_MAX_IN_FLIGHT (0: its default)");
ABSL_FLAG(std::string, fsync, "on", "PostgreSQL fsync: on or off");

int main(int argc, char** argv) {
  using namespace mailroom;
  if (auto done = ParseToolFlags("pipeline_bench", "usage: pipeline_bench [flags]\n", argc, argv)) {
    return *done;
  }
  Options o;
  o.messages = absl::GetFlag(FLAGS_messages);
  o.ses_messages = absl::GetFlag(FLAGS_ses_messages);
  o.http_messages = absl::GetFlag(FLAGS_http_messages);
  o.connections = absl::GetFlag(FLAGS_connections).values;
  o.rtt_ms = absl::GetFlag(FLAGS_rtt_ms).values;
  o.sender = absl::GetFlag(FLAGS_sender);
  o.ceiling = !absl::GetFlag(FLAGS_no_ceiling);
  o.max_in_flight = absl::GetFlag(FLAGS_max_in_flight);
  o.durable = absl::GetFlag(FLAGS_fsync) == "on";
  for (const std::vector<int>* list : {&o.connections, &o.rtt_ms}) {
    for (int n : *list) {
      if (n <= 0) return UsageError("pipeline_bench", "--connections, --rtt_ms: positive", "");
    }
  }
  if (o.connections.empty()) return UsageError("pipeline_bench", "--connections: empty", "");
  if (o.rtt_ms.empty() && o.connections.size() > 1) {
    Die("several --connections need --rtt_ms (the distance runs)");
  }
  // Without the sink the sender's connections are refused and the run would wait for ever.
  for (const char* tool : {"/usr/sbin/smtp-sink", "/usr/sbin/smtp-source"}) {
    if (access(tool, X_OK) != 0) {
      Die(absl::StrCat(tool, " is missing: apt-get install postfix (bench/smtp_throughput.sh"
                             " installs it unconfigured)"));
    }
  }
  Pipeline p(o);
  // smtp-sink binds with SO_REUSEPORT; it lives in its own process group, killed on exit.
  int sink_port = testing::FreePort();
  std::string sink_addr = absl::StrCat("127.0.0.1:", sink_port);
  auto sink = Spawn({"/usr/sbin/smtp-sink", "-u", "nobody", sink_addr, "1000"}, {},
                    p.dir() + "/sink.log", "");
  if (!testing::WaitForListener(sink_port, absl::Seconds(10))) {
    Die("smtp-sink did not start listening within 10 s (see sink.log)");
  }
  if (!o.rtt_ms.empty()) {
    std::printf("pipeline collector -> gRPC -> sender -> latency proxy -> peer, budget unlimited,"
                " PostgreSQL fsync=%s, sender %s\n",
                o.durable ? "on" : "off", o.sender.empty() ? "as built" : o.sender.c_str());
    Distance(p, o, sink_port, sink->pid());
    return 0;
  }
  const int connections = o.connections.front();
  std::printf("pipeline collector -> gRPC -> sender -> peer, budget unlimited, %d connections,"
              " PostgreSQL fsync=%s\n",
              connections, o.durable ? "on" : "off");
  std::map<std::string, std::string> smtp = {{"MAILROOM_TRANSPORT", "smtp"},
                                             {"MAILROOM_SMTP_URL",
                                              absl::StrCat("smtp://", sink_addr)},
                                             {"MAILROOM_SMTP_ALLOW_PLAIN", "true"}};
  p.Idle(smtp);
  if (o.messages > 0) {
    bool ok = true;
    const double rate = SmtpSource(sink_addr, connections, o.messages, &ok);
    std::printf("  smtp-source (ceiling): %d sessions, %d messages of 1500 bytes: %.0f msg/s%s\n",
                connections, o.messages, rate, ok ? "" : " (smtp-source failed)");
    p.Run("smtp", o.messages, smtp, sink->pid());
  }
  sink.reset();
  if (o.ses_messages > 0) {
    std::optional<SesPeer> ses = StartSes(p.dir());
    if (!ses) return 0;
    p.Run("ses", o.ses_messages, SesEnv(ses->front_port));
  }
  return 0;
}
