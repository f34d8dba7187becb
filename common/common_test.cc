#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/env.h"
#include "common/log.h"
#include "common/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

Env MakeEnv(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return Env([shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  });
}

TEST(EnvTest, ErrorsNameTheVariableAndTheProblem) {
  Env env = MakeEnv({{"A", "12x"},
                     {"B", "99999"},
                     {"C", "maybe"},
                     {"D", "nohost"},
                     {"E", "1.5.2"},
                     {"F", "/no/such/file"}});
  EXPECT_THAT(std::string(env.Int("A", 1, 0, 10).status().message()),
              HasSubstr("A: \"12x\" is not an integer"));
  EXPECT_THAT(std::string(env.Int("B", 1, 0, 10).status().message()),
              HasSubstr("B: 99999 is out of range"));
  EXPECT_THAT(std::string(env.Bool("C", false).status().message()), HasSubstr("C: "));
  EXPECT_THAT(std::string(env.HostPort("D", "").status().message()), HasSubstr("D: "));
  EXPECT_THAT(std::string(env.Double("E", 0, 0, 10).status().message()), HasSubstr("E: "));
  EXPECT_THAT(std::string(env.File("F").status().message()), HasSubstr("F: cannot read"));
  EXPECT_THAT(std::string(env.Required("G").status().message()),
              HasSubstr("G: required but not set"));
}

// A service's table as its loader reads through it: the row gives the default and the range.
const SettingsTable kTable = {
    {"MAILROOM_N", "7", "1", "100", "a number"},
    {"MAILROOM_MS", "250", "0", "1000", "a duration"},
    {"MAILROOM_BUDGET", "unlimited", "0.01", "1e9", "money, or unlimited"},
    {"MAILROOM_ON", "true", "", "", "a switch"},
    {"MAILROOM_ADDRESS", "127.0.0.1:9464", "", "", "an address"},
    {"MAILROOM_KEY", "", "", "", "a key", /*secret=*/true},
};

TEST(EnvTest, ReadsThroughATablesRows) {
  Env unset = MakeEnv({});
  EXPECT_EQ(*unset.Int(FindSetting(kTable, "MAILROOM_N")), 7);
  EXPECT_EQ(*unset.Millis(FindSetting(kTable, "MAILROOM_MS")), absl::Milliseconds(250));
  EXPECT_TRUE(*unset.Bool(FindSetting(kTable, "MAILROOM_ON")));
  EXPECT_EQ(*unset.HostPort(FindSetting(kTable, "MAILROOM_ADDRESS")), "127.0.0.1:9464");
  EXPECT_EQ(unset.String(FindSetting(kTable, "MAILROOM_BUDGET")), "unlimited");
  // What the loader read is recorded with the row's default and range.
  ASSERT_EQ(unset.Settings().size(), 5u);
  EXPECT_EQ(unset.Settings()[0].default_value, "7");
  EXPECT_EQ(unset.Settings()[0].max, "100");

  Env set = MakeEnv({{"MAILROOM_N", "101"}, {"MAILROOM_BUDGET", "250.5"}, {"MAILROOM_MS", "9"}});
  EXPECT_EQ(set.Int(FindSetting(kTable, "MAILROOM_N")).status().message(),
            "MAILROOM_N: 101 is out of range [1, 100]");
  EXPECT_EQ(*set.Double(FindSetting(kTable, "MAILROOM_BUDGET")), 250.5);
  EXPECT_EQ(*set.Millis(FindSetting(kTable, "MAILROOM_MS")), absl::Milliseconds(9));
}

TEST(EnvTest, HelpShowsEveryRowAndNoValue) {
  EXPECT_EQ(SettingsHelp(kTable),
            "MAILROOM_N  (default: 7; 1..100)\n    a number\n"
            "MAILROOM_MS  (default: 250; 0..1000)\n    a duration\n"
            "MAILROOM_BUDGET  (default: unlimited; 0.01..1e9)\n    money, or unlimited\n"
            "MAILROOM_ON  (default: true)\n    a switch\n"
            "MAILROOM_ADDRESS  (default: 127.0.0.1:9464)\n    an address\n"
            "MAILROOM_KEY  (default: none; secret)\n    a key\n");
}

TEST(EnvDeathTest, ANameOutsideTheTableIsAProgrammingError) {
  EXPECT_DEATH(FindSetting(kTable, "MAILROOM_TYPO"),
               "MAILROOM_TYPO: not in the service's settings table");
}

TEST(EnvTest, DefaultsAndValues) {
  Env env = MakeEnv({{"N", " 42 "}, {"L", "a, b,,c"}, {"T", "yes"}, {"HP", "127.0.0.1:0"}});
  EXPECT_EQ(*env.Int("N", 1, 0, 100), 42);
  EXPECT_EQ(*env.Int("MISSING", 7, 0, 100), 7);
  EXPECT_EQ(env.List("L"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(*env.Bool("T", false));
  EXPECT_EQ(*env.HostPort("HP", ""), "127.0.0.1:0");
  EXPECT_EQ(*env.Millis("MS", 250, 0, 1000), absl::Milliseconds(250));
}

TEST(LogTest, HostileValuesCannotForgeLines) {
  std::string line = FormatLogLine(LogLevel::kInfo, "job failed",
                                   {{"login", "evil\nlevel=error msg=forged"}, {"n", "3"}});
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_THAT(line, HasSubstr("login=\"evil\\nlevel=error msg=forged\""));
  EXPECT_THAT(line, HasSubstr(" n=3"));
  EXPECT_THAT(line, HasSubstr("msg=\"job failed\""));
}

TEST(LogTest, ParsesTheLevelsTheLinesShowAndNothingElse) {
  EXPECT_EQ(ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(ParseLogLevel("info"), LogLevel::kInfo);
  EXPECT_EQ(ParseLogLevel("warn"), LogLevel::kWarn);
  EXPECT_EQ(ParseLogLevel("error"), LogLevel::kError);
  for (const char* bad : {"", "warning", "WARN", "Info", " debug", "trace", "fatal"}) {
    EXPECT_FALSE(ParseLogLevel(bad).has_value()) << bad;
  }
}

// Metrics as a service declares them.
constexpr auto kJobs = CounterMetric("mailroom_jobs_total", "Jobs.", "outcome");
constexpr auto kDepth = GaugeMetric("mailroom_depth", "Depth.", "group");
constexpr auto kSubscribers = GaugeMetric("mailroom_subscribers", "Subscribers.", "group");
const std::vector<double> kLatencyBuckets = {0.5, 1, 10};
constexpr auto kLatency = HistogramMetric("mailroom_latency_seconds", "Latency.", &kLatencyBuckets,
                                          "action");
constexpr auto kDefaultLatency = HistogramMetric("mailroom_other_seconds", "Other.", nullptr);
constexpr auto kRuns = GaugeMetric("mailroom_runs", "Runs.");

TEST(MetricsTest, RendersPrometheusText) {
  Metrics m;
  m.Add(kJobs, 2, {"sent"});
  m.Add(kJobs, 1, {"sent"});
  m.Add(kJobs, -5, {"sent"});  // counters only go up
  m.Set(kDepth, 7.5, {"a\"b"});
  std::string text = m.Render();
  EXPECT_THAT(text, HasSubstr("# HELP mailroom_jobs_total Jobs.\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE mailroom_jobs_total counter\n"));
  EXPECT_THAT(text, HasSubstr("mailroom_jobs_total{outcome=\"sent\"} 3"));
  EXPECT_THAT(text, HasSubstr("# TYPE mailroom_depth gauge\n"));
  EXPECT_THAT(text, HasSubstr("mailroom_depth{group=\"a\\\"b\"} 7.5"));
  EXPECT_EQ(m.Value("mailroom_jobs_total", {{"outcome", "sent"}}), 3);
  EXPECT_EQ(m.Value("mailroom_jobs_total", {{"outcome", "failed"}}), 0);
  EXPECT_EQ(m.Value("mailroom_absent"), 0);
}

TEST(MetricsTest, GaugesGoBothWaysAndClearDropsSeries) {
  Metrics m;
  m.Add(kSubscribers, 1, {"g"});
  m.Add(kSubscribers, 1, {"g"});
  m.Add(kSubscribers, -1, {"g"});
  EXPECT_EQ(m.Value("mailroom_subscribers", {{"group", "g"}}), 1);
  m.Set(kSubscribers, 4, {"h"});
  m.Clear(kSubscribers);
  EXPECT_EQ(m.Value("mailroom_subscribers", {{"group", "g"}}), 0);
  std::string text = m.Render();
  EXPECT_THAT(text, Not(HasSubstr("mailroom_subscribers")));  // no series, no family
  // Still declared: the name takes new series, with its HELP and TYPE.
  m.Set(kSubscribers, 2, {"h"});
  text = m.Render();
  EXPECT_THAT(text, HasSubstr("# HELP mailroom_subscribers Subscribers.\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE mailroom_subscribers gauge\n"));
  EXPECT_THAT(text, HasSubstr("mailroom_subscribers{group=\"h\"} 2"));
}

TEST(MetricsTest, HistogramsHaveBucketsSumAndCount) {
  Metrics m;
  m.Observe(kLatency, 0.2, {"activation"});
  m.Observe(kLatency, 3, {"activation"});
  m.Observe(kLatency, 30, {"activation"});
  std::string text = m.Render();
  EXPECT_THAT(text, HasSubstr("# TYPE mailroom_latency_seconds histogram\n"));
  EXPECT_THAT(text,
              HasSubstr("mailroom_latency_seconds_bucket{action=\"activation\",le=\"0.5\"} 1"));
  EXPECT_THAT(text,
              HasSubstr("mailroom_latency_seconds_bucket{action=\"activation\",le=\"10\"} 2"));
  EXPECT_THAT(text,
              HasSubstr("mailroom_latency_seconds_bucket{action=\"activation\",le=\"+Inf\"} 3"));
  EXPECT_THAT(text, HasSubstr("mailroom_latency_seconds_count{action=\"activation\"} 3"));
  EXPECT_THAT(text, HasSubstr("mailroom_latency_seconds_sum{action=\"activation\"} 33.2"));
  EXPECT_EQ(m.Value("mailroom_latency_seconds", {{"action", "activation"}}), 3);
  // Without buckets of its own a histogram has Prometheus' defaults (0.005 .. 10).
  m.Observe(kDefaultLatency, 0.003);
  EXPECT_THAT(m.Render(), HasSubstr("mailroom_other_seconds_bucket{le=\"0.005\"} 1"));
  EXPECT_EQ(m.Value("mailroom_other_seconds"), 1);
}

TEST(MetricsTest, NamesPrometheusRejectsRecordNothing) {
  constexpr auto kBadName = CounterMetric("bad name", "Rejected.");
  constexpr auto kBadLabel = CounterMetric("mailroom_ok_total", "Rejected label.", "bad-label");
  Metrics m;
  m.Add(kBadName, 1);
  m.Add(kBadLabel, 1, {"x"});
  EXPECT_EQ(m.Value("bad name"), 0);
  EXPECT_EQ(m.Value("mailroom_ok_total", {{"bad-label", "x"}}), 0);
  EXPECT_THAT(m.Render(), Not(HasSubstr("bad")));
}

TEST(MetricsTest, HookRunsBeforeEachCollection) {
  Metrics m;
  int runs = 0;
  m.SetCollectHook([&] { m.Set(kRuns, ++runs); });
  EXPECT_THAT(m.Render(), HasSubstr("mailroom_runs 1"));
  EXPECT_THAT(m.Render(), HasSubstr("mailroom_runs 2"));
}

// A raw HTTP/1.0 GET on 127.0.0.1:port; returns the whole response ("" if unreachable).
std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (send(fd, req.data(), req.size(), 0) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return out;
}

TEST(MetricsServerTest, ServesMetricsOnAChosenPort) {
  Metrics m;
  m.Add(kJobs, 4, {"sent"});
  int hooks = 0;
  m.SetCollectHook([&] { ++hooks; });
  MetricsServer server;
  ASSERT_TRUE(server.Start("127.0.0.1:0", &m).ok());
  ASSERT_GT(server.port(), 0);
  std::string res = HttpGet(server.port(), "/metrics");
  EXPECT_THAT(res, HasSubstr(" 200 "));
  EXPECT_THAT(res, HasSubstr("mailroom_jobs_total{outcome=\"sent\"} 4"));
  EXPECT_EQ(hooks, 1);
  EXPECT_THAT(HttpGet(server.port(), "/healthz"), HasSubstr(" 200 "));
  EXPECT_THAT(HttpGet(server.port(), "/nope"), HasSubstr(" 404 "));

  // The port is taken now: a second server cannot bind it.
  MetricsServer second;
  absl::Status st = second.Start(absl::StrCat("127.0.0.1:", server.port()), &m);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;

  const int port = server.port();
  const absl::Time stop_start = absl::Now();
  server.Stop();
  EXPECT_LT(absl::Now() - stop_start, absl::Seconds(1));  // civetweb alone takes up to 2 s
  EXPECT_EQ(HttpGet(port, "/metrics"), "");
}

TEST(MetricsServerTest, RejectsMalformedAddresses) {
  Metrics m;
  MetricsServer server;
  EXPECT_EQ(server.Start("127.0.0.1", &m).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.Start("127.0.0.1:http", &m).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.Start("127.0.0.1:70000", &m).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mailroom
