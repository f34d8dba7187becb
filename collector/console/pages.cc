#include "collector/console/pages.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "collector/console/form.h"

namespace mailroom {
namespace {

constexpr char kStyle[] =
    "body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2430;background:#f6f7f9}"
    "header{background:#1d2430;color:#fff;padding:10px 20px;display:flex;gap:16px;"
    "align-items:center;flex-wrap:wrap}header a{color:#cfe3ff}main{padding:16px 20px}"
    "section{background:#fff;border:1px solid #dde1e6;border-radius:6px;padding:12px 16px;"
    "margin:0 0 16px}h1{font-size:18px;margin:0}h2{font-size:15px;margin:0 0 8px}"
    "table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:4px 6px;"
    "border-bottom:1px solid #eef0f2;vertical-align:top}.notice{background:#fff6d6;"
    "padding:8px 12px;border-radius:4px;margin-bottom:12px}.bad{color:#b3261e}"
    "input[type=password],input[type=search]{padding:4px 6px;width:260px}"
    "input[type=text]{padding:4px 6px;width:150px}"
    "form.inline{display:inline}.muted{color:#667085}ol.timeline{margin:4px 0 0 16px;"
    "padding:0}";

std::string Time(int64_t unix_seconds) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixSeconds(unix_seconds),
                          absl::UTCTimeZone());
}

std::string TimeMs(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%E3S UTC", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

std::string Document(const std::string& title, const std::string& body) {
  return absl::StrCat("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
                      "<meta name=\"viewport\" content=\"width=device-width\"><title>",
                      HtmlEscape(title), " · mailroom</title><style>", kStyle,
                      "</style></head><body>", body, "</body></html>");
}

// The bar over every signed-in page: the group switcher, the search and the sign-out.
std::string Header(const PageFrame& f) {
  std::string groups;
  for (const std::string& g : f.groups) {
    absl::StrAppend(&groups, g == f.group ? "<strong>" : "", "<a href=\"/?group=", QueryEscape(g),
                    "\">", HtmlEscape(g), "</a>", g == f.group ? "</strong>" : "", " ");
  }
  return absl::StrCat(
      "<header><h1>mailroom</h1><nav>groups: ", groups, "</nav>",
      "<form method=\"get\" action=\"/emails\" role=\"search\"><input type=\"hidden\" "
      "name=\"group\" value=\"",
      HtmlEscape(f.group),
      "\"><input type=\"search\" name=\"address\" id=\"address\" placeholder=\"an address\" "
      "aria-label=\"address\"> <button type=\"submit\" id=\"search\">Find emails</button></form>",
      "<span class=\"muted\">", HtmlEscape(f.credential), "</span>",
      "<form method=\"post\" action=\"/logout\" class=\"inline\"><input type=\"hidden\" "
      "name=\"csrf\" value=\"",
      HtmlEscape(f.csrf), "\"><button type=\"submit\">Sign out</button></form></header><main>",
      f.notice.empty()
          ? ""
          : absl::StrCat("<p class=\"notice\" id=\"notice\">", HtmlEscape(f.notice), "</p>"));
}

// A form that removes `address`'s suppression, coming back to `back`.
std::string RemoveForm(const PageFrame& f, const std::string& address, const std::string& back) {
  return absl::StrCat(
      "<form method=\"post\" action=\"/suppressions/remove\" class=\"inline\">"
      "<input type=\"hidden\" name=\"csrf\" value=\"",
      HtmlEscape(f.csrf), "\"><input type=\"hidden\" name=\"group\" value=\"", HtmlEscape(f.group),
      "\"><input type=\"hidden\" name=\"address\" value=\"", HtmlEscape(address),
      "\"><input type=\"hidden\" name=\"back\" value=\"", HtmlEscape(back),
      "\"><input type=\"text\" name=\"reason\" placeholder=\"why\" aria-label=\"reason\" "
      "required> <button type=\"submit\" class=\"remove\">Remove suppression</button></form>");
}

std::string TroubleTable(const PageFrame& f, const std::vector<TroubleRow>& rows) {
  if (rows.empty()) return "<p class=\"muted\">None in the last 24 hours.</p>";
  std::string out = "<table id=\"trouble\"><tr><th>when</th><th>what</th><th>address</th>"
                    "<th>action</th><th>detail</th></tr>";
  for (const TroubleRow& r : rows) {
    absl::StrAppend(&out, "<tr><td>", TimeMs(r.at_ms), "</td><td class=\"bad\">",
                    HtmlEscape(r.event), "</td><td><a href=\"/emails?group=", QueryEscape(f.group),
                    "&amp;address=", QueryEscape(r.address), "\">", HtmlEscape(r.address),
                    "</a></td><td>", HtmlEscape(r.action), "</td><td>", HtmlEscape(r.detail),
                    "</td></tr>");
  }
  return out + "</table>";
}

std::string SuppressionTable(const PageFrame& f, const std::vector<SuppressionRow>& rows) {
  if (rows.empty()) return "<p class=\"muted\">No address is suppressed.</p>";
  std::string out = "<table id=\"suppressions\"><tr><th>address</th><th>reason</th>"
                    "<th>source</th><th>since</th><th></th></tr>";
  for (const SuppressionRow& s : rows) {
    absl::StrAppend(&out, "<tr><td>", HtmlEscape(s.address), "</td><td>", HtmlEscape(s.reason),
                    "</td><td>", HtmlEscape(s.source), "</td><td>", Time(s.first_seen), "</td><td>",
                    RemoveForm(f, s.address, "/?group=" + QueryEscape(f.group)), "</td></tr>");
  }
  return out + "</table>";
}

}  // namespace

std::string HourlyChart(const std::vector<HourRow>& hours) {
  int64_t top = 1;
  for (const HourRow& h : hours) top = std::max({top, h.sent, h.bounced});
  const int width = 720, height = 160, n = std::max<int>(1, static_cast<int>(hours.size()));
  const double bar = static_cast<double>(width) / n;
  std::string out = absl::StrCat("<svg id=\"hourly\" role=\"img\" width=\"", width, "\" height=\"",
                                 height + 20, "\" viewBox=\"0 0 ", width, " ", height + 20,
                                 "\" xmlns=\"http://www.w3.org/2000/svg\"><title>Emails sent "
                                 "per hour, the last ",
                                 hours.size(), " hours</title>");
  for (size_t i = 0; i < hours.size(); ++i) {
    const HourRow& h = hours[i];
    const double hs = static_cast<double>(h.sent) / top * height;
    const double hb = static_cast<double>(h.bounced) / top * height;
    absl::StrAppend(&out, "<rect class=\"sent\" data-hour=\"", h.hour, "\" data-sent=\"", h.sent,
                    "\" data-bounced=\"", h.bounced, "\" x=\"", i * bar + 1, "\" y=\"", height - hs,
                    "\" width=\"", std::max(1.0, bar - 2), "\" height=\"", hs,
                    "\" fill=\"#3b82f6\"><title>", Time(h.hour), ": ", h.sent, " sent, ", h.bounced,
                    " bounced</title></rect><rect class=\"bounced\" x=\"", i * bar + 1, "\" y=\"",
                    height - hb, "\" width=\"", std::max(1.0, bar - 2), "\" height=\"", hb,
                    "\" fill=\"#dc2626\"/>");
  }
  absl::StrAppend(&out, "<text x=\"0\" y=\"", height + 15, "\" font-size=\"11\">peak ", top,
                  " an hour</text></svg>");
  return out;
}

std::string BudgetChart(const GroupBudgetRow& b, absl::Time now) {
  if (!b.monthly_budget_micros.has_value()) {
    return absl::StrCat("<p id=\"budget\" data-unlimited=\"true\">No budget: ", b.sent,
                        " sent this month (", HtmlEscape(b.month), ").</p>");
  }
  absl::CivilSecond month;
  absl::ParseCivilTime(b.month + "-01T00:00:00", &month);
  const absl::Time start = absl::FromCivil(month, absl::UTCTimeZone());
  const absl::Time end = absl::FromCivil(absl::CivilMonth(absl::CivilMonth(month) + 1),
                                         absl::UTCTimeZone());
  const double elapsed = std::clamp(absl::FDivDuration(now - start, end - start), 0.0, 1.0);
  const int64_t budget = *b.monthly_budget_micros;
  const int64_t pace = static_cast<int64_t>(static_cast<double>(budget) * elapsed);
  const int width = 720;
  auto x = [&](int64_t v) {
    return budget <= 0 ? 0.0 : std::min(1.0, static_cast<double>(v) / budget) * width;
  };
  return absl::StrCat(
      "<svg id=\"budget\" role=\"img\" width=\"", width, "\" height=\"56\" viewBox=\"0 0 ", width,
      " 56\" xmlns=\"http://www.w3.org/2000/svg\" data-budget=\"", budget, "\" data-committed=\"",
      b.committed_micros, "\" data-spent=\"", b.spent_micros, "\" data-pace=\"", pace,
      "\"><title>Committed this month against the budget and the month's pace</title>",
      "<rect x=\"0\" y=\"8\" width=\"", width, "\" height=\"24\" fill=\"#e5e7eb\"/>",
      "<rect class=\"committed\" x=\"0\" y=\"8\" width=\"", x(b.committed_micros),
      "\" height=\"24\" fill=\"", b.committed_micros > pace ? "#dc2626" : "#16a34a", "\"/>",
      "<line class=\"pace\" x1=\"", x(pace), "\" x2=\"", x(pace),
      "\" y1=\"2\" y2=\"38\" stroke=\"#1d2430\" stroke-width=\"2\"/>",
      "<text x=\"0\" y=\"52\" font-size=\"11\">committed ", b.committed_micros, " µ (", b.sent,
      " sent, ", b.spent_micros, " µ) of ", budget, " µ; the pace by now: ", pace,
      " µ</text></svg>");
}

std::string SignInPage(const std::string& error) {
  return Document(
      "Sign in",
      absl::StrCat("<main><section><h2>mailroom console</h2>",
                   error.empty()
                       ? ""
                       : "<p class=\"notice bad\" id=\"notice\">" + HtmlEscape(error) + "</p>",
                   "<form method=\"post\" action=\"/login\"><label>Operator token "
                   "<input type=\"password\" name=\"token\" id=\"token\" autocomplete=\"off\" "
                   "required></label> <button type=\"submit\" id=\"signin\">Sign in</button>"
                   "</form><p class=\"muted\">A token of MAILROOM_SUBSCRIBER_TOKENS with the "
                   "operator role.</p></section></main>"));
}

std::string DashboardPage(const PageFrame& f, const Dashboard& d) {
  std::string body = Header(f);
  absl::StrAppend(&body, "<section><h2>Sent per hour, the last ", d.hours.size(), " hours</h2>",
                  HourlyChart(d.hours), "</section>");
  if (d.budget.has_value()) {
    absl::StrAppend(&body, "<section><h2>Budget, ", HtmlEscape(d.budget->month), "</h2>",
                    BudgetChart(*d.budget, d.now), "</section>");
  }
  absl::StrAppend(&body, "<section><h2>Failures and bounces, the last 24 hours</h2>",
                  TroubleTable(f, d.trouble), "</section>");
  if (f.every_group) {
    absl::StrAppend(&body, "<section><h2>Suppressed addresses</h2>",
                    SuppressionTable(f, d.suppressions), "</section>");
  }
  return Document(f.group, body + "</main>");
}

std::string EmailsPage(const PageFrame& f, const std::string& address, const FoundEmails& found) {
  std::string body = Header(f);
  const std::string back = absl::StrCat("/emails?group=", QueryEscape(f.group),
                                        "&address=", QueryEscape(address));
  absl::StrAppend(&body, "<section id=\"suppression\"><h2>", HtmlEscape(address), "</h2>");
  if (!f.every_group) {
    absl::StrAppend(&body, "<p class=\"muted\">The suppression list is shown to operators of "
                           "every group.</p>");
  } else if (found.suppression.has_value()) {
    const SuppressionRow& s = *found.suppression;
    absl::StrAppend(&body, "<p class=\"bad\">Suppressed: ", HtmlEscape(s.reason), " (",
                    HtmlEscape(s.source), ") since ", Time(s.first_seen), "</p>",
                    f.every_group ? RemoveForm(f, s.address, back) : "");
  } else {
    absl::StrAppend(&body, "<p>Not suppressed.</p>");
  }
  absl::StrAppend(&body, "</section><section><h2>Emails, newest first</h2>");
  if (found.emails.empty()) absl::StrAppend(&body, "<p class=\"muted\">None.</p>");
  for (const FoundEmail& e : found.emails) {
    absl::StrAppend(&body, "<article class=\"email\" data-job=\"", e.job_id, "\" data-state=\"",
                    HtmlEscape(e.state), "\"><h2>", HtmlEscape(e.action), ": ", HtmlEscape(e.state),
                    e.reason.empty() ? "" : " (" + HtmlEscape(e.reason) + ")",
                    "</h2><p class=\"muted\">job ", e.job_id, ", account ", e.account_id,
                    ", requested ", Time(e.requested_at), ", expires ", Time(e.expires_at),
                    ", handed out ", e.handouts, " times</p><ol class=\"timeline\">");
    for (const LedgerEntry& l : e.ledger) {
      absl::StrAppend(&body, "<li class=\"event\" data-event=\"", HtmlEscape(l.event), "\">",
                      TimeMs(l.at_ms), " <strong>", HtmlEscape(l.event), "</strong>",
                      l.handout > 0 ? absl::StrCat(" try ", l.handout) : "",
                      l.provider.empty() ? "" : " via " + HtmlEscape(l.provider),
                      l.provider_message_id.empty() ? ""
                                                    : " id " + HtmlEscape(l.provider_message_id),
                      l.detail.empty() ? "" : ": " + HtmlEscape(l.detail), "</li>");
    }
    absl::StrAppend(&body, "</ol></article>");
  }
  return Document(address, body + "</section></main>");
}

std::string ErrorPage(int status, const std::string& message) {
  return Document("Error",
                  absl::StrCat("<main><section><h2>", status, "</h2><p>", HtmlEscape(message),
                               "</p><p><a href=\"/\">Back</a></p></section></main>"));
}

}  // namespace mailroom
