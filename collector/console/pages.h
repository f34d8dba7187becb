#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "collector/store/budget_store.h"
#include "collector/store/operator_store.h"
#include "collector/store/store.h"

namespace mailroom {

// What the console's pages show. The pages are whole HTML documents with their style inline
// and their charts drawn as inline SVG: no script, no external asset (the console's
// Content-Security-Policy allows none). Every text from the database is HTML-escaped.

// Who is signed in, for every page after the sign-in.
struct PageFrame {
  std::string credential;           // the credential's name ("token 3")
  std::string group;                // the group shown
  std::vector<std::string> groups;  // the groups the operator may switch to
  std::string csrf;                 // the session's form token
  bool every_group = false;         // an operator of `*`: the suppression list's actions
  std::string notice;               // a line above the page ("removed ...", an error)
};

// The group's page: its sending of the last hours, its budget against the month's pace, its
// failures and bounces of the last 24 hours, the suppression list (an operator of `*`).
struct Dashboard {
  std::vector<HourRow> hours;
  std::optional<GroupBudgetRow> budget;  // none when budgets are not available
  std::vector<TroubleRow> trouble;
  std::vector<SuppressionRow> suppressions;
  absl::Time now;
};

std::string SignInPage(const std::string& error);
std::string DashboardPage(const PageFrame& frame, const Dashboard& d);
// An address's emails, each with its ledger as a timeline, and its suppression entry.
std::string EmailsPage(const PageFrame& frame, const std::string& address,
                       const FoundEmails& found);
std::string ErrorPage(int status, const std::string& message);

// The charts, as inline SVG. Each bar carries its figures as data- attributes and a <title>.
// Emails sent (and bounced) per hour, oldest first.
std::string HourlyChart(const std::vector<HourRow>& hours);
// Committed this month (granted to senders, less what they gave back; with what was spent)
// against the budget and the pace's share of it by `now` (the month's elapsed fraction of the
// budget); a line of text when unlimited.
std::string BudgetChart(const GroupBudgetRow& budget, absl::Time now);

}  // namespace mailroom
