// docs/configuration.md against the one table of settings each service has
// (collector/config/settings.cc, sender/config/settings.cc): every row of the table has a row in
// the docs with the same default and, where the setting has a range, both of its ends. And the
// table is the loader's: every variable the loader reads (Env records each read) is in the table,
// with the table's default and range.
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "collector/config/config.h"
#include "collector/config/settings.h"
#include "common/env.h"
#include "gtest/gtest.h"
#include "sender/config/config.h"
#include "sender/config/settings.h"

namespace mailroom {
namespace {

struct Row {
  std::vector<std::string> names;     // the backticked variables of the first cell
  std::vector<std::string> defaults;  // the backticked values of the second cell
  std::string text;                   // the whole row
};

std::string ReadDocs() {
  const char* dir = std::getenv("TEST_SRCDIR");
  std::ifstream in(std::string(dir ? dir : ".") + "/mailroom/docs/configuration.md");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> Backticked(absl::string_view cell) {
  std::vector<std::string> out;
  std::vector<std::string> parts = absl::StrSplit(cell, '`');
  for (size_t i = 1; i < parts.size(); i += 2) out.push_back(parts[i]);
  return out;
}

// The rows of the table(s) in one part of the docs: the "## Sender" section for the sender,
// every other section for the collector.
std::map<std::string, Row> Rows(const std::string& docs, bool sender) {
  std::map<std::string, Row> rows;
  bool in_sender = false;
  for (absl::string_view line : absl::StrSplit(docs, '\n')) {
    if (absl::StartsWith(line, "## ")) in_sender = line == "## Sender";
    if (in_sender != sender || !absl::StartsWith(line, "| `")) continue;
    std::vector<absl::string_view> cells = absl::StrSplit(line, '|');
    if (cells.size() < 4) continue;
    Row row{Backticked(cells[1]), Backticked(cells[2]), std::string(line)};
    for (const std::string& n : row.names) rows[n] = row;
  }
  return rows;
}

// Numbers written in a row, thousands separators and all.
std::vector<double> Numbers(const std::string& text) {
  std::vector<double> out;
  std::string t = absl::StrReplaceAll(text, {{",", ""},
                                             {"–", " "},
                                             {"(", " "},
                                             {")", " "},
                                             {"`", " "},
                                             {";", " "},
                                             {"[", " "},
                                             {"]", " "}});
  for (absl::string_view w : absl::StrSplit(t, absl::ByAnyChar(" \t/:="), absl::SkipEmpty())) {
    w = absl::StripSuffix(absl::StripSuffix(w, "."), "%");
    double d;
    if (absl::SimpleAtod(w, &d)) out.push_back(d);
  }
  return out;
}

bool SameNumber(const std::string& a, const std::string& b) {
  double x, y;
  if (!absl::SimpleAtod(a, &x) || !absl::SimpleAtod(b, &y)) return a == b;
  return std::fabs(x - y) <= 1e-9 * std::max(1.0, std::fabs(x));
}

Env::Getter Vars(std::map<std::string, std::string> vars) {
  auto owned = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [owned](const char* name) -> const char* {
    auto it = owned->find(name);
    return it == owned->end() ? nullptr : it->second.c_str();
  };
}

// Loads a configuration under several environments (each transport, the optional endpoints
// on) so that every conditional read happens, and returns what was read, by name.
template <typename Load>
std::map<std::string, Env::Setting> Read(
    Load load, const std::vector<std::map<std::string, std::string>>& envs) {
  std::map<std::string, Env::Setting> read;
  for (const auto& vars : envs) {
    Env env(Vars(vars));
    auto config = load(env);
    EXPECT_TRUE(config.ok()) << config.status();
    for (const Env::Setting& s : env.Settings()) {
      // A range read only under one of the environments (a budget that is set) counts too.
      auto [it, added] = read.emplace(s.name, s);
      if (!added && it->second.min.empty()) {
        it->second.min = s.min;
        it->second.max = s.max;
      }
    }
  }
  return read;
}

std::vector<std::string> Check(const std::map<std::string, Env::Setting>& read,
                               const std::map<std::string, Row>& rows) {
  std::vector<std::string> problems;
  for (const auto& [name, s] : read) {
    auto it = rows.find(name);
    if (it == rows.end()) {
      problems.push_back(name + ": no row in docs/configuration.md");
      continue;
    }
    const Row& row = it->second;
    size_t i = 0;
    while (i < row.names.size() && row.names[i] != name) ++i;
    // A default the docs describe in words (a host name, "required") has no backticked value.
    if (!s.default_value.empty() && !row.defaults.empty()) {
      bool shown = false;
      if (row.defaults.size() == row.names.size() && i < row.names.size()) {
        shown = SameNumber(row.defaults[i], s.default_value);
      } else {
        for (const std::string& d : row.defaults) shown |= SameNumber(d, s.default_value);
      }
      if (!shown) {
        problems.push_back(name + ": the code's default is \"" + s.default_value +
                           "\", the row shows [" + absl::StrJoin(row.defaults, ", ") + "]");
      }
    }
    if (!s.min.empty()) {
      const std::vector<double> numbers = Numbers(row.text);
      for (const std::string& end : {s.min, s.max}) {
        double want;
        if (!absl::SimpleAtod(end, &want)) continue;
        bool found = false;
        for (double n : numbers)
          found |= std::fabs(n - want) <= 1e-9 * std::max(1.0, std::fabs(want));
        if (!found) problems.push_back(name + ": the row does not show the range end " + end);
      }
    }
  }
  return problems;
}

const std::map<std::string, std::string> kCollectorRequired = {
    {"MAILROOM_DATABASE_URL", "postgresql://u@127.0.0.1:5432/db"},
    {"MAILROOM_SECRET_KEY", std::string(64, 'a')},
    {"MAILROOM_SUBSCRIBER_TOKENS", "documentation-test-token@mailroom:subscriber"}};

std::map<std::string, std::string> With(std::map<std::string, std::string> base,
                                        const std::map<std::string, std::string>& more) {
  for (const auto& [k, v] : more) base[k] = v;
  return base;
}

// The table's rows as Check reads them.
std::map<std::string, Env::Setting> Rows(const SettingsTable& table) {
  std::map<std::string, Env::Setting> out;
  for (const SettingSpec& s : table) {
    EXPECT_TRUE(out.emplace(s.name, Env::Setting{s.name, s.default_value, s.min, s.max}).second)
        << s.name << " has two rows";
    EXPECT_FALSE(s.help.empty()) << s.name << " has no help";
    EXPECT_EQ(s.help.find('\n'), std::string::npos) << s.name;
  }
  return out;
}

// What the loader read that the table does not say: a variable without a row, another default
// (where the row gives one) or another range.
std::vector<std::string> NotInTable(const std::map<std::string, Env::Setting>& read,
                                    const SettingsTable& table) {
  std::vector<std::string> problems;
  const auto rows = Rows(table);
  for (const auto& [name, s] : read) {
    auto it = rows.find(name);
    if (it == rows.end()) {
      problems.push_back(name + ": read by the loader, not in the settings table");
      continue;
    }
    const Env::Setting& row = it->second;
    if (!row.default_value.empty() && !SameNumber(row.default_value, s.default_value)) {
      problems.push_back(name + ": the loader's default is \"" + s.default_value +
                         "\", the table's \"" + row.default_value + "\"");
    }
    if (!SameNumber(row.min, s.min) || !SameNumber(row.max, s.max)) {
      problems.push_back(name + ": the loader's range is [" + s.min + ", " + s.max +
                         "], the table's [" + row.min + ", " + row.max + "]");
    }
  }
  return problems;
}

const std::vector<std::map<std::string, std::string>> kCollectorEnvs = {
    kCollectorRequired,
    With(kCollectorRequired,
         {{"MAILROOM_FEEDBACK_ADDRESS", "127.0.0.1:0"},
          {"MAILROOM_FEEDBACK_TOPIC_ARNS", "arn:aws:sns:us-east-1:123456789012:ses-feedback"},
          {"MAILROOM_DEFAULT_GROUP_BUDGET", "100"}})};

const std::vector<std::map<std::string, std::string>> kSenderEnvs = {
    {},
    {{"MAILROOM_TRANSPORT", "smtp"}, {"MAILROOM_SMTP_URL", "smtp://mail.example:587"}},
    {{"MAILROOM_TRANSPORT", "ses"},
     {"AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"},
     {"AWS_SECRET_ACCESS_KEY", "documentation-test-secret"}},
    {{"MAILROOM_BUDGET", "100"}, {"MAILROOM_PROVIDER_RATE_LIMIT", "5"}},
    {{"MAILROOM_FAILOVER_TRANSPORT", "smtp"},
     {"MAILROOM_FAILOVER_SMTP_URL", "smtp://backup.example:587"},
     {"MAILROOM_FAILOVER_PRICE_PER_1000", "0.5"}},
    {{"MAILROOM_FAILOVER_TRANSPORT", "ses"},
     {"MAILROOM_FAILOVER_AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"},
     {"MAILROOM_FAILOVER_AWS_SECRET_ACCESS_KEY", "documentation-test-secret"},
     {"MAILROOM_FAILOVER_PRICE_PER_1000", "0.5"}},
    {{"MAILROOM_TRANSPORT", "postmark"},
     {"MAILROOM_POSTMARK_SERVER_TOKEN", "documentation-test-token"}},
    {{"MAILROOM_TRANSPORT", "sendgrid"}, {"MAILROOM_SENDGRID_API_KEY", "documentation-test-key"}},
    {{"MAILROOM_TRANSPORT", "mailgun"},
     {"MAILROOM_MAILGUN_API_KEY", "documentation-test-key"},
     {"MAILROOM_MAILGUN_DOMAIN", "mg.example.com"}},
    {{"MAILROOM_TRANSPORT", "resend"}, {"MAILROOM_RESEND_API_KEY", "documentation-test-key"}},
    {{"MAILROOM_FAILOVER_TRANSPORT", "postmark"},
     {"MAILROOM_FAILOVER_POSTMARK_SERVER_TOKEN", "documentation-test-token"},
     {"MAILROOM_FAILOVER_PRICE_PER_1000", "0.5"}},
    {{"MAILROOM_FAILOVER_TRANSPORT", "mailgun"},
     {"MAILROOM_FAILOVER_MAILGUN_API_KEY", "documentation-test-key"},
     {"MAILROOM_FAILOVER_MAILGUN_DOMAIN", "mg.example.com"},
     {"MAILROOM_FAILOVER_PRICE_PER_1000", "0.5"}},
    {{"MAILROOM_FAILOVER_TRANSPORT", "sendgrid"},
     {"MAILROOM_FAILOVER_SENDGRID_API_KEY", "documentation-test-key"},
     {"MAILROOM_FAILOVER_PRICE_PER_1000", "0.5"}},
    {{"MAILROOM_FAILOVER_TRANSPORT", "resend"},
     {"MAILROOM_FAILOVER_RESEND_API_KEY", "documentation-test-key"},
     {"MAILROOM_FAILOVER_PRICE_PER_1000", "0.5"}}};

TEST(ConfigurationDocsTest, EveryCollectorSettingHasARowWithItsDefaultAndRange) {
  const auto rows = Rows(CollectorSettings());
  ASSERT_GT(rows.size(), 30u);
  const auto problems = Check(rows, Rows(ReadDocs(), /*sender=*/false));
  EXPECT_TRUE(problems.empty()) << absl::StrJoin(problems, "\n");
}

TEST(ConfigurationDocsTest, EverySenderSettingHasARowWithItsDefaultAndRange) {
  const auto rows = Rows(SenderSettings());
  ASSERT_GT(rows.size(), 20u);
  const auto problems = Check(rows, Rows(ReadDocs(), /*sender=*/true));
  EXPECT_TRUE(problems.empty()) << absl::StrJoin(problems, "\n");
}

TEST(ConfigurationDocsTest, TheCollectorLoaderReadsItsTable) {
  const auto read = Read([](const Env& env) { return LoadCollectorConfig(env); }, kCollectorEnvs);
  ASSERT_GT(read.size(), 30u);
  const auto problems = NotInTable(read, CollectorSettings());
  EXPECT_TRUE(problems.empty()) << absl::StrJoin(problems, "\n");
}

TEST(ConfigurationDocsTest, TheSenderLoaderReadsItsTable) {
  const auto read = Read([](const Env& env) { return LoadSenderConfig(env); }, kSenderEnvs);
  ASSERT_GT(read.size(), 20u);
  const auto problems = NotInTable(read, SenderSettings());
  EXPECT_TRUE(problems.empty()) << absl::StrJoin(problems, "\n");
}

// A variable read without a row, or with a default of the loader's own, is found.
TEST(ConfigurationDocsTest, AReadOutsideTheTableIsFound) {
  std::map<std::string, Env::Setting> read = {
      {"MAILROOM_NEW_SETTING", {"MAILROOM_NEW_SETTING", "5", "1", "10"}},
      {"MAILROOM_BATCH_LIMIT", {"MAILROOM_BATCH_LIMIT", "11", "1", "10000"}}};
  EXPECT_EQ(absl::StrJoin(NotInTable(read, CollectorSettings()), "\n"),
            "MAILROOM_BATCH_LIMIT: the loader's default is \"11\", the table's \"10\"\n"
            "MAILROOM_NEW_SETTING: read by the loader, not in the settings table");
}

}  // namespace
}  // namespace mailroom
