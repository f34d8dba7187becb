#pragma once

// The names of actions: the built-in ones, the rule every name follows, and a job's.

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "proto/mailroom/v1/mailroom.pb.h"

namespace mailroom {

// The built-in actions, each with templates in every built-in locale: activation,
// password_recovery, login_code, email_change, invitation, then the notices password_changed,
// email_changed, account_suspended, account_reactivated.
const std::vector<std::string>& BuiltinActions();

// True for the built-in notices: jobs without a token or a code, nothing to consume.
bool IsBuiltinNotice(absl::string_view action);

// An action name as the database allows it: [a-z][a-z0-9_]{0,62}.
bool ValidActionName(absl::string_view action);

// The name of a job's action: `action_name` when the collector set it, else the name of the
// `action` enum ("activation", "password_recovery"; a collector that predates action names),
// else "" (ACTION_OTHER or unspecified without a name: nothing to render).
std::string JobActionName(const v1::Job& job);

}  // namespace mailroom
