#pragma once

#include "absl/strings/string_view.h"

namespace mailroom {

// True for a valid consumer group name: ^[a-z][a-z0-9_-]{0,62}$. The collector checks every
// group a request or the configuration names with it; the sender checks its own
// MAILROOM_CONSUMER_GROUP with it, so both services agree on what a group may be called.
bool ValidGroupName(absl::string_view name);

// The pattern ValidGroupName accepts, for error messages.
inline constexpr char kGroupNamePattern[] = "^[a-z][a-z0-9_-]{0,62}$";

}  // namespace mailroom
