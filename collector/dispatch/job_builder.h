#pragma once

#include "absl/status/statusor.h"
#include "collector/dispatch/signing.h"
#include "collector/store/store.h"
#include "proto/mailroom/v1/mailroom.pb.h"

namespace mailroom {

// Whether a subscription's jobs carry their account-takeover secrets: the signed token and the
// code. Only a sender's do; an observer's jobs have both empty (absent on the wire).
enum class JobSecrets { kIncluded, kWithheld };

// The wire's Action for an action's name: ACTION_ACTIVATION, ACTION_PASSWORD_RECOVERY, or
// ACTION_OTHER for every other name (Job.action_name and Failure.action_name say which).
v1::Action WireAction(absl::string_view action_name);

// Turns a leased row into the job a subscriber receives: every field copied, the token signed
// with `key` (the action's name picks the signed message's domain; an action with a code signs
// it too; an action without a secret, a notice, has no token), `action` ACTION_ACTIVATION,
// ACTION_PASSWORD_RECOVERY or ACTION_OTHER, `action_name` the name, `priority` the class, the
// locale passed on as stored ("" when the account has none). With JobSecrets::kWithheld the
// token and the code are left empty; the row is signed all the same, so that a row that
// cannot be signed fails alike in every group. InvalidArgument when the row cannot be signed
// (an action name outside [a-z][a-z0-9_]{0,62}, a secret that is not 32 bytes, a code that
// does not fit its action: rows without the schema's checks); the message never contains the
// secret. Pure and thread-safe.
absl::StatusOr<v1::Job> BuildJob(const SigningKey& key, const StoredJob& row, JobSecrets secrets);

}  // namespace mailroom
