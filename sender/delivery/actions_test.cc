#include "sender/delivery/actions.h"

#include <string>

#include "gtest/gtest.h"

namespace mailroom {
namespace {

TEST(ActionsTest, TheBuiltinNoticesAreTheFourWithoutAToken) {
  int notices = 0;
  for (const std::string& a : BuiltinActions()) notices += IsBuiltinNotice(a) ? 1 : 0;
  EXPECT_EQ(BuiltinActions().size(), 9u);
  EXPECT_EQ(notices, 4);
  EXPECT_FALSE(IsBuiltinNotice("activation"));
  EXPECT_FALSE(IsBuiltinNotice("password_recovery"));
  EXPECT_TRUE(IsBuiltinNotice("account_reactivated"));
  EXPECT_FALSE(IsBuiltinNotice("account_reactivated_"));
  EXPECT_FALSE(IsBuiltinNotice(""));
}

// The values themselves are checked against the database's seed rows by the migrations' tests;
// here: an action of the application's own gets the table's defaults.
TEST(ActionsTest, AnActionOutsideTheSeedsGetsTheTablesDefaults) {
  const ActionRules own = DefaultActionRules("welcome_back");
  EXPECT_EQ(own.code_length, 6);
  EXPECT_EQ(own.expiry, absl::Hours(24));
  EXPECT_EQ(DefaultActionRules("password_recovery").code_length, 5);
  EXPECT_EQ(DefaultActionRules("password_changed").expiry, absl::Hours(24));
}

TEST(ActionsTest, ASampleCodeHasTheDigitsAskedForWithinOneToTwelve) {
  EXPECT_EQ(SampleCode(6), "123456");
  EXPECT_EQ(SampleCode(12), "123456789012");
  EXPECT_EQ(SampleCode(0), "1");
  EXPECT_EQ(SampleCode(-5), "1");
  EXPECT_EQ(SampleCode(40), "123456789012");
}

TEST(ActionsTest, ActionNamesFollowTheDatabasesRule) {
  EXPECT_TRUE(ValidActionName("a"));
  EXPECT_TRUE(ValidActionName("login_code2"));
  EXPECT_TRUE(ValidActionName(std::string(63, 'a')));
  EXPECT_FALSE(ValidActionName(std::string(64, 'a')));
  EXPECT_FALSE(ValidActionName(""));
  EXPECT_FALSE(ValidActionName("2fa"));
  EXPECT_FALSE(ValidActionName("_x"));
  EXPECT_FALSE(ValidActionName("Login"));
  EXPECT_FALSE(ValidActionName("a-b"));
  EXPECT_FALSE(ValidActionName("a b"));
  EXPECT_FALSE(ValidActionName("a\n"));
}

TEST(ActionsTest, AJobsActionIsItsNameThenItsEnumThenNothing) {
  v1::Job job;
  EXPECT_EQ(JobActionName(job), "");
  job.set_action(v1::ACTION_PASSWORD_RECOVERY);
  EXPECT_EQ(JobActionName(job), "password_recovery");
  job.set_action(v1::ACTION_ACTIVATION);
  EXPECT_EQ(JobActionName(job), "activation");
  job.set_action_name("invitation");
  EXPECT_EQ(JobActionName(job), "invitation");
  job.clear_action_name();
  job.set_action(v1::ACTION_OTHER);
  EXPECT_EQ(JobActionName(job), "");
}

}  // namespace
}  // namespace mailroom
