#pragma once

#include "absl/status/statusor.h"
#include "collector/signing.h"
#include "collector/store.h"
#include "proto/mailroom/v1/mailroom.pb.h"

namespace mailroom {

// Turns a leased row into the job a sender receives: every field copied, the token signed with
// `key` (the action picks the signed message; recovery tokens sign the code too), the locale
// passed on as stored ("" when the account has none). InvalidArgument when the row cannot be
// signed (a secret that is not 32 bytes, a recovery code that is not 5 digits: legacy rows
// without the schema's checks); the message never contains the secret. Pure and thread-safe.
absl::StatusOr<v1::Job> BuildJob(const SigningKey& key, const StoredJob& row);

}  // namespace mailroom
