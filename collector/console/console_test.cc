// The console's parts without a browser: forms and escaping, sessions on the simulated clock,
// the charts' figures, and the handler's sign-in, CSRF, origin and scope checks over an
// in-memory Store and a recording OperatorStore. The browser test
// (integration_tests/console_test) drives the real pages against the real services.
#include "collector/console/console.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "collector/console/form.h"
#include "collector/console/pages.h"
#include "collector/console/sessions.h"
#include "collector/store/testing/fake_store.h"
#include "common/testing/fake_clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(FormTest, DecodesFieldsAndEscapesText) {
  auto f = ParseForm("a=1&b=x+y%20z&c=%3Cb%3E&a=2&bad=%zz&empty");
  EXPECT_EQ(f["a"], "1");  // the first of a repeated field
  EXPECT_EQ(f["b"], "x y z");
  EXPECT_EQ(f["c"], "<b>");
  EXPECT_EQ(f["bad"], "%zz");
  EXPECT_EQ(f["empty"], "");
  EXPECT_EQ(QueryEscape("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
  EXPECT_EQ(HtmlEscape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
}

TEST(ConsoleSessionsTest, ASessionLastsItsTtlAndAFullTableRefusesNewOnes) {
  FakeClock clock(absl::FromUnixSeconds(1795425300));
  ConsoleSessions sessions(absl::Hours(8), 2, &clock);
  Principal p;
  p.credential = "token 1";
  const std::string a = sessions.Begin(p);
  EXPECT_EQ(a.size(), 64u);
  auto found = sessions.Find(a);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->principal.credential, "token 1");
  EXPECT_EQ(found->csrf.size(), 32u);
  EXPECT_FALSE(sessions.Find(std::string(64, 'f')).has_value());  // an id never issued
  clock.Advance(absl::Hours(1));
  const std::string b = sessions.Begin(p);
  EXPECT_EQ(sessions.Begin(p), "");  // full: refused, nobody signed out
  EXPECT_TRUE(sessions.Find(a).has_value());
  EXPECT_TRUE(sessions.Find(b).has_value());
  clock.Advance(absl::Hours(7));  // a's 8 hours are over, b's not
  EXPECT_FALSE(sessions.Find(a).has_value());
  EXPECT_TRUE(sessions.Find(b).has_value());
  const std::string c = sessions.Begin(p);  // a's place is free again
  EXPECT_FALSE(c.empty());
  sessions.End(b);
  sessions.End(c);
  EXPECT_EQ(sessions.size(), 0u);
}

TEST(ConsoleSessionsTest, ACredentialMakesRoomOnlyAmongItsOwnSessions) {
  FakeClock clock(absl::FromUnixSeconds(1795425300));
  ConsoleSessions sessions(absl::Hours(8), ConsoleSessions::kPerCredential + 1, &clock);
  Principal victim, flooder;
  victim.credential = "token 1";
  flooder.credential = "token 2";
  const std::string kept = sessions.Begin(victim);
  std::string last;
  for (size_t i = 0; i < 3 * ConsoleSessions::kPerCredential; ++i) {
    clock.Advance(absl::Seconds(1));
    last = sessions.Begin(flooder);
    ASSERT_FALSE(last.empty());
  }
  EXPECT_TRUE(sessions.Find(kept).has_value());  // never signed out by another credential
  EXPECT_TRUE(sessions.Find(last).has_value());
  EXPECT_EQ(sessions.size(), ConsoleSessions::kPerCredential + 1);
  // Full: a third credential is refused rather than anyone signed out.
  Principal third;
  third.credential = "token 3";
  EXPECT_EQ(sessions.Begin(third), "");
  EXPECT_TRUE(sessions.Find(kept).has_value());
}

TEST(ChartsTest, TheBarsCarryTheFiguresTheyDraw) {
  std::vector<HourRow> hours = {{3600, 10, 9, 1, 0}, {7200, 0, 0, 0, 0}, {10800, 40, 38, 2, 1}};
  const std::string svg = HourlyChart(hours);
  EXPECT_THAT(svg, HasSubstr("data-hour=\"10800\" data-sent=\"40\" data-bounced=\"2\""));
  EXPECT_THAT(svg, HasSubstr("data-hour=\"3600\" data-sent=\"10\" data-bounced=\"1\""));
  EXPECT_THAT(svg, HasSubstr("peak 40 an hour"));
  GroupBudgetRow b;
  b.month = "2026-12";
  b.monthly_budget_micros = 3100000;
  b.committed_micros = 2000000;
  // Half of December gone (15.5 of 31 days): the pace allows half the budget.
  const absl::Time mid = absl::FromCivil(absl::CivilSecond(2026, 12, 16, 12, 0, 0),
                                         absl::UTCTimeZone());
  const std::string bar = BudgetChart(b, mid);
  EXPECT_THAT(bar, HasSubstr("data-budget=\"3100000\" data-committed=\"2000000\" "
                             "data-spent=\"0\" data-pace=\"1550000\""));
  EXPECT_THAT(bar, HasSubstr("#dc2626"));  // ahead of the pace: red
  b.monthly_budget_micros.reset();
  EXPECT_THAT(BudgetChart(b, mid), HasSubstr("data-unlimited=\"true\""));
}

// An OperatorStore that knows two groups and records the audit (and the fake's suppression
// list).
class TwoGroups : public testing::FakeStore {
 public:
  absl::StatusOr<FoundEmails> FindEmails(const std::string& group, const std::string& address,
                                         uint64_t, int) override {
    FoundEmails f;
    FoundEmail e;
    e.job_id = 7;
    e.action = "activation";
    e.address = address;
    e.state = "bounced";
    e.ledger.push_back({1, "sent", 1000, 1, "sub-01234567", "sandbox", "sbx-1", "sandbox", 0});
    e.ledger.push_back({2, "bounced", 2000, 0, "", "sandbox", "", "<Permanent>", 0});
    f.emails.push_back(e);
    found_group = group;
    return f;
  }
  absl::StatusOr<std::vector<std::string>> Groups() override {
    return std::vector<std::string>{"billing", "mailroom"};
  }
  absl::StatusOr<std::vector<HourRow>> Hourly(const std::string&, int) override {
    return std::vector<HourRow>{{3600, 5, 5, 0, 0}};
  }
  absl::StatusOr<std::vector<TroubleRow>> Trouble(const std::string&, absl::Duration,
                                                  int) override {
    return std::vector<TroubleRow>{
        {9, "bounced", 1000, "<script>x</script>", 7, 1, "activation", "a\"b@example.test"}};
  }
  absl::StatusOr<uint64_t> BeginAudit(const AuditRecord& r) override {
    audited.push_back(r.method + " " + r.group + " " + r.target);
    return audited.size();
  }
  absl::Status EndAudit(uint64_t, const std::string& outcome) override {
    outcomes.push_back(outcome);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<AuditEntryRow>> ListAudit(uint64_t, int) override {
    return std::vector<AuditEntryRow>{};
  }
  std::string found_group;
  std::vector<std::string> audited, outcomes;
};

class ConsoleHandlerTest : public ::testing::Test {
 protected:
  ConsoleHandlerTest()
      : auth_(*ParseCredentials({"operator-token-0123456789@*:operator",
                                 "group-operator-token-0123456789@billing:operator",
                                 "sender-token-0123456789@mailroom:sender",
                                 "legacy-unscoped-token-0123456789"},
                                "MAILROOM_SUBSCRIBER_TOKENS"),
              false),
        sessions_(absl::Hours(8), 10, &clock_),
        console_(&auth_, &operators_, nullptr, &sessions_, &clock_) {}

  HttpReply Get(const std::string& path, const std::string& query = "",
                const std::string& cookie = "") {
    HttpRequest r{path, {{"Host", "console.test"}}, "", "GET", query};
    if (!cookie.empty()) r.headers.emplace_back("Cookie", "mailroom_console=" + cookie);
    return console_.Handle(r);
  }
  HttpReply Post(const std::string& path, const std::string& body, const std::string& cookie = "",
                 const std::string& origin = "http://console.test") {
    HttpRequest r{path, {{"Host", "console.test"}, {"Origin", origin}}, body, "POST", ""};
    if (!cookie.empty()) r.headers.emplace_back("Cookie", "mailroom_console=" + cookie);
    return console_.Handle(r);
  }
  // Signs in with `token`; returns the session's cookie value ("" when refused).
  std::string SignIn(const std::string& token) {
    HttpReply r = Post("/login", "token=" + QueryEscape(token));
    const size_t at = r.headers.find("mailroom_console=");
    if (r.status != 303 || at == std::string::npos) return "";
    return r.headers.substr(at + 17, 64);
  }
  std::string Csrf(const std::string& cookie) { return sessions_.Find(cookie)->csrf; }

  FakeClock clock_{absl::FromUnixSeconds(1795425300)};
  Authenticator auth_;
  TwoGroups operators_;
  ConsoleSessions sessions_;
  ConsoleHandler console_;
};

TEST_F(ConsoleHandlerTest, AStrangerGetsTheSignInFormAndNothingElse) {
  HttpReply home = Get("/");
  EXPECT_EQ(home.status, 200);
  EXPECT_THAT(home.body, HasSubstr("name=\"token\""));
  EXPECT_THAT(home.headers, HasSubstr("Content-Security-Policy: default-src 'none'"));
  EXPECT_EQ(Get("/emails", "group=mailroom&address=a%40b.test").status, 303);  // to sign in
  EXPECT_EQ(Get("/emails", "group=mailroom&address=a%40b.test", std::string(64, 'a')).status, 303);
  EXPECT_EQ(Post("/suppressions/remove", "address=a%40b.test&reason=x").status, 403);
  EXPECT_EQ(SignIn("wrong-token-0123456789"), "");
  EXPECT_EQ(SignIn("sender-token-0123456789"), "");           // not an operator
  EXPECT_EQ(SignIn("legacy-unscoped-token-0123456789"), "");  // not scoped :operator
  EXPECT_TRUE(operators_.audited.empty());
}

TEST_F(ConsoleHandlerTest, APostNeedsOneOriginOfThisHostAndScheme) {
  const std::string cookie = SignIn("operator-token-0123456789");
  ASSERT_EQ(cookie.size(), 64u);
  const std::string form = "csrf=" + Csrf(cookie);
  EXPECT_EQ(Post("/logout", form, cookie, "null").status, 403);
  EXPECT_EQ(Post("/logout", form, cookie, "https://console.test").status, 403);  // not https
  EXPECT_EQ(Post("/logout", form, cookie, "http://console.test.evil").status, 403);
  HttpRequest none{"/logout", {{"Host", "console.test"}}, form, "POST", ""};
  none.headers.emplace_back("Cookie", "mailroom_console=" + cookie);
  EXPECT_EQ(console_.Handle(none).status, 403);  // no Origin
  HttpRequest twice = none;
  twice.headers.emplace_back("Origin", "http://console.test");
  twice.headers.emplace_back("Origin", "http://console.test");
  EXPECT_EQ(console_.Handle(twice).status, 403);    // two Origins
  EXPECT_TRUE(sessions_.Find(cookie).has_value());  // still signed in
  EXPECT_EQ(Post("/logout", form, cookie).status, 303);
}

TEST_F(ConsoleHandlerTest, TheCookieIsHttpOnlyStrictAndBehindTlsSecureAndHostBound) {
  HttpReply plain = Post("/login", "token=operator-token-0123456789");
  EXPECT_THAT(plain.headers, HasSubstr("Set-Cookie: mailroom_console="));
  EXPECT_THAT(plain.headers, HasSubstr("; Path=/; Max-Age=28800; HttpOnly; SameSite=Strict\r\n"));
  HttpRequest tls{"/login",
                  {{"Host", "console.test"},
                   {"Origin", "https://console.test"},
                   {"X-Forwarded-Proto", "https"}},
                  "token=operator-token-0123456789",
                  "POST",
                  ""};
  HttpReply secure = console_.Handle(tls);
  EXPECT_EQ(secure.status, 303);
  EXPECT_THAT(secure.headers, HasSubstr("Set-Cookie: __Host-mailroom_console="));
  EXPECT_THAT(secure.headers, HasSubstr("; HttpOnly; SameSite=Strict; Secure\r\n"));
  // Behind TLS the plain cookie is not read (anything on the host could have set it).
  const size_t at = secure.headers.find("__Host-mailroom_console=");
  const std::string id = secure.headers.substr(at + 24, 64);
  HttpRequest page{"/", {{"Host", "console.test"}, {"X-Forwarded-Proto", "https"}}, "", "GET", ""};
  page.headers.emplace_back("Cookie", "mailroom_console=" + id);
  EXPECT_EQ(console_.Handle(page).body, SignInPage(""));
  page.headers.back().second = "__Host-mailroom_console=" + id;
  EXPECT_THAT(console_.Handle(page).body, HasSubstr("Sign out"));
}

TEST_F(ConsoleHandlerTest, AnOperatorSignsInSearchesAndRemovesWithTheFormsToken) {
  const std::string cookie = SignIn("operator-token-0123456789");
  ASSERT_EQ(cookie.size(), 64u);
  HttpReply home = Get("/", "", cookie);
  EXPECT_EQ(home.status, 200);
  EXPECT_THAT(home.body, HasSubstr("data-sent=\"5\""));
  EXPECT_THAT(home.body, HasSubstr(Csrf(cookie)));
  // Texts from the database are escaped, in the tables and in links.
  EXPECT_THAT(home.body, HasSubstr("&lt;script&gt;x&lt;/script&gt;"));
  EXPECT_THAT(home.body, Not(HasSubstr("<script>")));
  EXPECT_THAT(home.body, HasSubstr("address=a%22b%40example.test"));
  EXPECT_THAT(home.body, HasSubstr("a&quot;b@example.test"));
  // Reading the failures and the suppression list is audited.
  ASSERT_EQ(operators_.audited.size(), 2u);
  EXPECT_EQ(operators_.audited[0], "ListFailures (console) billing the last 24 hours");
  EXPECT_EQ(operators_.audited[1], "ListSuppressions (console)  the first 100");
  operators_.audited.clear();
  HttpReply emails = Get("/emails", "group=mailroom&address=Ann%40Example.test", cookie);
  EXPECT_EQ(emails.status, 200);
  EXPECT_THAT(emails.body, HasSubstr("ann@example.test"));
  EXPECT_THAT(emails.body, HasSubstr("&lt;Permanent&gt;"));  // escaped
  EXPECT_THAT(emails.body, Not(HasSubstr("<Permanent>")));
  EXPECT_EQ(operators_.found_group, "mailroom");
  ASSERT_EQ(operators_.audited.size(), 1u);
  EXPECT_EQ(operators_.audited[0], "FindEmails (console) mailroom ann@example.test");

  SuppressionRow s;
  s.address = "ann@example.test";
  s.reason = "hard_bounce";
  ASSERT_TRUE(operators_.AddSuppression(s).ok());
  // Without the session's token, or from another origin: refused, nothing removed.
  EXPECT_EQ(Post("/suppressions/remove", "address=ann%40example.test&reason=fixed", cookie).status,
            403);
  EXPECT_EQ(Post("/suppressions/remove",
                 "csrf=" + Csrf(cookie) + "&address=ann%40example.test&reason=fixed", cookie,
                 "https://evil.test")
                .status,
            403);
  EXPECT_EQ(operators_.ListSuppressions({"", "", "", 10})->size(), 1u);
  HttpReply removed = Post("/suppressions/remove",
                           "csrf=" + Csrf(cookie) +
                               "&address=ann%40example.test&reason=fixed&back=%2F%2Fevil.test",
                           cookie);
  EXPECT_EQ(removed.status, 303);
  EXPECT_THAT(removed.headers, HasSubstr("Location: /?notice="));  // not to another host
  EXPECT_THAT(removed.headers, Not(HasSubstr("ann%40")));          // no address in the URL
  EXPECT_TRUE(operators_.ListSuppressions({"", "", "", 10})->empty());
  EXPECT_EQ(operators_.audited.back(),
            "RemoveSuppression (console)  ann@example.test reason fixed");
  EXPECT_EQ(operators_.outcomes.back(), "OK: removed hard_bounce");

  HttpReply out = Post("/logout", "csrf=" + Csrf(cookie), cookie);
  EXPECT_EQ(out.status, 303);
  EXPECT_THAT(out.headers, HasSubstr("Max-Age=0"));
  EXPECT_EQ(Get("/", "", cookie).body, SignInPage(""));
}

TEST_F(ConsoleHandlerTest, AGroupOperatorSeesOnlyItsGroupAndNoSuppressionList) {
  const std::string cookie = SignIn("group-operator-token-0123456789");
  ASSERT_EQ(cookie.size(), 64u);
  HttpReply home = Get("/", "", cookie);
  EXPECT_EQ(home.status, 200);
  EXPECT_THAT(home.body, HasSubstr("billing"));
  EXPECT_THAT(home.body, Not(HasSubstr("group=mailroom")));
  EXPECT_THAT(home.body, Not(HasSubstr("Suppressed addresses")));
  EXPECT_EQ(Get("/", "group=mailroom", cookie).status, 403);
  EXPECT_EQ(Get("/emails", "group=mailroom&address=a%40b.test", cookie).status, 403);
  EXPECT_EQ(Post("/suppressions/remove", "csrf=" + Csrf(cookie) + "&address=a%40b.test&reason=x",
                 cookie)
                .status,
            403);
  // Its own group's failures were read (and audited); nothing of another group's.
  EXPECT_THAT(operators_.audited,
              ::testing::ElementsAre("ListFailures (console) billing the last 24 hours"));
}

}  // namespace
}  // namespace mailroom
