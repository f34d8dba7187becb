#pragma once

// The names of actions: the built-in ones, the rule every name follows, and a job's.

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/mailroom/v1/mailroom.pb.h"

namespace mailroom {

// The built-in actions, each with templates in every built-in locale: activation,
// password_recovery, login_code, email_change, invitation, then the notices password_changed,
// email_changed, account_suspended, account_reactivated.
const std::vector<std::string>& BuiltinActions();

// True for the built-in notices: jobs without a token or a code, nothing to consume.
bool IsBuiltinNotice(absl::string_view action);

// What a job of an action carries that a preview shows: its code's digits and its lifetime.
struct ActionRules {
  int code_length = 6;
  absl::Duration expiry = absl::Hours(24);
};

// The rules the database gives a built-in action when it is installed (mailroom.actions' seed
// rows: activation 6 digits and 15 minutes, password_recovery 5 and 15 minutes, login_code 6 and
// 10 minutes, email_change an hour, invitation 7 days, the notices a day); any other action gets
// the table's defaults (6 digits, a day). The sender does not read the database: `sender render`
// and `sender doctor` preview with these, and `sender render --code-length/--expiry` give an
// action's real ones when the operator changed them or the action is the application's own.
ActionRules DefaultActionRules(absl::string_view action);

// A sample code of `length` digits (1 to 12): "123456" for 6.
std::string SampleCode(int length);

// An action name as the database allows it: [a-z][a-z0-9_]{0,62}.
bool ValidActionName(absl::string_view action);

// The name of a job's action: `action_name` when the collector set it, else the name of the
// `action` enum ("activation", "password_recovery"; a collector that predates action names),
// else "" (ACTION_OTHER or unspecified without a name: nothing to render).
std::string JobActionName(const v1::Job& job);

}  // namespace mailroom
