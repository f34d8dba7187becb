#include "common/names.h"

#include <string>

#include "gtest/gtest.h"

namespace mailroom {
namespace {

TEST(ValidGroupNameTest, AcceptsLowercaseNamesUpTo63Characters) {
  EXPECT_TRUE(ValidGroupName("mailroom"));
  EXPECT_TRUE(ValidGroupName("a"));
  EXPECT_TRUE(ValidGroupName("group-a_2"));
  EXPECT_TRUE(ValidGroupName(std::string(63, 'x')));
}

TEST(ValidGroupNameTest, RejectsEverythingElse) {
  EXPECT_FALSE(ValidGroupName(""));
  EXPECT_FALSE(ValidGroupName(std::string(64, 'x')));
  EXPECT_FALSE(ValidGroupName("1group"));  // must start with a letter
  EXPECT_FALSE(ValidGroupName("-group"));
  EXPECT_FALSE(ValidGroupName("_group"));
  EXPECT_FALSE(ValidGroupName("Group"));
  EXPECT_FALSE(ValidGroupName("Bad Group!"));
  EXPECT_FALSE(ValidGroupName("a.b"));
  EXPECT_FALSE(ValidGroupName(std::string("a\0b", 3)));
  EXPECT_FALSE(ValidGroupName("gr\xc3\xbcn"));  // non-ASCII
}

}  // namespace
}  // namespace mailroom
