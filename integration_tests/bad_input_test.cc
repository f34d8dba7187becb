// Bad input: every configuration variable given a malformed value (a clear error naming it,
// exit status 2, no crash, no secret echoed), and legacy token rows the schema would now reject
// (NULL or short codes), which must fail alone while the rest is delivered. Hostile logins and
// addresses are in e2e_test; unauthenticated and invalid RPCs in collector_test.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/version.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/collector_fixture.h"
#include "testing/process.h"
#include "testing/stack.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::Process;

struct Case {
  std::map<std::string, std::string> env;  // on top of a valid base
  std::string names;                       // the variable the error must name
};

// Runs `binary` with `env` and checks it refuses to start the way an operator wants.
void ExpectConfigError(const std::string& binary, const std::map<std::string, std::string>& env,
                       const std::string& names, const std::vector<std::string>& secrets) {
  auto p = Process::Spawn({testing::Runfile(binary)}, env);
  ASSERT_TRUE(p.ok());
  auto code = (*p)->Wait(absl::Seconds(10));
  ASSERT_TRUE(code.ok()) << names << " did not stop the process: " << (*p)->Log();
  const std::string log = (*p)->Log();
  EXPECT_EQ(*code, 2) << names << ": " << log;
  EXPECT_THAT(log, HasSubstr(absl::StrCat("config error: ", names, ":"))) << log;
  // One line, no abort, no stack trace.
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  EXPECT_THAT(log, Not(HasSubstr("terminate called")));
  for (const auto& s : secrets) EXPECT_THAT(log, Not(HasSubstr(s))) << names;
}

TEST(BadConfigTest, EveryCollectorVariableIsCheckedAndNamed) {
  const std::string key(64, 'a');
  const std::map<std::string, std::string> base = {
      {"MAILROOM_DATABASE_URL", "postgresql://mailroom:pg-pass-word@127.0.0.1:1/db"},
      {"MAILROOM_SECRET_KEY", key},
      {"MAILROOM_SUBSCRIBER_TOKENS", "subscriber-token-0123456789"},
      {"MAILROOM_LISTEN_ADDRESS", "127.0.0.1:0"},
      {"MAILROOM_METRICS_ADDRESS", "off"},
  };
  const std::vector<Case> cases = {
      {{{"MAILROOM_DATABASE_URL", ""}}, "MAILROOM_DATABASE_URL"},
      {{{"MAILROOM_DATABASE_URL", "host=db pg-pass-word"}}, "MAILROOM_DATABASE_URL"},
      {{{"MAILROOM_SECRET_KEY", ""}}, "MAILROOM_SECRET_KEY"},
      {{{"MAILROOM_SECRET_KEY", std::string(63, 'a') + "g"}}, "MAILROOM_SECRET_KEY"},
      {{{"MAILROOM_SECRET_KEY", "abcd"}}, "MAILROOM_SECRET_KEY"},
      {{{"MAILROOM_SUBSCRIBER_TOKENS", ""}}, "MAILROOM_SUBSCRIBER_TOKENS"},
      {{{"MAILROOM_SUBSCRIBER_TOKENS", "shorttoken"}}, "MAILROOM_SUBSCRIBER_TOKENS"},
      {{{"MAILROOM_SUBSCRIBER_TOKENS", "subscriber-token-0123456789@mailroom:root"}},
       "MAILROOM_SUBSCRIBER_TOKENS"},
      {{{"MAILROOM_SUBSCRIBER_TOKENS", "subscriber-token-0123456789@Bad Group:subscriber"}},
       "MAILROOM_SUBSCRIBER_TOKENS"},
      // An observer in the senders' group would take a share of their jobs.
      {{{"MAILROOM_SUBSCRIBER_TOKENS", "subscriber-token-sender-0123@mailroom:sender,"
                                       "subscriber-token-observer-01@mailroom+audit:observer"}},
       "MAILROOM_SUBSCRIBER_TOKENS"},
      {{{"MAILROOM_GROUPS", "mailroom,Bad Group"}}, "MAILROOM_GROUPS"},
      {{{"MAILROOM_MAX_IN_FLIGHT_CAP", "0"}}, "MAILROOM_MAX_IN_FLIGHT_CAP"},
      {{{"MAILROOM_MAX_IN_FLIGHT_CAP", "100001"}}, "MAILROOM_MAX_IN_FLIGHT_CAP"},
      {{{"MAILROOM_MAX_IN_FLIGHT", "100"}}, "MAILROOM_MAX_IN_FLIGHT"},
      {{{"MAILROOM_STATEMENT_TIMEOUT", "soon"}}, "MAILROOM_STATEMENT_TIMEOUT"},
      {{{"MAILROOM_INSECURE_NO_AUTH", "maybe"}}, "MAILROOM_INSECURE_NO_AUTH"},
      {{{"MAILROOM_LISTEN_ADDRESS", "nohost"}}, "MAILROOM_LISTEN_ADDRESS"},
      {{{"MAILROOM_LISTEN_ADDRESS", "127.0.0.1:70000"}}, "MAILROOM_LISTEN_ADDRESS"},
      {{{"MAILROOM_LISTEN_ADDRESS", "0.0.0.0:0"}}, "MAILROOM_LISTEN_ADDRESS"},
      {{{"MAILROOM_LISTEN_ADDRESS", "[::]:0"}}, "MAILROOM_LISTEN_ADDRESS"},
      {{{"MAILROOM_ALLOW_PLAINTEXT", "maybe"}}, "MAILROOM_ALLOW_PLAINTEXT"},
      {{{"MAILROOM_HEALTH_ADDRESS", "nohost"}}, "MAILROOM_HEALTH_ADDRESS"},
      {{{"MAILROOM_TLS_CERT", "/nonexistent.pem"}}, "MAILROOM_TLS_CERT"},
      {{{"MAILROOM_TLS_KEY", "/nonexistent.pem"}}, "MAILROOM_TLS_KEY"},
      {{{"MAILROOM_TLS_CLIENT_CA", "/nonexistent.pem"}}, "MAILROOM_TLS_CLIENT_CA"},
      {{{"MAILROOM_BATCH_LIMIT", "ten"}}, "MAILROOM_BATCH_LIMIT"},
      {{{"MAILROOM_BATCH_LIMIT", "0"}}, "MAILROOM_BATCH_LIMIT"},
      {{{"MAILROOM_DEQUEUE_LIMIT", "0"}}, "MAILROOM_DEQUEUE_LIMIT"},
      {{{"MAILROOM_MAX_STREAMS_PER_CREDENTIAL", "0"}}, "MAILROOM_MAX_STREAMS_PER_CREDENTIAL"},
      {{{"MAILROOM_DEQUEUE_LIMIT", "10001"}}, "MAILROOM_DEQUEUE_LIMIT"},
      {{{"MAILROOM_BATCH_TIMEOUT", "-1"}}, "MAILROOM_BATCH_TIMEOUT"},
      {{{"MAILROOM_HEALTHCHECK_INTERVAL", "5x"}}, "MAILROOM_HEALTHCHECK_INTERVAL"},
      {{{"MAILROOM_POLL_INTERVAL", "0"}}, "MAILROOM_POLL_INTERVAL"},
      {{{"MAILROOM_LEASE_MS", "1e9"}}, "MAILROOM_LEASE_MS"},
      {{{"MAILROOM_RECONNECT_MAX_BACKOFF", "99999999999999999999"}},
       "MAILROOM_RECONNECT_MAX_BACKOFF"},
      {{{"MAILROOM_CHANNEL", "bad channel; DROP TABLE tokens"}}, "MAILROOM_CHANNEL"},
      {{{"MAILROOM_DB_POOL_SIZE", "1000"}}, "MAILROOM_DB_POOL_SIZE"},
      {{{"MAILROOM_DEFAULT_GROUP_BUDGET", "$100"}}, "MAILROOM_DEFAULT_GROUP_BUDGET"},
      {{{"MAILROOM_RECOVERY_RESERVE_PERCENT", "150"}}, "MAILROOM_RECOVERY_RESERVE_PERCENT"},
      {{{"MAILROOM_MAX_COST_MICROS", "0"}}, "MAILROOM_MAX_COST_MICROS"},
      {{{"MAILROOM_DEFAULT_GROUP_BUDGET", "0"}}, "MAILROOM_DEFAULT_GROUP_BUDGET"},
      {{{"MAILROOM_BUDGET_GRANT_LEASE_MS", "0"}}, "MAILROOM_BUDGET_GRANT_LEASE_MS"},
      {{{"MAILROOM_METRICS_ADDRESS", "x:y"}}, "MAILROOM_METRICS_ADDRESS"},
      {{{"MAILROOM_AUTO_MIGRATE", "sometimes"}}, "MAILROOM_AUTO_MIGRATE"},
      {{{"MAILROOM_LOG_LEVEL", "verbose"}}, "MAILROOM_LOG_LEVEL"},
      {{{"MAILROOM_FEEDBACK_ADDRESS", "127.0.0.1"}}, "MAILROOM_FEEDBACK_ADDRESS"},
      {{{"MAILROOM_FEEDBACK_TOPIC_ARNS", "topic"}}, "MAILROOM_FEEDBACK_TOPIC_ARNS"},
      {{{"MAILROOM_FEEDBACK_ADDRESS", "127.0.0.1:9470"}}, "MAILROOM_FEEDBACK_TOPIC_ARNS"},
      {{{"MAILROOM_FEEDBACK_WORKERS", "0"}}, "MAILROOM_FEEDBACK_WORKERS"},
      {{{"MAILROOM_FEEDBACK_REQUEST_TIMEOUT", "10"}}, "MAILROOM_FEEDBACK_REQUEST_TIMEOUT"},
      {{{"MAILROOM_FEEDBACK_CA_FILE", "/nonexistent.pem"}}, "MAILROOM_FEEDBACK_CA_FILE"},
      {{{"MAILROOM_FEEDBACK_SNS_HOSTS", "https://evil.test/"}}, "MAILROOM_FEEDBACK_SNS_HOSTS"},
      {{{"MAILROOM_FEEDBACK_MAX_AGE", "0"}}, "MAILROOM_FEEDBACK_MAX_AGE"},
      {{{"MAILROOM_SOFT_BOUNCE_LIMIT", "none"}}, "MAILROOM_SOFT_BOUNCE_LIMIT"},
      {{{"MAILROOM_REPUTATION_WINDOW", "1"}}, "MAILROOM_REPUTATION_WINDOW"},
      {{{"MAILROOM_REPUTATION_REFRESH", "0"}}, "MAILROOM_REPUTATION_REFRESH"},
      {{{"MAILROOM_GUARD_MAX_BOUNCE_RATE", "2%"}}, "MAILROOM_GUARD_MAX_BOUNCE_RATE"},
      {{{"MAILROOM_GUARD_MAX_COMPLAINT_RATE", "1.5"}}, "MAILROOM_GUARD_MAX_COMPLAINT_RATE"},
      {{{"MAILROOM_GUARD_MIN_SENT", "-1"}}, "MAILROOM_GUARD_MIN_SENT"},
      {{{"MAILROOM_RETENTION", "30 days"}}, "MAILROOM_RETENTION"},
      {{{"MAILROOM_RETENTION_INTERVAL", "0"}}, "MAILROOM_RETENTION_INTERVAL"},
  };
  for (const Case& c : cases) {
    std::map<std::string, std::string> env = base;
    for (const auto& [k, v] : c.env) env[k] = v;
    ExpectConfigError("mailroom/collector/collector", env, c.names,
                      {"pg-pass-word", key.substr(0, 16), "subscriber-token"});
  }
  // The migrate subcommand checks the URL too.
  auto p = Process::Spawn({testing::Runfile("mailroom/collector/collector"), "migrate"},
                          {{"MAILROOM_DATABASE_URL", "host=db pg-pass-word"}});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*(*p)->Wait(absl::Seconds(10)), 2);
  EXPECT_THAT((*p)->Log(), HasSubstr("MAILROOM_DATABASE_URL"));
  EXPECT_THAT((*p)->Log(), Not(HasSubstr("pg-pass-word")));
}

TEST(BadConfigTest, EverySenderVariableIsCheckedAndNamed) {
  const std::map<std::string, std::string> base = {
      {"MAILROOM_COLLECTOR_TOKEN", "collector-token-secret-1"},
      {"MAILROOM_METRICS_ADDRESS", "off"},
      {"MAILROOM_HEALTH_ADDRESS", "off"},
      {"MAILROOM_FILE_DIR", std::string(std::getenv("TEST_TMPDIR")) + "/out"},
  };
  const std::map<std::string, std::string> smtp = {{"MAILROOM_TRANSPORT", "smtp"},
                                                   {"MAILROOM_SMTP_URL", "smtp://127.0.0.1:1"}};
  const std::map<std::string, std::string> ses = {{"MAILROOM_TRANSPORT", "ses"},
                                                  {"AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"},
                                                  {"AWS_SECRET_ACCESS_KEY", "aws-secret-value"}};
  auto with = [](std::map<std::string, std::string> a,
                 const std::map<std::string, std::string>& b) {
    for (const auto& [k, v] : b) a[k] = v;
    return a;
  };
  const std::vector<Case> cases = {
      {{{"MAILROOM_COLLECTOR_ADDRESS", "nohost"}}, "MAILROOM_COLLECTOR_ADDRESS"},
      {{{"MAILROOM_COLLECTOR_TLS", "maybe"}}, "MAILROOM_COLLECTOR_TLS"},
      {{{"MAILROOM_COLLECTOR_ADDRESS", "mailroom-collector:50051"}}, "MAILROOM_COLLECTOR_ADDRESS"},
      {{{"MAILROOM_COLLECTOR_ADDRESS", "0.0.0.0:50051"}}, "MAILROOM_COLLECTOR_ADDRESS"},
      {{{"MAILROOM_ALLOW_PLAINTEXT", "maybe"}}, "MAILROOM_ALLOW_PLAINTEXT"},
      {{{"MAILROOM_COLLECTOR_CA", "/nonexistent.pem"}}, "MAILROOM_COLLECTOR_CA"},
      {{{"MAILROOM_COLLECTOR_CLIENT_CERT", "/nonexistent.pem"}}, "MAILROOM_COLLECTOR_CLIENT_CERT"},
      {{{"MAILROOM_COLLECTOR_CLIENT_KEY", "/nonexistent.pem"}}, "MAILROOM_COLLECTOR_CLIENT_KEY"},
      {{{"MAILROOM_CONSUMER_GROUP", "Bad Group"}}, "MAILROOM_CONSUMER_GROUP"},
      {{{"MAILROOM_MAX_IN_FLIGHT", "0"}}, "MAILROOM_MAX_IN_FLIGHT"},
      {{{"MAILROOM_SENDER_NAME", "two\nlines"}}, "MAILROOM_SENDER_NAME"},
      {{{"MAILROOM_TRANSPORT", "carrier-pigeon"}}, "MAILROOM_TRANSPORT"},
      {{{"MAILROOM_FILE_DIR", "/proc/not-here"}}, "MAILROOM_FILE_DIR"},
      {{{"MAILROOM_CONNECTIONS", "257"}}, "MAILROOM_CONNECTIONS"},
      {{{"MAILROOM_SEND_TIMEOUT_MS", "soon"}}, "MAILROOM_SEND_TIMEOUT_MS"},
      {{{"MAILROOM_FROM", "not an address"}}, "MAILROOM_FROM"},
      {{{"MAILROOM_FROM", "x@example.test\r\nBcc: victim@example.test"}}, "MAILROOM_FROM"},
      {{{"MAILROOM_LINK_BASE_URL", "ftp://example.test"}}, "MAILROOM_LINK_BASE_URL"},
      {{{"MAILROOM_PRODUCT_NAME", "x\r\nBcc: victim@example.test"}}, "MAILROOM_PRODUCT_NAME"},
      {{{"MAILROOM_TEMPLATE_DIR", "/nonexistent"}}, "MAILROOM_TEMPLATE_DIR"},
      {{{"MAILROOM_BUDGET", "-5"}}, "MAILROOM_BUDGET"},
      {{{"MAILROOM_BUDGET", "$100"}}, "MAILROOM_BUDGET"},
      {{{"MAILROOM_PRICE_PER_1000", "abc"}}, "MAILROOM_PRICE_PER_1000"},
      {{{"MAILROOM_PRICE_PER_1000", "0"}}, "MAILROOM_PRICE_PER_1000"},
      {{{"MAILROOM_PRICE_PER_1000", "0.0001"}}, "MAILROOM_PRICE_PER_1000"},
      {{{"MAILROOM_PRICE_PER_1000", "1001"}}, "MAILROOM_PRICE_PER_1000"},
      {{{"MAILROOM_BUDGET", "0"}}, "MAILROOM_BUDGET"},
      {{{"MAILROOM_BURST", "0"}}, "MAILROOM_BURST"},
      {{{"MAILROOM_PROVIDER_RATE_LIMIT", "fast"}}, "MAILROOM_PROVIDER_RATE_LIMIT"},
      {{{"MAILROOM_SES_ACCOUNT_INTERVAL_MS", "10"}}, "MAILROOM_SES_ACCOUNT_INTERVAL_MS"},
      {{{"MAILROOM_RETRY_MAX_ATTEMPTS", "0"}}, "MAILROOM_RETRY_MAX_ATTEMPTS"},
      {{{"MAILROOM_RETRY_BASE_MS", "x"}}, "MAILROOM_RETRY_BASE_MS"},
      {{{"MAILROOM_RETRY_BASE_MS", "5000"}, {"MAILROOM_RETRY_MAX_MS", "1000"}},
       "MAILROOM_RETRY_MAX_MS"},
      {{{"MAILROOM_EXPIRY_MARGIN_MS", "-1"}}, "MAILROOM_EXPIRY_MARGIN_MS"},
      {{{"MAILROOM_METRICS_ADDRESS", "x:y"}}, "MAILROOM_METRICS_ADDRESS"},
      {{{"MAILROOM_HEALTH_ADDRESS", "x:y"}}, "MAILROOM_HEALTH_ADDRESS"},
      {{{"MAILROOM_LOG_LEVEL", "loud"}}, "MAILROOM_LOG_LEVEL"},
      {{{"MAILROOM_TRANSPORT", "smtp"}}, "MAILROOM_SMTP_URL"},
      {with(smtp, {{"MAILROOM_SMTP_URL", "http://mail.example.test"}}), "MAILROOM_SMTP_URL"},
      {with(smtp, {{"MAILROOM_SMTP_USERNAME", "mailer"}}), "MAILROOM_SMTP_PASSWORD"},
      {with(smtp, {{"MAILROOM_SMTP_PASSWORD", "smtp-pass-word"}}), "MAILROOM_SMTP_USERNAME"},
      {with(smtp, {{"MAILROOM_SMTP_ALLOW_PLAIN", "perhaps"}}), "MAILROOM_SMTP_ALLOW_PLAIN"},
      {with(smtp, {{"MAILROOM_SMTP_CA_FILE", "/nonexistent.pem"}}), "MAILROOM_SMTP_CA_FILE"},
      {with(smtp, {{"MAILROOM_SMTP_INSECURE_SKIP_VERIFY", "2"}}),
       "MAILROOM_SMTP_INSECURE_SKIP_VERIFY"},
      {{{"MAILROOM_TRANSPORT", "ses"}}, "AWS_ACCESS_KEY_ID"},
      {with(ses, {{"AWS_ACCESS_KEY_ID", ""}}), "AWS_ACCESS_KEY_ID"},
      {with(ses, {{"AWS_SECRET_ACCESS_KEY", ""}}), "AWS_SECRET_ACCESS_KEY"},
      {with(ses, {{"MAILROOM_SES_REGION", "Mars"}}), "MAILROOM_SES_REGION"},
      {with(ses, {{"MAILROOM_SES_ENDPOINT", "email.example.test"}}), "MAILROOM_SES_ENDPOINT"},
      {with(ses, {{"MAILROOM_SES_CONFIGURATION_SET", "a b"}}), "MAILROOM_SES_CONFIGURATION_SET"},
  };
  for (const Case& c : cases) {
    std::map<std::string, std::string> env = base;
    for (const auto& [k, v] : c.env) env[k] = v;
    ExpectConfigError("mailroom/sender/sender", env, c.names,
                      {"collector-token-secret-1", "smtp-pass-word", "aws-secret-value"});
  }
}

class LegacyRowsTest : public testing::StackTest {};

TEST_F(LegacyRowsTest, NullAndShortCodesFailAloneAndTheRestIsDelivered) {
  // A database migrated from the seed's schema may hold rows the checks now forbid.
  Exec("ALTER TABLE tokens ALTER COLUMN code DROP NOT NULL");
  Exec("ALTER TABLE tokens DROP CONSTRAINT tokens_code_check");
  Exec("INSERT INTO accounts (email, login, status) SELECT 'r' || i || '@example.test', 'r' || i,"
       " 'active' FROM generate_series(1, 20) i");
  // Written past the insert trigger (which gives a code of the wrong length a new one), in the
  // inserting transaction, as rows from before the checks would be.
  Exec(
      "INSERT INTO tokens (account, action) SELECT id, 'password_recovery' FROM accounts;"
      " UPDATE tokens t SET code = CASE a.login WHEN 'r5' THEN NULL WHEN 'r6' THEN '12'"
      " ELSE 'abcde' END FROM accounts a WHERE a.id = t.account AND a.login IN ('r5', 'r6', 'r7')");
  auto sender = StartSender({{"MAILROOM_TRANSPORT", "file"}, {"MAILROOM_FILE_DIR", dir_ + "/out"}});
  testing::Ledger l = WaitSettled(absl::Seconds(30));
  EXPECT_EQ(l.unfinished, 0);
  EXPECT_EQ(l.sent, 17);
  EXPECT_EQ(l.failed, 3);
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states WHERE state = 'failed'"
                   " AND reason LIKE 'cannot sign token%'"),
            3);
  EXPECT_EQ(testing::Files(dir_ + "/out", ".eml").size(), 17u);
  EXPECT_TRUE(collector_->Running()) << collector_->Log();
}

// `--version` prints the version (common/version.h, the one place it is written) and the build,
// and exits 0, reading no configuration.
TEST(VersionTest, BothServicesPrintTheirVersionAndBuild) {
  for (const std::string name : {"collector", "sender"}) {
    auto p = Process::Spawn(
        {testing::Runfile(absl::StrCat("mailroom/", name, "/", name)), "--version"}, {});
    ASSERT_TRUE(p.ok());
    auto code = (*p)->Wait(absl::Seconds(10));
    ASSERT_TRUE(code.ok()) << (*p)->Log();
    EXPECT_EQ(*code, 0) << (*p)->Log();
    EXPECT_THAT((*p)->Log(), HasSubstr(absl::StrCat(name, " ", kVersion, "\nbuild: ")));
    EXPECT_THAT((*p)->Log(), HasSubstr(", gRPC 1."));
  }
}

class WrongRoleTest : public testing::StackTest {};

// The collector started with a role that cannot run mailroom (the application's URL given by
// mistake) stops at once with exit 2, naming the variable and each right the role lacks, never
// the password; it does not retry for ever.
TEST_F(WrongRoleTest, AnApplicationsRoleStopsTheCollectorNamingWhatItLacks) {
  Exec("CREATE ROLE app LOGIN PASSWORD 'app-pass-word'; SELECT mailroom.grant_application('app')");
  const std::string app_url = absl::StrReplaceAll(url_, {{"postgres@", "app:app-pass-word@"}});
  const auto env = testing::CollectorEnv(app_url, 0, std::string(64, 'a'),
                                         "subscriber-token-0123456789",
                                         {{"MAILROOM_METRICS_ADDRESS", "off"}});
  auto p = Process::Spawn({testing::Runfile("mailroom/collector/collector")}, env);
  ASSERT_TRUE(p.ok());
  auto code = (*p)->Wait(absl::Seconds(10));
  ASSERT_TRUE(code.ok()) << "the collector did not stop: " << (*p)->Log();
  const std::string log = (*p)->Log();
  EXPECT_EQ(*code, 2) << log;
  EXPECT_THAT(log, HasSubstr("config error: MAILROOM_DATABASE_URL: role app cannot run mailroom:"
                             " it lacks SELECT on mailroom.mailroom_settings, EXECUTE on"
                             " mailroom.mailroom_dequeue"))
      << log;
  EXPECT_THAT(log, Not(HasSubstr("app-pass-word")));
  EXPECT_THAT(log, Not(HasSubstr("permission denied")));
  // A role without even USAGE on the schema is told that too.
  Exec("CREATE ROLE nobody_here LOGIN");
  auto q = Process::Spawn(
      {testing::Runfile("mailroom/collector/collector")},
      testing::CollectorEnv(absl::StrReplaceAll(url_, {{"postgres@", "nobody_here@"}}), 0,
                            std::string(64, 'a'), "subscriber-token-0123456789",
                            {{"MAILROOM_METRICS_ADDRESS", "off"}}));
  ASSERT_TRUE(q.ok());
  auto qcode = (*q)->Wait(absl::Seconds(10));
  ASSERT_TRUE(qcode.ok()) << (*q)->Log();
  EXPECT_EQ(*qcode, 2);
  EXPECT_THAT((*q)->Log(), HasSubstr("it lacks USAGE on the schema mailroom, SELECT on"));
}

}  // namespace
}  // namespace mailroom
