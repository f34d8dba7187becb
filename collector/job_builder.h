#pragma once

#include "absl/status/statusor.h"
#include "collector/signing.h"
#include "collector/store.h"
#include "proto/mailroom/v1/mailroom.pb.h"

namespace mailroom {

// Whether a subscription's jobs carry their account-takeover secrets: the signed token and the
// code. Only a sender's do; an observer's jobs have both empty (absent on the wire).
enum class JobSecrets { kIncluded, kWithheld };

// Turns a leased row into the job a subscriber receives: every field copied, the token signed
// with `key` (the action picks the signed message; recovery tokens sign the code too), the
// locale passed on as stored ("" when the account has none). With JobSecrets::kWithheld the
// token and the code are left empty; the row is signed all the same, so that a row that
// cannot be signed fails alike in every group. InvalidArgument when the row cannot be signed
// (a secret that is not 32 bytes, a recovery code that is not 5 digits: legacy rows without
// the schema's checks); the message never contains the secret. Pure and thread-safe.
absl::StatusOr<v1::Job> BuildJob(const SigningKey& key, const StoredJob& row,
                                 JobSecrets secrets);

}  // namespace mailroom
