// The console's pages against hostile values: every text an attacker can put in a page (an
// address, a reason, a group's name, a provider's message id, a credential's name, a ledger's
// detail) comes out HTML-escaped wherever it is rendered, attribute or text; the charts draw
// exactly the figures they are given; empty inputs render whole pages.
#include "collector/console/pages.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// How many times `needle` occurs in `haystack` (not overlapping).
int Count(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

// A value that breaks out of text and of either kind of quoted attribute, tagged with `tag`
// so each field's rendering can be counted on its own.
std::string Hostile(const std::string& tag) {
  return absl::StrCat("<script>", tag, "</script>\"'&<svg onload=", tag, ">");
}

// Hostile(tag) as HTML must show it, written out by hand (not through HtmlEscape).
std::string Escaped(const std::string& tag) {
  return absl::StrCat("&lt;script&gt;", tag, "&lt;/script&gt;&quot;&#39;&amp;&lt;svg onload=", tag,
                      "&gt;");
}

// Hostile(tag) as QueryEscape must show it in a link.
std::string QueryEscaped(const std::string& tag) {
  return absl::StrCat("%3Cscript%3E", tag, "%3C%2Fscript%3E%22%27%26%3Csvg%20onload%3D", tag,
                      "%3E");
}

// No hostile value got through unescaped: no script, no injected element, no quote that ends
// an attribute early.
void ExpectInert(const std::string& page) {
  EXPECT_THAT(page, Not(HasSubstr("<script")));
  EXPECT_THAT(page, Not(HasSubstr("<svg onload")));
  EXPECT_THAT(page, Not(HasSubstr("</script>\"")));
  EXPECT_THAT(page, Not(HasSubstr("\"'&<")));
}

PageFrame HostileFrame(bool every_group) {
  PageFrame f;
  f.credential = Hostile("cred");
  f.group = Hostile("group");
  f.groups = {Hostile("group"), Hostile("other")};
  f.csrf = Hostile("csrf");
  f.every_group = every_group;
  f.notice = Hostile("notice");
  return f;
}

TEST(PagesTest, TheDashboardEscapesEveryValueFromTheFrameTheTroubleAndTheSuppressions) {
  Dashboard d;
  d.now = absl::FromUnixSeconds(1795425300);
  TroubleRow t;
  t.event = Hostile("event");
  t.at_ms = 1795425300123;
  t.detail = Hostile("detail");
  t.action = Hostile("action");
  t.address = Hostile("addr");
  d.trouble = {t};
  SuppressionRow s;
  s.address = Hostile("saddr");
  s.reason = Hostile("reason");
  s.source = Hostile("source");
  s.first_seen = 1795425300;
  d.suppressions = {s};
  GroupBudgetRow b;
  b.month = Hostile("month");
  b.monthly_budget_micros = 1000;  // the unlimited line: see the test below
  d.budget = b;

  const std::string page = DashboardPage(HostileFrame(true), d);
  ExpectInert(page);
  // The group: the title, its link in the switcher, the search's hidden field and the
  // suppression's remove form; in links only query-escaped.
  EXPECT_EQ(Count(page, Escaped("group")), 4);
  EXPECT_THAT(page, HasSubstr(absl::StrCat("<title>", Escaped("group"), " · mailroom</title>")));
  EXPECT_THAT(page, HasSubstr(absl::StrCat("<strong><a href=\"/?group=", QueryEscaped("group"),
                                           "\">", Escaped("group"), "</a></strong>")));
  EXPECT_THAT(page, HasSubstr(absl::StrCat("<a href=\"/?group=", QueryEscaped("other"), "\">",
                                           Escaped("other"), "</a> ")));
  EXPECT_EQ(Count(page, Escaped("cred")), 1);
  EXPECT_THAT(page, HasSubstr(absl::StrCat("<span class=\"muted\">", Escaped("cred"), "</span>")));
  // The csrf token: the sign-out form and the remove form.
  EXPECT_EQ(Count(page, absl::StrCat("name=\"csrf\" value=\"", Escaped("csrf"), "\"")), 2);
  EXPECT_THAT(page, HasSubstr(absl::StrCat("<p class=\"notice\" id=\"notice\">", Escaped("notice"),
                                           "</p>")));
  EXPECT_THAT(page, HasSubstr(absl::StrCat("<h2>Budget, ", Escaped("month"), "</h2>")));
  // The trouble row: every text escaped, the address's link query-escaped with `&amp;`.
  EXPECT_THAT(page,
              HasSubstr(absl::StrCat("<td class=\"bad\">", Escaped("event"),
                                     "</td><td><a href=\"/emails?group=", QueryEscaped("group"),
                                     "&amp;address=", QueryEscaped("addr"), "\">", Escaped("addr"),
                                     "</a></td><td>", Escaped("action"), "</td><td>",
                                     Escaped("detail"), "</td></tr>")));
  EXPECT_THAT(page, HasSubstr("<td>2026-11-23 09:15:00.123 UTC</td>"));
  // The suppression: its address in the text and the remove form's hidden field.
  EXPECT_THAT(page, HasSubstr(absl::StrCat("<tr><td>", Escaped("saddr"), "</td><td>",
                                           Escaped("reason"), "</td><td>", Escaped("source"),
                                           "</td><td>2026-11-23 09:15:00 UTC</td>")));
  EXPECT_THAT(page, HasSubstr(absl::StrCat("name=\"address\" value=\"", Escaped("saddr"), "\"")));
  EXPECT_THAT(page, HasSubstr(absl::StrCat("name=\"back\" value=\"/?group=", QueryEscaped("group"),
                                           "\"")));
}

// The unlimited budget's line escapes the month as the dashboard's heading does (the month is
// mailroom_group_budget's to_char(..., 'YYYY-MM') today; pages.h promises every text escaped).
TEST(PagesTest, TheUnlimitedBudgetsLineEscapesTheMonth) {
  Dashboard d;
  GroupBudgetRow b;
  b.month = Hostile("month");
  d.budget = b;  // no monthly_budget_micros: unlimited
  const std::string page = DashboardPage(HostileFrame(true), d);
  ExpectInert(page);
  EXPECT_THAT(page, HasSubstr(absl::StrCat("No budget: 0 sent this month (", Escaped("month"),
                                           ").</p>")));
}

TEST(PagesTest, TheEmailsPageEscapesTheAddressTheSuppressionTheEmailAndItsLedger) {
  FoundEmails found;
  SuppressionRow s;
  s.address = Hostile("saddr");
  s.reason = Hostile("reason");
  s.source = Hostile("source");
  s.first_seen = 1795425300;
  found.suppression = s;
  FoundEmail e;
  e.job_id = 42;
  e.account_id = 7;
  e.action = Hostile("action");
  e.state = Hostile("state");
  e.reason = Hostile("ereason");
  e.requested_at = 1795425300;
  e.expires_at = 1795428900;
  e.handouts = 3;
  LedgerEntry l;
  l.event = Hostile("event");
  l.at_ms = 1795425300500;
  l.handout = 2;
  l.provider = Hostile("provider");
  l.provider_message_id = Hostile("msgid");
  l.detail = Hostile("detail");
  e.ledger = {l};
  found.emails = {e};

  const std::string page = EmailsPage(HostileFrame(true), Hostile("addr"), found);
  ExpectInert(page);
  // The address searched: the title and the heading; in the remove form's way back only
  // query-escaped, with the `&` between the fields escaped for the attribute.
  EXPECT_EQ(Count(page, Escaped("addr")), 2);
  EXPECT_THAT(page, HasSubstr(absl::StrCat("<title>", Escaped("addr"), " · mailroom</title>")));
  EXPECT_THAT(page, HasSubstr(absl::StrCat("<section id=\"suppression\"><h2>", Escaped("addr"),
                                           "</h2>")));
  EXPECT_THAT(page,
              HasSubstr(absl::StrCat("name=\"back\" value=\"/emails?group=", QueryEscaped("group"),
                                     "&amp;address=", QueryEscaped("addr"), "\"")));
  EXPECT_THAT(page,
              HasSubstr(absl::StrCat("<p class=\"bad\">Suppressed: ", Escaped("reason"), " (",
                                     Escaped("source"), ") since 2026-11-23 09:15:00 UTC</p>")));
  EXPECT_THAT(page, HasSubstr(absl::StrCat("name=\"address\" value=\"", Escaped("saddr"), "\"")));
  EXPECT_THAT(page, HasSubstr(absl::StrCat("<article class=\"email\" data-job=\"42\" data-state=\"",
                                           Escaped("state"), "\"><h2>", Escaped("action"), ": ",
                                           Escaped("state"), " (", Escaped("ereason"), ")</h2>")));
  EXPECT_THAT(page, HasSubstr("job 42, account 7, requested 2026-11-23 09:15:00 UTC, expires "
                              "2026-11-23 10:15:00 UTC, handed out 3 times"));
  EXPECT_THAT(page,
              HasSubstr(absl::StrCat("<li class=\"event\" data-event=\"", Escaped("event"),
                                     "\">2026-11-23 09:15:00.500 UTC <strong>", Escaped("event"),
                                     "</strong> try 2 via ", Escaped("provider"), " id ",
                                     Escaped("msgid"), ": ", Escaped("detail"), "</li>")));
}

TEST(PagesTest, TheSignInAndErrorPagesEscapeTheirMessage) {
  const std::string sign_in = SignInPage(Hostile("error"));
  ExpectInert(sign_in);
  EXPECT_THAT(sign_in, HasSubstr(absl::StrCat("<p class=\"notice bad\" id=\"notice\">",
                                              Escaped("error"), "</p>")));
  EXPECT_THAT(SignInPage(""), Not(HasSubstr("id=\"notice\"")));

  const std::string error = ErrorPage(404, Hostile("message"));
  ExpectInert(error);
  EXPECT_THAT(error, HasSubstr(absl::StrCat("<h2>404</h2><p>", Escaped("message"), "</p>")));
}

TEST(PagesTest, AnOperatorOfOneGroupSeesNoSuppressionListAndNoRemoveForm) {
  Dashboard d;
  SuppressionRow s;
  s.address = "kept@example.com";
  d.suppressions = {s};
  const std::string dashboard = DashboardPage(HostileFrame(false), d);
  EXPECT_THAT(dashboard, Not(HasSubstr("kept@example.com")));
  EXPECT_THAT(dashboard, Not(HasSubstr("/suppressions/remove")));

  FoundEmails found;
  found.suppression = s;
  const std::string emails = EmailsPage(HostileFrame(false), "kept@example.com", found);
  EXPECT_THAT(emails, HasSubstr("The suppression list is shown to operators of every group."));
  EXPECT_THAT(emails, Not(HasSubstr("/suppressions/remove")));
  EXPECT_THAT(emails, Not(HasSubstr("Suppressed:")));
}

TEST(PagesTest, EmptyInputsRenderWholePages) {
  const std::string dashboard = DashboardPage(PageFrame{}, Dashboard{});
  EXPECT_TRUE(absl::StartsWith(dashboard, "<!DOCTYPE html>"));
  EXPECT_TRUE(absl::EndsWith(dashboard, "</main></body></html>"));
  EXPECT_THAT(dashboard, HasSubstr("<title> · mailroom</title>"));
  EXPECT_THAT(dashboard, HasSubstr("<h2>Sent per hour, the last 0 hours</h2>"));
  EXPECT_THAT(dashboard, HasSubstr("None in the last 24 hours."));
  EXPECT_THAT(dashboard, Not(HasSubstr("id=\"budget\"")));
  EXPECT_THAT(dashboard, Not(HasSubstr("id=\"notice\"")));
  EXPECT_THAT(dashboard, Not(HasSubstr("Suppressed addresses")));

  PageFrame every;
  every.every_group = true;
  Dashboard d;
  d.budget = GroupBudgetRow{};
  const std::string all = DashboardPage(every, d);
  EXPECT_THAT(all, HasSubstr("No address is suppressed."));
  EXPECT_THAT(all, HasSubstr("<p id=\"budget\" data-unlimited=\"true\">No budget: 0 sent"));

  const std::string emails = EmailsPage(every, "", FoundEmails{});
  EXPECT_TRUE(absl::EndsWith(emails, "</section></main></body></html>"));
  EXPECT_THAT(emails, HasSubstr("<p>Not suppressed.</p>"));
  EXPECT_THAT(emails, HasSubstr("<p class=\"muted\">None.</p>"));
  EXPECT_THAT(emails, Not(HasSubstr("<article")));
}

TEST(HourlyChartTest, DrawsEachHoursBarsToTheScaleOfThePeak) {
  // A peak of 20: 10 sent is half the 160-pixel height, 5 bounced a quarter; two bars share
  // the 720-pixel width, 360 each with a pixel of gap either side.
  const std::vector<HourRow> hours = {{3600, 10, 9, 5, 0}, {7200, 20, 20, 0, 0}};
  const std::string svg = HourlyChart(hours);
  EXPECT_EQ(Count(svg, "<rect "), 4);
  EXPECT_EQ(Count(svg, "<rect class=\"sent\""), 2);
  EXPECT_EQ(Count(svg, "<rect class=\"bounced\""), 2);
  EXPECT_THAT(svg, HasSubstr("<title>Emails sent per hour, the last 2 hours</title>"));
  EXPECT_THAT(svg, HasSubstr("<rect class=\"sent\" data-hour=\"3600\" data-sent=\"10\" "
                             "data-bounced=\"5\" x=\"1\" y=\"80\" width=\"358\" height=\"80\" "
                             "fill=\"#3b82f6\"><title>1970-01-01 01:00:00 UTC: 10 sent, 5 "
                             "bounced</title></rect><rect class=\"bounced\" x=\"1\" y=\"120\" "
                             "width=\"358\" height=\"40\" fill=\"#dc2626\"/>"));
  EXPECT_THAT(svg, HasSubstr("<rect class=\"sent\" data-hour=\"7200\" data-sent=\"20\" "
                             "data-bounced=\"0\" x=\"361\" y=\"0\" width=\"358\" height=\"160\""));
  EXPECT_THAT(svg, HasSubstr("<rect class=\"bounced\" x=\"361\" y=\"160\" width=\"358\" "
                             "height=\"0\""));
  EXPECT_THAT(svg, HasSubstr("peak 20 an hour"));
  EXPECT_TRUE(absl::EndsWith(svg, "</text></svg>"));
}

TEST(HourlyChartTest, NoHoursOrOnlyZerosDrawNoHeightAndNoNaN) {
  const std::string empty = HourlyChart({});
  EXPECT_EQ(Count(empty, "<rect"), 0);
  EXPECT_THAT(empty, HasSubstr("the last 0 hours"));
  EXPECT_THAT(empty, HasSubstr("peak 1 an hour"));  // the scale's floor: no division by zero
  EXPECT_TRUE(absl::EndsWith(empty, "</svg>"));

  const std::string zeros = HourlyChart({{3600, 0, 0, 0, 0}});
  EXPECT_EQ(Count(zeros, "height=\"0\""), 2);
  EXPECT_THAT(zeros, HasSubstr("x=\"1\" y=\"160\" width=\"718\" height=\"0\""));
  EXPECT_THAT(zeros, Not(HasSubstr("nan")));
  EXPECT_THAT(zeros, Not(HasSubstr("inf")));
}

absl::Time Utc(int y, int mo, int d) {
  return absl::FromCivil(absl::CivilSecond(y, mo, d, 0, 0, 0), absl::UTCTimeZone());
}

TEST(BudgetChartTest, DrawsTheCommittedShareAndThePaceOfAThirtyDayMonth) {
  GroupBudgetRow b;
  b.month = "2026-11";
  b.monthly_budget_micros = 3000000;
  b.committed_micros = 750000;
  b.spent_micros = 600000;
  b.sent = 12;
  // 15 of November's 30 days gone: the pace is half the budget, at 360 of 720 pixels; a
  // quarter committed is 180 pixels, behind the pace: green.
  const std::string svg = BudgetChart(b, Utc(2026, 11, 16));
  EXPECT_THAT(svg, HasSubstr("data-budget=\"3000000\" data-committed=\"750000\" "
                             "data-spent=\"600000\" data-pace=\"1500000\""));
  EXPECT_THAT(svg, HasSubstr("<rect class=\"committed\" x=\"0\" y=\"8\" width=\"180\" "
                             "height=\"24\" fill=\"#16a34a\"/>"));
  EXPECT_THAT(svg, HasSubstr("<line class=\"pace\" x1=\"360\" x2=\"360\""));
  EXPECT_THAT(svg, HasSubstr("committed 750000 µ (12 sent, 600000 µ) of 3000000 µ; the pace by "
                             "now: 1500000 µ"));
}

TEST(BudgetChartTest, ClampsThePaceToTheMonthAndTheBarToTheBudget) {
  GroupBudgetRow b;
  b.month = "2026-11";
  b.monthly_budget_micros = 1000;
  b.committed_micros = 5000;  // five times the budget: the bar stops at the full width
  const std::string after = BudgetChart(b, Utc(2027, 1, 1));
  EXPECT_THAT(after, HasSubstr("data-pace=\"1000\""));
  EXPECT_THAT(after, HasSubstr("class=\"committed\" x=\"0\" y=\"8\" width=\"720\" height=\"24\" "
                               "fill=\"#dc2626\""));
  EXPECT_THAT(after, HasSubstr("x1=\"720\" x2=\"720\""));

  b.committed_micros = 0;
  const std::string before = BudgetChart(b, Utc(2026, 10, 1));
  EXPECT_THAT(before, HasSubstr("data-pace=\"0\""));
  EXPECT_THAT(before, HasSubstr("class=\"committed\" x=\"0\" y=\"8\" width=\"0\" height=\"24\" "
                                "fill=\"#16a34a\""));
  EXPECT_THAT(before, HasSubstr("x1=\"0\" x2=\"0\""));
}

TEST(BudgetChartTest, AZeroBudgetDrawsNothingAndAnUnlimitedOneIsALine) {
  GroupBudgetRow b;
  b.month = "2026-11";
  b.monthly_budget_micros = 0;
  b.committed_micros = 10;
  const std::string zero = BudgetChart(b, Utc(2026, 11, 16));
  EXPECT_THAT(zero, HasSubstr("data-budget=\"0\" data-committed=\"10\" data-spent=\"0\" "
                              "data-pace=\"0\""));
  EXPECT_THAT(zero, HasSubstr("class=\"committed\" x=\"0\" y=\"8\" width=\"0\""));
  EXPECT_THAT(zero, Not(HasSubstr("nan")));

  b.monthly_budget_micros.reset();
  b.sent = 9;
  EXPECT_EQ(BudgetChart(b, Utc(2026, 11, 16)),
            "<p id=\"budget\" data-unlimited=\"true\">No budget: 9 sent this month (2026-11).</p>");
}

}  // namespace
}  // namespace mailroom
