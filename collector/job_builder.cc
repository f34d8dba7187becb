#include "collector/job_builder.h"

#include "absl/strings/str_cat.h"

namespace mailroom {

absl::StatusOr<v1::Job> BuildJob(const SigningKey& key, const StoredJob& row,
                                 JobSecrets secrets) {
  const TokenAction action =
      row.password_recovery ? TokenAction::kPasswordRecovery : TokenAction::kActivation;
  auto token = SignToken(key, action, row.secret, row.code);
  if (!token.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot sign token: ", token.status().message()));
  }
  v1::Job job;
  job.set_job_id(row.id);
  job.set_action(row.password_recovery ? v1::ACTION_PASSWORD_RECOVERY : v1::ACTION_ACTIVATION);
  job.set_email(row.email);
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
