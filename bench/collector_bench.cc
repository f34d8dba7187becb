// Collector benchmarks against a throwaway PostgreSQL and the real collector binary:
//  1. backlog drain rate: N tokens queued, then one subscriber (batch limit 1000) drains them,
//     acknowledging as it goes; prints jobs/s for each N and for the first/last tenth;
//  2. commit-to-stream latency at a steady trickle with batch timeout 0: p50/p90/p99/max.
// Usage: collector_bench [--sizes=100000,1000000] [--trickle=2000] [--rate=200]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <pqxx/pqxx>
#include <map>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collector/migrate.h"
#include "grpcpp/grpcpp.h"
#include "integration_tests/support/collector_client.h"
#include "integration_tests/support/pg_server.h"
#include "integration_tests/support/process.h"

namespace mailroom {
namespace {

constexpr char kKey[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
constexpr char kBearer[] = "bench-subscriber-token-0123456789";

struct Collector {
  std::unique_ptr<testing::Process> process;
  int port = 0;
};

Collector StartCollector(const std::string& url, int batch_limit, int batch_timeout_ms) {
  Collector c;
  c.port = testing::FreePort();
  auto p = testing::Process::Spawn(
      {testing::Runfile("mailroom/collector/collector")},
      {{"MAILROOM_DATABASE_URL", url},
       {"MAILROOM_SECRET_KEY", kKey},
       {"MAILROOM_LISTEN_ADDRESS", absl::StrCat("127.0.0.1:", c.port)},
       {"MAILROOM_METRICS_ADDRESS", "off"},
       {"MAILROOM_SUBSCRIBER_TOKENS", kBearer},
       {"MAILROOM_BATCH_LIMIT", absl::StrCat(batch_limit)},
       {"MAILROOM_BATCH_TIMEOUT", absl::StrCat(batch_timeout_ms)},
       {"MAILROOM_LOG_LEVEL", "warn"}},
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

// Acknowledges everything the subscriber received, in batches, until `stop`.
void AckLoop(testing::TestSubscriber* sub, std::atomic<bool>* stop) {
  while (!stop->load()) {
    auto jobs = sub->Take();
    if (jobs.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    for (size_t i = 0; i < jobs.size(); i += 5000) {
      std::vector<uint64_t> ids;
      for (size_t j = i; j < std::min(jobs.size(), i + 5000); ++j) ids.push_back(jobs[j].job_id());
      sub->Ack(ids, v1::OUTCOME_SENT);
    }
  }
}

void Drain(testing::PgServer& pg, int n) {
  std::string url = Fresh(pg, absl::StrCat("drain_", n));
  absl::Time t0 = absl::Now();
  {
    pqxx::connection c(url);
    for (int done = 0; done < n; done += 100000) {
      pqxx::work tx(c);
      tx.exec(absl::StrCat("INSERT INTO accounts (email, login) SELECT 'u' || i || '@bench.test',"
                           " 'u' || i FROM generate_series(", done + 1, ", ",
                           std::min(n, done + 100000), ") i"));
      tx.commit();
    }
    pqxx::nontransaction tx(c);
    tx.exec("VACUUM ANALYZE");
  }
  std::printf("  queued %d tokens in %.1f s\n", n, absl::ToDoubleSeconds(absl::Now() - t0));
  Collector col = StartCollector(url, 1000, 5000);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", col.port),
                                     grpc::InsecureChannelCredentials());
  absl::Time start = absl::Now();
  testing::TestSubscriber sub(channel, kBearer, "mailroom", 100000, "bench");
  std::atomic<bool> stop{false};
  std::thread acker(AckLoop, &sub, &stop);
  size_t got = sub.WaitForJobs(n, absl::Minutes(30));
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
  std::printf("  drained %zu of %d in %.2f s: %.0f jobs/s (first tenth %.0f jobs/s, last tenth"
              " %.0f jobs/s)\n",
              got, n, secs, got / secs, rate_of(0, tenth),
              rate_of(arrivals.size() - tenth, arrivals.size()));
  std::fflush(stdout);
}

void Latency(testing::PgServer& pg, int count, int rate) {
  std::string url = Fresh(pg, "latency");
  Collector col = StartCollector(url, 1000, 0);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", col.port),
                                     grpc::InsecureChannelCredentials());
  testing::TestSubscriber sub(channel, kBearer, "mailroom", 100000, "latency");
  sub.WaitSubscribed(absl::Seconds(10));
  std::atomic<bool> stop{false};
  std::thread acker(AckLoop, &sub, &stop);
  pqxx::connection c(url);
  std::vector<std::pair<uint64_t, absl::Time>> commits;  // account id -> commit time
  absl::Duration gap = absl::Seconds(1) / rate;
  absl::Time next = absl::Now();
  for (int i = 0; i < count; ++i) {
    absl::SleepFor(next - absl::Now());
    next += gap;
    pqxx::work tx(c);
    auto row = tx.exec1(absl::StrCat("INSERT INTO accounts (email, login) VALUES ('l", i,
                                     "@bench.test', 'l", i, "') RETURNING id"));
    tx.commit();
    commits.emplace_back(row[0].as<uint64_t>(), absl::Now());
  }
  sub.WaitForJobs(count, absl::Seconds(30));
  stop = true;
  acker.join();
  std::map<uint64_t, absl::Time> arrived;
  for (const auto& j : sub.Jobs()) arrived[j.account_id()] = absl::InfinitePast();
  auto arrivals = sub.Arrivals();
  auto jobs = sub.Jobs();
  for (size_t i = 0; i < jobs.size(); ++i) arrived[jobs[i].account_id()] = arrivals[i].second;
  std::vector<double> ms;
  for (const auto& [account, t] : commits) {
    auto it = arrived.find(account);
    if (it != arrived.end()) ms.push_back(absl::ToDoubleMilliseconds(it->second - t));
  }
  std::sort(ms.begin(), ms.end());
  auto pct = [&](double p) { return ms.empty() ? 0.0 : ms[std::min(ms.size() - 1, size_t(p * ms.size()))]; };
  std::printf("  %zu of %d single-row commits at %d/s, batch timeout 0: commit-to-stream latency"
              " p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms\n",
              ms.size(), count, rate, pct(0.50), pct(0.90), pct(0.99), ms.empty() ? 0 : ms.back());
}

}  // namespace
}  // namespace mailroom

int main(int argc, char** argv) {
  std::vector<int> sizes = {100000, 1000000};
  int trickle = 2000, rate = 200;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (absl::ConsumePrefix(&a, "--sizes=")) {
      sizes.clear();
      for (absl::string_view s : absl::StrSplit(a, ',')) {
        int n;
        if (absl::SimpleAtoi(s, &n)) sizes.push_back(n);
      }
    } else if (absl::ConsumePrefix(&a, "--trickle=")) {
      (void)absl::SimpleAtoi(a, &trickle);
    } else if (absl::ConsumePrefix(&a, "--rate=")) {
      (void)absl::SimpleAtoi(a, &rate);
    }
  }
  auto pg = mailroom::testing::PgServer::Start();
  if (!pg.ok()) {
    std::fprintf(stderr, "%s\n", pg.status().ToString().c_str());
    return 1;
  }
  std::printf("collector backlog drain (batch limit 1000, one subscriber acknowledging):\n");
  for (int n : sizes) mailroom::Drain(**pg, n);
  if (trickle > 0) {
    std::printf("commit-to-stream latency:\n");
    mailroom::Latency(**pg, trickle, rate);
  }
  return 0;
}
