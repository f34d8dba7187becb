#include "collector/console/console.h"

#include <map>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collector/api/service.h"
#include "collector/console/form.h"
#include "collector/console/pages.h"
#include "common/log.h"

namespace mailroom {
namespace {

constexpr char kCookie[] = "mailroom_console";

constexpr char kPageHeaders[] =
    "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'\r\n"
    "X-Frame-Options: DENY\r\nX-Content-Type-Options: nosniff\r\n"
    "Referrer-Policy: same-origin\r\nCache-Control: no-store\r\n";

HttpReply Html(int status, std::string body) {
  return {status, std::move(body), "text/html; charset=utf-8", kPageHeaders};
}

HttpReply SeeOther(const std::string& location, const std::string& cookie = "") {
  HttpReply r{303, "", "text/plain; charset=utf-8", kPageHeaders};
  absl::StrAppend(&r.headers, "Location: ", location, "\r\n", cookie);
  return r;
}

bool Https(const HttpRequest& request) {
  const std::string* proto = request.Header("X-Forwarded-Proto");
  return proto != nullptr && absl::EqualsIgnoreCase(*proto, "https");
}

// The session cookie's id, if the request carries one: over https only the `__Host-` cookie
// (which only this host, over https, on path / can set), over plain HTTP the plain one.
std::string CookieOf(const HttpRequest& request) {
  const std::string* header = request.Header("Cookie");
  if (header == nullptr) return "";
  const std::string name = absl::StrCat(Https(request) ? "__Host-" : "", kCookie, "=");
  for (absl::string_view part : absl::StrSplit(*header, ';')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::ConsumePrefix(&part, name)) return std::string(part);
  }
  return "";
}

std::string SetCookie(const HttpRequest& request, const std::string& value, int64_t max_age) {
  const bool https = Https(request);
  return absl::StrCat("Set-Cookie: ", https ? "__Host-" : "", kCookie, "=", value,
                      "; Path=/; Max-Age=", max_age, "; HttpOnly; SameSite=Strict",
                      https ? "; Secure" : "", "\r\n");
}

// A POST must carry exactly one Origin, this host's (as the Host header names it) over the
// scheme the request came by. Browsers send one with every form they post.
bool SameOrigin(const HttpRequest& request) {
  const std::string* origin = request.Header("Origin");
  const std::string* host = request.Header("Host");
  if (origin == nullptr || host == nullptr) return false;
  return *origin == absl::StrCat(Https(request) ? "https://" : "http://", *host);
}

// A page of the console's own to come back to, "/" or "/emails" with a query of plain
// characters, else "/".
std::string LocalPath(const std::string& back) {
  absl::string_view rest = back;
  if (!absl::ConsumePrefix(&rest, "/emails?") && !absl::ConsumePrefix(&rest, "/?")) {
    return "/";
  }
  for (unsigned char c : rest) {
    if (!absl::ascii_isalnum(c) && std::string_view("%=&._~+-").find(c) == std::string::npos) {
      return "/";
    }
  }
  return back;
}

}  // namespace

ConsoleHandler::ConsoleHandler(const Authenticator* auth, OperatorStore* operators,
                               BudgetStore* budgets, ConsoleSessions* sessions, Clock* clock)
    : auth_(auth), operators_(operators), budgets_(budgets), sessions_(sessions), clock_(clock) {}

HttpReply ConsoleHandler::Handle(const HttpRequest& request) {
  const bool post = request.method == "POST";
  if (post && !SameOrigin(request)) {
    return Html(403, ErrorPage(403, "This form was not sent from the console's own page."));
  }
  if (post && request.path == "/login") return SignIn(request);
  const std::string id = CookieOf(request);
  std::optional<ConsoleSession> session = sessions_->Find(id);
  if (!session.has_value()) {
    if (!post && request.path == "/") return Html(200, SignInPage(""));
    return post ? Html(403, ErrorPage(403, "Your session has ended: sign in again."))
                : SeeOther("/");
  }
  if (post) {
    // Every form of a session carries its token.
    auto form = ParseForm(request.body);
    if (form["csrf"] != session->csrf) {
      return Html(403, ErrorPage(403, "This form is stale or not the console's: reload it."));
    }
    if (request.path == "/logout") return SignOut(request, *session, id);
    if (request.path == "/suppressions/remove") return RemoveSuppression(request, *session);
  } else {
    if (request.path == "/") return Group(request, *session);
    if (request.path == "/emails") return Emails(request, *session);
  }
  return Html(404, ErrorPage(404, "No such page."));
}

HttpReply ConsoleHandler::SignIn(const HttpRequest& request) {
  auto form = ParseForm(request.body);
  Principal principal;
  grpc::Status st = auth_->AuthenticateToken(form["token"], &principal);
  if (st.ok() && (!principal.HasRole(kRoleOperator) || principal.legacy)) {
    st = grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      "not a credential scoped :operator (unscoped tokens do not sign in)");
  }
  if (!st.ok()) {
    LogWarn("console sign-in refused", {{"reason", st.error_message()}});
    return Html(403, SignInPage("That token is not an operator's."));
  }
  const std::string id = sessions_->Begin(principal);
  if (id.empty()) {
    LogWarn("console sign-in refused: no session free", {{"credential", principal.credential}});
    return Html(503, SignInPage("The console has no session free; retry later."));
  }
  LogInfo("console sign-in", {{"credential", principal.credential}});
  return SeeOther("/", SetCookie(request, id, absl::ToInt64Seconds(sessions_->ttl())));
}

HttpReply ConsoleHandler::SignOut(const HttpRequest& request, const ConsoleSession& session,
                                  const std::string& id) {
  sessions_->End(id);
  LogInfo("console sign-out", {{"credential", session.principal.credential}});
  return SeeOther("/", SetCookie(request, "", 0));
}

std::string ConsoleHandler::GroupFor(const Principal& principal, const std::string& asked,
                                     std::vector<std::string>* groups, std::string* error,
                                     int* status) {
  *status = 403;
  auto all = operators_->Groups();
  if (!all.ok()) {
    *status = 503;
    *error = "The database does not answer; retry.";
    return "";
  }
  for (const std::string& g : *all) {
    if (CheckScope(principal, kRoleOperator, g, "console").ok()) groups->push_back(g);
  }
  if (groups->empty()) {
    *error = "This credential operates no consumer group there is.";
    return "";
  }
  if (asked.empty()) return groups->front();
  if (std::find(groups->begin(), groups->end(), asked) == groups->end()) {
    *error = absl::StrCat("This credential may not see the group \"", asked, "\".");
    return "";
  }
  return asked;
}

bool ConsoleHandler::FrameFor(const ConsoleSession& session,
                              std::map<std::string, std::string>& query, PageFrame* frame,
                              std::string* error, int* status) {
  *frame = PageFrame{session.principal.credential,
                     "",
                     {},
                     session.csrf,
                     session.principal.all_groups,
                     query["notice"]};
  frame->group = GroupFor(session.principal, query["group"], &frame->groups, error, status);
  return !frame->group.empty();
}

HttpReply ConsoleHandler::Group(const HttpRequest& request, const ConsoleSession& session) {
  auto query = ParseForm(request.query);
  PageFrame frame;
  std::string error;
  int status = 0;
  if (!FrameFor(session, query, &frame, &error, &status)) {
    return Html(status, ErrorPage(status, error));
  }
  Dashboard d;
  d.now = clock_->Now();
  auto hours = operators_->Hourly(frame.group, 24);
  if (!hours.ok()) return Html(503, ErrorPage(503, "The database does not answer; retry."));
  d.hours = *std::move(hours);
  // The failures name addresses: read as ListFailures is, audited.
  AuditedCall failures(operators_, session.principal, "ListFailures (console)", frame.group,
                       "the last 24 hours");
  if (!failures.Begin().ok()) {
    return Html(503, ErrorPage(503, "The audit cannot be written; retry."));
  }
  auto trouble = operators_->Trouble(frame.group, absl::Hours(24), 100);
  if (!trouble.ok()) {
    failures.End(ToGrpc(trouble.status()));
    return Html(503, ErrorPage(503, "The database does not answer; retry."));
  }
  failures.End(grpc::Status::OK, absl::StrCat(trouble->size(), " entries"));
  d.trouble = *std::move(trouble);
  if (budgets_ != nullptr) {
    auto b = budgets_->Get(frame.group);
    if (b.ok()) d.budget = *std::move(b);
  }
  if (frame.every_group) {
    AuditedCall list(operators_, session.principal, "ListSuppressions (console)", "",
                     "the first 100");
    if (!list.Begin().ok()) {
      return Html(503, ErrorPage(503, "The audit cannot be written; retry."));
    }
    SuppressionQuery q;
    q.limit = 100;
    auto s = operators_->ListSuppressions(q);
    if (!s.ok()) {
      list.End(ToGrpc(s.status()));
      return Html(503, ErrorPage(503, "The database does not answer; retry."));
    }
    list.End(grpc::Status::OK, absl::StrCat(s->size(), " entries"));
    d.suppressions = *std::move(s);
  }
  return Html(200, DashboardPage(frame, d));
}

HttpReply ConsoleHandler::Emails(const HttpRequest& request, const ConsoleSession& session) {
  auto query = ParseForm(request.query);
  PageFrame frame;
  std::string error;
  int status = 0;
  if (!FrameFor(session, query, &frame, &error, &status)) {
    return Html(status, ErrorPage(status, error));
  }
  auto address = NormalizeAddress(query["address"]);
  if (!address.ok()) return Html(400, ErrorPage(400, std::string(address.status().message())));
  AuditedCall audit(operators_, session.principal, "FindEmails (console)", frame.group, *address);
  if (!audit.Begin().ok()) return Html(503, ErrorPage(503, "The audit cannot be written; retry."));
  auto found = operators_->FindEmails(frame.group, *address, 0, 20);
  if (!found.ok()) {
    audit.End(ToGrpc(found.status()));
    return Html(503, ErrorPage(503, std::string(found.status().message())));
  }
  audit.End(grpc::Status::OK, absl::StrCat(found->emails.size(), " emails"));
  return Html(200, EmailsPage(frame, *address, *found));
}

HttpReply ConsoleHandler::RemoveSuppression(const HttpRequest& request,
                                            const ConsoleSession& session) {
  auto form = ParseForm(request.body);
  const std::string back = LocalPath(form["back"]);
  if (!session.principal.all_groups) {
    return Html(403, ErrorPage(403, "Only an operator of every group (*) may change the "
                                    "suppression list: it applies to all."));
  }
  auto address = NormalizeAddress(form["address"]);
  auto reason = CleanReason(form["reason"]);
  if (!address.ok() || !reason.ok() || reason->empty()) {
    return Html(400, ErrorPage(400, "An address and a reason are needed."));
  }
  AuditedCall audit(operators_, session.principal, "RemoveSuppression (console)", "",
                    absl::StrCat(*address, " reason ", *reason));
  if (!audit.Begin().ok()) return Html(503, ErrorPage(503, "The audit cannot be written; retry."));
  auto removed = operators_->RemoveSuppression(*address);
  if (!removed.ok()) {
    audit.End(ToGrpc(removed.status()));
    return SeeOther(absl::StrCat(back, back.find('?') == std::string::npos ? "?" : "&",
                                 "notice=", QueryEscape(std::string(removed.status().message()))));
  }
  audit.End(grpc::Status::OK, absl::StrCat("removed ", removed->reason));
  LogInfo("suppression removed",
          {{"domain", address->substr(address->rfind('@') + 1)}, {"reason", removed->reason}});
  return SeeOther(absl::StrCat(back, back.find('?') == std::string::npos ? "?" : "&",
                               "notice=", QueryEscape("Removed the suppression.")));
}

}  // namespace mailroom
