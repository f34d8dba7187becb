// ParseFlags over flags defined here, as a tool's main.cc defines them.
#include "common/flags.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(std::string, name, "", "a string");
ABSL_FLAG(int, count, 3, "an integer");
ABSL_FLAG(bool, loud, false, "a boolean");
ABSL_FLAG(int, max_depth, 1, "an integer whose name has an underscore");
ABSL_FLAG(std::vector<std::string>, items, {}, "a list");
ABSL_FLAG(mailroom::IntList, sizes, (mailroom::IntList{{100, 2000}}), "integers");

namespace mailroom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

absl::StatusOr<CommandLine> Parse(std::vector<std::string> words) {
  words.insert(words.begin(), "tool");
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  return ParseFlags(static_cast<int>(argv.size()), argv.data());
}

class FlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::SetFlag(&FLAGS_name, "");
    absl::SetFlag(&FLAGS_count, 3);
    absl::SetFlag(&FLAGS_loud, false);
    absl::SetFlag(&FLAGS_items, {});
  }
};

TEST_F(FlagsTest, EveryFormSetsItsFlag) {
  auto c = Parse({"up", "--name=a=b", "--count", "12", "--loud", "--items=x,y", "7"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(absl::GetFlag(FLAGS_name), "a=b");
  EXPECT_EQ(absl::GetFlag(FLAGS_count), 12);
  EXPECT_TRUE(absl::GetFlag(FLAGS_loud));
  EXPECT_THAT(absl::GetFlag(FLAGS_items), ElementsAre("x", "y"));
  EXPECT_THAT(c->args, ElementsAre("up", "7"));
  EXPECT_THAT(c->given, ElementsAre("count", "items", "loud", "name"));
  EXPECT_FALSE(c->help);
}

TEST_F(FlagsTest, DashesInANameAreItsUnderscores) {
  auto c = Parse({"--max-depth=5"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(absl::GetFlag(FLAGS_max_depth), 5);
  EXPECT_THAT(c->given, ElementsAre("max_depth"));
  c = Parse({"--max-depth", "6"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(absl::GetFlag(FLAGS_max_depth), 6);
  auto unknown = Parse({"--max-width=4"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("max_width"));
  EXPECT_THAT(unknown.status().message(), Not(HasSubstr("4")));
}

TEST_F(FlagsTest, NegatedBoolEmptyValueHelpAndTheEndOfFlags) {
  absl::SetFlag(&FLAGS_loud, true);
  auto c = Parse({"--noloud", "--name=", "-h", "--", "--count=9"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(absl::GetFlag(FLAGS_loud));
  EXPECT_EQ(absl::GetFlag(FLAGS_name), "");
  EXPECT_THAT(c->given, ElementsAre("loud", "name"));
  EXPECT_TRUE(c->help);
  EXPECT_THAT(c->args, ElementsAre("--count=9"));
  EXPECT_EQ(absl::GetFlag(FLAGS_count), 3);
}

TEST_F(FlagsTest, ErrorsNameTheFlagNeverTheValue) {
  auto unknown = Parse({"--nmae=secret-value"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(), "--nmae: unknown flag");
  auto bad = Parse({"--count=secret-value"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "--count: not a valid value (default 3)");
  EXPECT_THAT(std::string(bad.status().message()), Not(HasSubstr("secret")));
  EXPECT_EQ(Parse({"--count"}).status().message(), "--count: needs a value");
  EXPECT_EQ(Parse({"--loud=maybe"}).status().message(),
            "--loud: not a valid boolean (default false)");
  EXPECT_EQ(Parse({"--nocount"}).status().message(), "--nocount: unknown flag");
}

TEST_F(FlagsTest, IntegerLists) {
  ASSERT_TRUE(Parse({"--sizes=5,60,700"}).ok());
  EXPECT_THAT(absl::GetFlag(FLAGS_sizes).values, ElementsAre(5, 60, 700));
  ASSERT_TRUE(Parse({"--sizes="}).ok());
  EXPECT_THAT(absl::GetFlag(FLAGS_sizes).values, ElementsAre());
  EXPECT_EQ(Parse({"--sizes=5,x"}).status().message(),
            "--sizes: not a valid value (default 100,2000)");
}

TEST_F(FlagsTest, HelpListsEveryFlagWithItsDefault) {
  const std::string help = FlagsHelp();
  EXPECT_THAT(help, HasSubstr("  --count=3  an integer\n"));
  EXPECT_THAT(help, HasSubstr("  --loud=false  a boolean\n"));
  EXPECT_LT(help.find("--count"), help.find("--name"));
}

}  // namespace
}  // namespace mailroom
