#include <map>
#include <memory>

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
  Env env = MakeEnv({{"A", "12x"}, {"B", "99999"}, {"C", "maybe"}, {"D", "nohost"},
                     {"E", "1.5.2"}, {"F", "/no/such/file"}});
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

TEST(MetricsTest, RendersPrometheusText) {
  Metrics m;
  m.Describe("mailroom_jobs_total", Metrics::Type::kCounter, "Jobs.");
  m.Add("mailroom_jobs_total", 2, {{"outcome", "sent"}});
  m.Add("mailroom_jobs_total", 1, {{"outcome", "sent"}});
  m.Set("mailroom_depth", 7.5, {{"group", "a\"b"}});
  std::string text = m.Render();
  EXPECT_THAT(text, HasSubstr("# TYPE mailroom_jobs_total counter\n"));
  EXPECT_THAT(text, HasSubstr("mailroom_jobs_total{outcome=\"sent\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("mailroom_depth{group=\"a\\\"b\"} 7.5\n"));
  EXPECT_EQ(m.Value("mailroom_jobs_total", {{"outcome", "sent"}}), 3);
}

}  // namespace
}  // namespace mailroom
