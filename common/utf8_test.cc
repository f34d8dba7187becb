#include "common/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace mailroom {
namespace {

TEST(Utf8, RecognisesWellFormedSequencesOnly) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x93\xa7"));  // é € 📧
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));                                  // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));                              // surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));                          // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xc3"));                                      // cut short
  EXPECT_FALSE(IsValidUtf8("\xff\xfe"));
  EXPECT_TRUE(IsValidUtf8(std::string("a\0b", 3)));  // NUL is valid UTF-8
}

TEST(Utf8, PrefixEndsOnACharacterBoundary) {
  const std::string s = std::string(999, 'x') + "\xc3\xa9";  // 1001 bytes
  EXPECT_EQ(Utf8Prefix(s, 1000).size(), 999u);
  EXPECT_EQ(Utf8Prefix(s, 1001).size(), 1001u);
  EXPECT_EQ(Utf8Prefix("\xe2\x82\xac", 2), "");
}

TEST(Utf8, SanitizeRepairsControlsAndCuts) {
  EXPECT_EQ(SanitizeUtf8("550 5.1.1 <x>: user unknown", 1000), "550 5.1.1 <x>: user unknown");
  EXPECT_EQ(SanitizeUtf8("a\xffz", 1000), "a\xef\xbf\xbdz");
  EXPECT_EQ(SanitizeUtf8(std::string("a\0b\r\nc\td", 8), 1000), "a b  c\td");
  EXPECT_EQ(SanitizeUtf8(std::string(999, 'x') + "\xc3\xa9", 1000).size(), 999u);
  EXPECT_TRUE(IsValidUtf8(SanitizeUtf8("\xc3\x28\xa0\xa1\xe2\x28\xa1", 1000)));
}

}  // namespace
}  // namespace mailroom
