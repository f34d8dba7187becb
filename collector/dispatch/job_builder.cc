#include "collector/dispatch/job_builder.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace mailroom {

v1::Action WireAction(absl::string_view action_name) {
  if (action_name == TokenAction::kActivation.name()) return v1::ACTION_ACTIVATION;
  if (action_name == TokenAction::kPasswordRecovery.name()) return v1::ACTION_PASSWORD_RECOVERY;
  return v1::ACTION_OTHER;
}

namespace {

v1::Priority WirePriority(const StoredJob& row) {
  if (row.critical) return v1::PRIORITY_CRITICAL;
  return row.notice ? v1::PRIORITY_NOTICE : v1::PRIORITY_NORMAL;
}

}  // namespace

absl::StatusOr<v1::Job> BuildJob(const SigningKey& key, const StoredJob& row, JobSecrets secrets) {
  auto action = ParseTokenAction(row.action);
  if (!action.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot sign token: ", action.status().message()));
  }
  // An action without a secret (a notice) has no token to sign.
  absl::StatusOr<std::string> token = std::string();
  if (!row.secret.empty()) token = SignToken(key, *action, row.secret, row.code);
  if (!token.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot sign token: ", token.status().message()));
  }
  v1::Job job;
  job.set_job_id(row.id);
  job.set_action(WireAction(row.action));
  job.set_action_name(row.action);
  job.set_priority(WirePriority(row));
  // mailroom compares addresses as lower(btrim(email)) and accepts an account's address with
  // spaces around it; the recipient is the address without them (a space is never part of a
  // mailbox, and the sender refuses one).
  job.set_email(std::string(
      absl::StripTrailingAsciiWhitespace(absl::StripLeadingAsciiWhitespace(row.email))));
  job.set_login(row.login);
  if (secrets == JobSecrets::kIncluded) {
    job.set_token(*std::move(token));
    job.set_code(row.code);
  }
  job.set_expires_at(row.expires_at);
  job.set_account_id(row.account_id);
  job.set_attempt(row.attempt);
  job.set_failures(row.failures);
  job.set_created_at(row.created_at);
  job.set_locale(row.locale);
  return job;
}

}  // namespace mailroom
