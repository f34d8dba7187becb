// ParseForm, QueryEscape and HtmlEscape against hostile input: escapes at the end of the text,
// over-long fields, too many fields, and markup that must come out inert.
#include "collector/console/form.h"

#include <string>

#include "gtest/gtest.h"

namespace mailroom {
namespace {

TEST(ParseFormTest, KeepsAnEscapeCutShortAtTheEndAsItIs) {
  auto f = ParseForm("a=%4&b=%&c=%41");
  EXPECT_EQ(f["a"], "%4");
  EXPECT_EQ(f["b"], "%");
  EXPECT_EQ(f["c"], "A");
}

TEST(ParseFormTest, DecodesAnEscapedAmpersandAndEqualsInsideAValue) {
  auto f = ParseForm("q=a%26b%3Dc&n%61me=v=w");
  EXPECT_EQ(f.size(), 2u);
  EXPECT_EQ(f["q"], "a&b=c");
  EXPECT_EQ(f["name"], "v=w");
}

TEST(ParseFormTest, DropsAFieldOver4096BytesAndKeepsOneAtTheLimit) {
  const std::string at_limit = "a=" + std::string(4094, 'x');
  const std::string over = "b=" + std::string(4095, 'y');
  auto f = ParseForm(at_limit + "&" + over + "&c=1");
  EXPECT_EQ(f["a"].size(), 4094u);
  EXPECT_EQ(f.count("b"), 0u);
  EXPECT_EQ(f["c"], "1");
}

TEST(ParseFormTest, DropsEveryFieldAfterThe64th) {
  std::string text;
  for (int i = 0; i < 70; ++i) text += "f" + std::to_string(i) + "=1&";
  auto f = ParseForm(text);
  EXPECT_EQ(f.size(), 64u);
  EXPECT_EQ(f.count("f63"), 1u);
  EXPECT_EQ(f.count("f64"), 0u);
}

TEST(ParseFormTest, KeepsTheFirstOfARepeatedFieldEvenWhenItIsEmpty) {
  auto f = ParseForm("csrf=&csrf=forged");
  EXPECT_EQ(f["csrf"], "");
}

TEST(ParseFormTest, DecodesANulByteIntoTheValue) {
  auto f = ParseForm("a=x%00y");
  EXPECT_EQ(f["a"], std::string("x\0y", 3));
}

TEST(QueryEscapeTest, EscapesEveryByteButTheUnreservedOnes) {
  EXPECT_EQ(QueryEscape("AZaz09-_.~"), "AZaz09-_.~");
  EXPECT_EQ(QueryEscape(std::string("\0\xff +%", 5)), "%00%FF%20%2B%25");
  EXPECT_EQ(ParseForm("v=" + QueryEscape("a&b=c+d%")).at("v"), "a&b=c+d%");
}

TEST(HtmlEscapeTest, LeavesNoMarkupOrQuoteFromAnAttackersValue) {
  const std::string out = HtmlEscape("\"><script>alert('x')</script><a b='");
  EXPECT_EQ(out.find_first_of("<>\"'"), std::string::npos) << out;
  EXPECT_EQ(HtmlEscape("&lt;"), "&amp;lt;");
  EXPECT_EQ(HtmlEscape(""), "");
}

}  // namespace
}  // namespace mailroom
