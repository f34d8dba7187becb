#include "collector/dispatch/job_builder.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

SigningKey Key() {
  auto key = ParseSigningKey("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
  EXPECT_TRUE(key.ok());
  return *key;
}

StoredJob Row() {
  StoredJob j;
  j.id = 42;
  j.email = "alice@example.test";
  j.login = "alice";
  j.secret = std::string(32, '\x07');
  j.code = "01234";
  j.expires_at = 1700000900;
  j.account_id = 7;
  j.attempt = 3;
  j.failures = 1;
  j.created_at = 1700000000;
  j.locale = "pt-BR";
  return j;
}

TEST(JobBuilderTest, CopiesEveryFieldAndSignsAnActivation) {
  auto job = BuildJob(Key(), Row(), JobSecrets::kIncluded);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->job_id(), 42u);
  EXPECT_EQ(job->action(), v1::ACTION_ACTIVATION);
  EXPECT_EQ(job->email(), "alice@example.test");
  EXPECT_EQ(job->login(), "alice");
  EXPECT_EQ(job->code(), "01234");
  EXPECT_EQ(job->expires_at(), 1700000900);
  EXPECT_EQ(job->account_id(), 7u);
  EXPECT_EQ(job->attempt(), 3u);
  EXPECT_EQ(job->failures(), 1u);
  EXPECT_EQ(job->created_at(), 1700000000);
  EXPECT_EQ(job->locale(), "pt-BR");
  ASSERT_EQ(job->token().size(), 86u);
  std::vector<SigningKey> keys = {Key()};
  EXPECT_TRUE(VerifyToken(keys, TokenAction::kActivation, job->token(), job->code()).ok());
  EXPECT_FALSE(VerifyToken(keys, TokenAction::kPasswordRecovery, job->token(), job->code()).ok());
}

TEST(JobBuilderTest, RecoveryTokensSignTheCode) {
  StoredJob row = Row();
  row.action = "password_recovery";
  row.critical = true;
  auto job = BuildJob(Key(), row, JobSecrets::kIncluded);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->action(), v1::ACTION_PASSWORD_RECOVERY);
  EXPECT_EQ(job->action_name(), "password_recovery");
  EXPECT_EQ(job->priority(), v1::PRIORITY_CRITICAL);
  std::vector<SigningKey> keys = {Key()};
  EXPECT_TRUE(VerifyToken(keys, TokenAction::kPasswordRecovery, job->token(), "01234").ok());
  EXPECT_FALSE(VerifyToken(keys, TokenAction::kPasswordRecovery, job->token(), "01235").ok());
}

// Every other action: ACTION_OTHER with its name, its priority class, its token signed with its
// own domain (the code signed when it carries one); a notice has no token at all.
TEST(JobBuilderTest, OtherActionsCarryTheirNameClassAndDomain) {
  StoredJob row = Row();
  row.action = "login_code";
  row.critical = true;
  row.code = "123456";
  auto job = BuildJob(Key(), row, JobSecrets::kIncluded);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->action(), v1::ACTION_OTHER);
  EXPECT_EQ(job->action_name(), "login_code");
  EXPECT_EQ(job->priority(), v1::PRIORITY_CRITICAL);
  EXPECT_EQ(job->code(), "123456");
  std::vector<SigningKey> keys = {Key()};
  EXPECT_TRUE(VerifyToken(keys, *ParseTokenAction("login_code"), job->token(), "123456").ok());
  EXPECT_FALSE(VerifyToken(keys, TokenAction::kPasswordRecovery, job->token(), "123456").ok());

  StoredJob notice = Row();
  notice.action = "account_suspended";
  notice.notice = true;
  notice.secret.clear();
  notice.code.clear();
  job = BuildJob(Key(), notice, JobSecrets::kIncluded);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->action(), v1::ACTION_OTHER);
  EXPECT_EQ(job->action_name(), "account_suspended");
  EXPECT_EQ(job->priority(), v1::PRIORITY_NOTICE);
  EXPECT_EQ(job->token(), "");
  EXPECT_EQ(job->code(), "");

  StoredJob activation = Row();
  job = BuildJob(Key(), activation, JobSecrets::kIncluded);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->action_name(), "activation");
  EXPECT_EQ(job->priority(), v1::PRIORITY_NORMAL);

  StoredJob bad_name = Row();
  bad_name.action = "../recover";
  EXPECT_EQ(BuildJob(Key(), bad_name, JobSecrets::kIncluded).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// An account's address with spaces around it (which mailroom accepts and ignores) goes out
// without them, so that its emails, the email_changed notice to it included, can be sent.
TEST(JobBuilderTest, TheRecipientHasNoSurroundingSpaces) {
  StoredJob row = Row();
  row.email = "  alice@example.test \t";
  auto job = BuildJob(Key(), row, JobSecrets::kIncluded);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->email(), "alice@example.test");
}

TEST(JobBuilderTest, NoLocaleStaysEmpty) {
  StoredJob row = Row();
  row.locale.clear();
  auto job = BuildJob(Key(), row, JobSecrets::kIncluded);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->locale(), "");
}

TEST(JobBuilderTest, MalformedRowsFailWithoutEchoingTheSecret) {
  StoredJob short_secret = Row();
  short_secret.secret = "secret-material-xyz";
  auto job = BuildJob(Key(), short_secret, JobSecrets::kIncluded);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("cannot sign token"));
  EXPECT_THAT(job.status().message(), Not(HasSubstr("secret-material-xyz")));

  StoredJob bad_code = Row();
  bad_code.action = "password_recovery";
  bad_code.code = "12a";
  EXPECT_EQ(BuildJob(Key(), bad_code, JobSecrets::kIncluded).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// An observer's job: every field but the token and the code, for either action; both are
// absent from the serialised message, not merely empty strings in it.
TEST(JobBuilderTest, WithheldSecretsLeaveTokenAndCodeOutOfTheJob) {
  for (bool recovery : {false, true}) {
    StoredJob row = Row();
    row.action = recovery ? "password_recovery" : "activation";
    row.critical = recovery;
    auto job = BuildJob(Key(), row, JobSecrets::kWithheld);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->token(), "");
    EXPECT_EQ(job->code(), "");
    EXPECT_EQ(job->job_id(), 42u);
    EXPECT_EQ(job->email(), "alice@example.test");
    EXPECT_EQ(job->attempt(), 3u);
    EXPECT_EQ(job->expires_at(), 1700000900);
    const std::string wire = job->SerializeAsString();
    EXPECT_THAT(wire, Not(HasSubstr("01234")));
    auto with = BuildJob(Key(), row, JobSecrets::kIncluded);
    ASSERT_TRUE(with.ok());
    EXPECT_THAT(wire, Not(HasSubstr(with->token())));
  }
  // A row that cannot be signed fails for an observer too (every group sees it fail alike).
  StoredJob short_secret = Row();
  short_secret.secret = "short";
  EXPECT_EQ(BuildJob(Key(), short_secret, JobSecrets::kWithheld).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mailroom
