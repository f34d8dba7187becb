#include "sender/render/template_pool.h"

#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace mailroom {
namespace {

kainjow::mustache::data Vars(const std::string& name) {
  kainjow::mustache::data d;
  d.set("name", name);
  return d;
}

TEST(TemplatePoolTest, EscapesOnlyWhenAsked) {
  TemplatePool html("<p>{{name}}</p>\n", /*escape=*/true);
  TemplatePool text("Hi {{name}}\n", /*escape=*/false);
  bool ok = true;
  EXPECT_EQ(html.Render(Vars("a<b&\"c\""), &ok), "<p>a&lt;b&amp;&quot;c&quot;</p>\n");
  EXPECT_EQ(text.Render(Vars("a<b&\"c\""), &ok), "Hi a<b&\"c\"\n");
  EXPECT_TRUE(ok);
}

TEST(TemplatePoolTest, ReusesOneInstanceForSequentialRenders) {
  TemplatePool t("{{#name}}x{{name}}{{/name}}", /*escape=*/false);
  bool ok = true;
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(t.Render(Vars(std::to_string(i)), &ok), "x" + std::to_string(i));
  }
  EXPECT_TRUE(ok);
  EXPECT_EQ(t.idle(), 1u);
}

TEST(TemplatePoolTest, ConcurrentRendersEachGetTheirOwnResult) {
  TemplatePool t("{{name}}:{{name}}", /*escape=*/true);
  constexpr int kThreads = 8, kRenders = 2000;
  std::vector<std::thread> threads;
  std::vector<int> wrong(kThreads, 0);
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      for (int i = 0; i < kRenders; ++i) {
        const std::string v = std::to_string(th * kRenders + i);
        bool ok = true;
        if (t.Render(Vars(v), &ok) != v + ":" + v || !ok) ++wrong[th];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int th = 0; th < kThreads; ++th) EXPECT_EQ(wrong[th], 0) << "thread " << th;
  EXPECT_GE(t.idle(), 1u);
  EXPECT_LE(t.idle(), static_cast<size_t>(kThreads));
}

TEST(TemplatePoolTest, NamesAreTheTagsTheLibraryReads) {
  TemplatePool t("Hi {{ login }}{{! a comment, {{not_a_name }} {{{product_name}}} {{& link}}"
                 "{{#section}}{{inner.dotted}}{{/section}}{{^missing}}-{{/missing}}{{>part}}"
                 "{{=<% %>=}}<%after%> {{ignored}}<%={{ }}=%>{{last}}",
                 /*escape=*/false);
  ASSERT_TRUE(t.valid()) << t.error();
  EXPECT_EQ(t.names(), (std::set<std::string>{"login", "product_name", "link", "section",
                                              "inner.dotted", "missing", "part", "after", "last"}));
  EXPECT_TRUE(t.Uses("inner"));
  EXPECT_TRUE(t.Uses("after"));
  EXPECT_FALSE(t.Uses("ignored"));  // text while the delimiters were <% %>
  EXPECT_FALSE(t.Uses("not_a_name"));
  EXPECT_FALSE(t.Uses("log"));
  EXPECT_TRUE(TemplatePool("{{#open}}never closed", false).names().empty());
}

TEST(TemplatePoolTest, AParseErrorIsReported) {
  TemplatePool t("{{#open}}never closed", /*escape=*/false);
  EXPECT_FALSE(t.valid());
  EXPECT_NE(t.error().find("open"), std::string::npos) << t.error();
}

TEST(TemplatePoolTest, ARenderErrorClearsOkAndDropsTheInstance) {
  // A partial that does not parse is an error only when rendered.
  TemplatePool t("a{{>bad}}b", /*escape=*/false);
  ASSERT_TRUE(t.valid());
  kainjow::mustache::data d;
  d.set("bad", kainjow::mustache::partial([] { return std::string("{{#x}}"); }));
  bool ok = true;
  EXPECT_EQ(t.Render(d, &ok), "");
  EXPECT_FALSE(ok);
  EXPECT_EQ(t.idle(), 0u);
  ok = true;
  EXPECT_EQ(t.Render(Vars("n"), &ok), "ab");  // a fresh copy: the failed one is not reused
  EXPECT_TRUE(ok);
  EXPECT_EQ(t.idle(), 1u);
}

}  // namespace
}  // namespace mailroom
