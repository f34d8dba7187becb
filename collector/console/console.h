#pragma once

#include <map>
#include <string>
#include <vector>

#include "collector/api/audit.h"
#include "collector/api/auth.h"
#include "collector/console/pages.h"
#include "collector/console/sessions.h"
#include "collector/feedback/http_request.h"
#include "collector/store/budget_store.h"
#include "collector/store/operator_store.h"
#include "collector/store/store.h"
#include "common/clock.h"

namespace mailroom {

// The operator's console, served by the collector on MAILROOM_CONSOLE_ADDRESS through the
// feedback endpoint's HTTP server (GET allowed). Pages (collector/console/pages.h):
//   GET  /                      the sign-in form, or the group's page (?group=)
//   POST /login                 token=: an operator credential of MAILROOM_SUBSCRIBER_TOKENS
//   GET  /emails                ?group=&address=: the address's emails and their ledger
//   POST /suppressions/remove   csrf=, address=, reason=, back=: an operator of `*`
//   POST /logout                csrf=
// A session is a cookie (HttpOnly, SameSite=Strict; `__Host-` and Secure when the proxy says
// the request came over https) naming a ConsoleSessions entry; every form carries the
// session's CSRF token, and a POST without exactly one Origin of this host and scheme is
// refused (403). Unscoped (legacy) tokens do not sign in. An operator sees only its groups
// (403 as gRPC's PERMISSION_DENIED), and only an operator of `*` the suppression list. Every
// read that names addresses and every change is audited as its gRPC call is ("FindEmails
// (console)", "ListFailures (console)", "ListSuppressions (console)", "RemoveSuppression
// (console)"), and not done when the audit cannot be written. Pages carry a
// Content-Security-Policy that allows no script and no external asset. Thread-safe.
class ConsoleHandler : public HttpHandler {
 public:
  // None of the pointers is owned; `budgets` may be null (no budget chart).
  ConsoleHandler(const Authenticator* auth, OperatorStore* operators, BudgetStore* budgets,
                 ConsoleSessions* sessions, Clock* clock);
  HttpReply Handle(const HttpRequest& request) override;

 private:
  HttpReply SignIn(const HttpRequest& request);
  HttpReply SignOut(const HttpRequest& request, const ConsoleSession& session,
                    const std::string& id);
  HttpReply Group(const HttpRequest& request, const ConsoleSession& session);
  HttpReply Emails(const HttpRequest& request, const ConsoleSession& session);
  HttpReply RemoveSuppression(const HttpRequest& request, const ConsoleSession& session);
  // The frame of a signed-in page: who, the groups to switch to, the group asked for (its
  // `group` field; the first one else); false with `error` when the group is not the
  // session's to see.
  bool FrameFor(const ConsoleSession& session, std::map<std::string, std::string>& query,
                PageFrame* frame, std::string* error, int* status);
  // The groups `principal` may see, and the one asked for (or its first); "" when none.
  // `status`: 403 (not the principal's), 503 (the database does not answer).
  std::string GroupFor(const Principal& principal, const std::string& asked,
                       std::vector<std::string>* groups, std::string* error, int* status);

  const Authenticator* const auth_;
  OperatorStore* const operators_;
  BudgetStore* const budgets_;
  ConsoleSessions* const sessions_;
  Clock* const clock_;
};

}  // namespace mailroom
