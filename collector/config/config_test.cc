// LoadCollectorConfig's variables and the connection defaults it adds to the database URLs.
#include "collector/config/config.h"

#include <cstdlib>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "collector/db/testing/conninfo_option.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

class LoadConfigTest : public ::testing::Test {
 protected:
  absl::StatusOr<CollectorConfig> Load(std::map<std::string, std::string> extra) {
    vars_ = {{"MAILROOM_DATABASE_URL", "postgresql://u:pw@127.0.0.1:5432/db"},
             {"MAILROOM_SECRET_KEY", std::string(64, 'a')},
             {"MAILROOM_SUBSCRIBER_TOKENS", "scoped-token-0123456789@mailroom:subscriber"}};
    for (auto& [k, v] : extra) vars_[k] = v;
    return LoadCollectorConfig(Env([this](const char* name) -> const char* {
      auto it = vars_.find(name);
      return it == vars_.end() ? nullptr : it->second.c_str();
    }));
  }
  std::map<std::string, std::string> vars_;
};

TEST_F(LoadConfigTest, Defaults) {
  auto c = Load({});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_in_flight_cap, 10000);
  EXPECT_EQ(c->max_streams_per_credential, 64);
  EXPECT_EQ(c->min_price_micros, 100);
  EXPECT_EQ(c->dispatch.batch_limit, 10);
  EXPECT_EQ(c->dispatch.dequeue_limit, 1000);
  EXPECT_THAT(c->dispatch.groups, ElementsAre("mailroom"));
  EXPECT_EQ(c->database_url, "postgresql://u:pw@127.0.0.1:5432/db");
  EXPECT_EQ(c->direct_database_url, c->database_url);
  // Query connections: keepalives, and timeouts per transaction instead of session options
  // (pgbouncer refuses `options`); the direct ones keep them as session settings.
  EXPECT_EQ(ConninfoOption(c->dispatch.database_url, "tcp_user_timeout"), "30000");
  EXPECT_EQ(ConninfoOption(c->dispatch.database_url, "options"), std::nullopt);
  EXPECT_EQ(
      BeginCommand(c->tx_timeouts),
      "BEGIN; SET LOCAL search_path = pg_catalog, mailroom; SET LOCAL statement_timeout = 30000;"
      " SET LOCAL idle_in_transaction_session_timeout = 5000");
  EXPECT_EQ(ConninfoOption(c->dispatch.listen_database_url, "host"), "127.0.0.1");
  EXPECT_EQ(ConninfoOption(c->dispatch.listen_database_url, "options"),
            "-c statement_timeout=30000 -c idle_in_transaction_session_timeout=5000");
  ASSERT_EQ(c->credentials.size(), 1u);
  EXPECT_EQ(c->credentials[0].principal.roles, kRoleSubscriber);
  EXPECT_EQ(c->retention.retention, absl::Hours(24 * 30));
  EXPECT_EQ(c->retention.interval, absl::Minutes(1));
  EXPECT_EQ(c->retention.database_url, c->dispatch.listen_database_url);
}

// Each default is written once: the settings table reads the members' initializers, so what
// a configuration without the variables loads is what code built without a configuration (the
// tests, the service's limits) gets.
TEST_F(LoadConfigTest, TheLoadedDefaultsAreTheMembersDefaults) {
  auto c = Load({});
  ASSERT_TRUE(c.ok()) << c.status();
  const CollectorConfig config;
  const DispatcherOptions dispatch;
  const RetentionOptions retention;
  const ServiceLimits limits;
  EXPECT_EQ(c->max_in_flight_cap, config.max_in_flight_cap);
  EXPECT_EQ(c->max_streams_per_credential, config.max_streams_per_credential);
  EXPECT_EQ(c->db_pool_size, config.db_pool_size);
  EXPECT_EQ(c->max_cost_micros, config.max_cost_micros);
  EXPECT_EQ(c->min_price_micros, config.min_price_micros);
  EXPECT_EQ(c->max_in_flight_cap, limits.max_in_flight_cap);
  EXPECT_EQ(c->max_streams_per_credential, limits.max_streams_per_credential);
  EXPECT_EQ(c->max_cost_micros, limits.max_cost_micros);
  EXPECT_EQ(c->min_price_micros, limits.min_price_micros);
  EXPECT_EQ(c->dispatch.lease, limits.lease);
  EXPECT_EQ(c->dispatch.lease, dispatch.lease);
  EXPECT_EQ(c->dispatch.batch_limit, dispatch.batch_limit);
  EXPECT_EQ(c->dispatch.dequeue_limit, dispatch.dequeue_limit);
  EXPECT_EQ(c->dispatch.batch_timeout, dispatch.batch_timeout);
  EXPECT_EQ(c->dispatch.healthcheck_interval, dispatch.healthcheck_interval);
  EXPECT_EQ(c->dispatch.poll_interval, dispatch.poll_interval);
  EXPECT_EQ(c->dispatch.reconnect_max_backoff, dispatch.reconnect_max_backoff);
  EXPECT_EQ(c->dispatch.statement_timeout, dispatch.statement_timeout);
  EXPECT_EQ(c->retention.retention, retention.retention);
  EXPECT_EQ(c->retention.interval, retention.interval);
  // The one that differs on purpose: code without a configuration never polls busy (every
  // commit notifies); the service polls every 2 ms while busy.
  EXPECT_EQ(dispatch.busy_poll_interval, absl::ZeroDuration());
  EXPECT_EQ(c->dispatch.busy_poll_interval, absl::Milliseconds(2));
}

TEST_F(LoadConfigTest, DirectDatabaseUrl) {
  auto c = Load({{"MAILROOM_DATABASE_URL", "postgresql://u:pw@127.0.0.1:6432/db"},
                 {"MAILROOM_DIRECT_DATABASE_URL", "postgresql://u:pw@127.0.0.1:5432/db"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(ConninfoOption(c->dispatch.database_url, "port"), "6432");
  EXPECT_EQ(ConninfoOption(c->dispatch.listen_database_url, "port"), "5432");
  EXPECT_EQ(ConninfoOption(c->retention.database_url, "port"), "5432");
  EXPECT_EQ(c->direct_database_url, "postgresql://u:pw@127.0.0.1:5432/db");
  c = Load({{"MAILROOM_DIRECT_DATABASE_URL", "postgresql://u:secret-pw@[bad"}});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("MAILROOM_DIRECT_DATABASE_URL: not a PostgreSQL"));
  EXPECT_THAT(c.status().message(), Not(HasSubstr("secret-pw")));
}

TEST_F(LoadConfigTest, Retention) {
  auto c = Load({{"MAILROOM_RETENTION", "3600000"}, {"MAILROOM_RETENTION_INTERVAL", "500"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->retention.retention, absl::Hours(1));
  EXPECT_EQ(c->retention.interval, absl::Milliseconds(500));
  c = Load({{"MAILROOM_RETENTION", "0"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->retention.retention, absl::ZeroDuration());
}

TEST_F(LoadConfigTest, NewVariables) {
  auto c = Load({{"MAILROOM_MAX_IN_FLIGHT_CAP", "500"},
                 {"MAILROOM_MAX_STREAMS_PER_CREDENTIAL", "3"},
                 {"MAILROOM_GROUPS", "mailroom, audit"},
                 {"MAILROOM_STATEMENT_TIMEOUT", "2000"},
                 {"MAILROOM_DEQUEUE_LIMIT", "250"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_in_flight_cap, 500);
  EXPECT_EQ(c->max_streams_per_credential, 3);
  EXPECT_EQ(c->dispatch.dequeue_limit, 250);
  EXPECT_THAT(c->dispatch.groups, ElementsAre("mailroom", "audit"));
  EXPECT_EQ(ConninfoOption(c->dispatch.listen_database_url, "options"),
            "-c statement_timeout=2000 -c idle_in_transaction_session_timeout=5000");
  EXPECT_EQ(c->tx_timeouts.statement_timeout, absl::Seconds(2));
}

// MAILROOM_MAX_IN_FLIGHT is the sender's window; a collector given it refuses to start and
// names the variable it has instead, whatever the value.
TEST_F(LoadConfigTest, TheSendersWindowIsRefusedNamingTheCollectorsCap) {
  for (const char* value : {"100", "0", "many"}) {
    auto c = Load({{"MAILROOM_MAX_IN_FLIGHT", value}, {"MAILROOM_MAX_IN_FLIGHT_CAP", "500"}});
    ASSERT_FALSE(c.ok()) << value;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(c.status().message(),
              "MAILROOM_MAX_IN_FLIGHT: not a collector setting: MAILROOM_MAX_IN_FLIGHT is the "
              "sender's window; the collector's cap is MAILROOM_MAX_IN_FLIGHT_CAP");
  }
}

TEST_F(LoadConfigTest, GroupBudgetDefaults) {
  auto c = Load({});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->budget.monthly_budget_micros.has_value());
  EXPECT_EQ(c->budget.recovery_reserve_percent, 10);
  EXPECT_EQ(c->budget.grant_lease, absl::Seconds(10));
  c = Load({{"MAILROOM_DEFAULT_GROUP_BUDGET", "100.5"},
            {"MAILROOM_RECOVERY_RESERVE_PERCENT", "25"},
            {"MAILROOM_BUDGET_GRANT_LEASE_MS", "5000"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->budget.monthly_budget_micros, 100500000);
  EXPECT_EQ(c->budget.recovery_reserve_percent, 25);
  EXPECT_EQ(c->budget.grant_lease, absl::Seconds(5));
  c = Load({{"MAILROOM_DEFAULT_GROUP_BUDGET", "Unlimited"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->budget.monthly_budget_micros.has_value());
}

TEST_F(LoadConfigTest, ErrorsNameTheVariable) {
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {{{"MAILROOM_MAX_IN_FLIGHT_CAP", "0"}}, "MAILROOM_MAX_IN_FLIGHT_CAP"},
      {{{"MAILROOM_MAX_IN_FLIGHT_CAP", "100001"}}, "MAILROOM_MAX_IN_FLIGHT_CAP"},
      {{{"MAILROOM_MAX_IN_FLIGHT_CAP", "many"}}, "MAILROOM_MAX_IN_FLIGHT_CAP"},
      // The sender's window, set on a collector.
      {{{"MAILROOM_MAX_IN_FLIGHT", "500"}}, "MAILROOM_MAX_IN_FLIGHT"},
      {{{"MAILROOM_MAX_STREAMS_PER_CREDENTIAL", "0"}}, "MAILROOM_MAX_STREAMS_PER_CREDENTIAL"},
      {{{"MAILROOM_MAX_STREAMS_PER_CREDENTIAL", "lots"}}, "MAILROOM_MAX_STREAMS_PER_CREDENTIAL"},
      {{{"MAILROOM_DEQUEUE_LIMIT", "0"}}, "MAILROOM_DEQUEUE_LIMIT"},
      {{{"MAILROOM_DEQUEUE_LIMIT", "10001"}}, "MAILROOM_DEQUEUE_LIMIT"},
      {{{"MAILROOM_GROUPS", "mailroom,Bad Group"}}, "MAILROOM_GROUPS"},
      {{{"MAILROOM_GROUPS", " , "}}, "MAILROOM_GROUPS"},
      {{{"MAILROOM_STATEMENT_TIMEOUT", "10"}}, "MAILROOM_STATEMENT_TIMEOUT"},
      {{{"MAILROOM_DEFAULT_GROUP_BUDGET", "-1"}}, "MAILROOM_DEFAULT_GROUP_BUDGET"},
      {{{"MAILROOM_DEFAULT_GROUP_BUDGET", "lots"}}, "MAILROOM_DEFAULT_GROUP_BUDGET"},
      {{{"MAILROOM_RECOVERY_RESERVE_PERCENT", "101"}}, "MAILROOM_RECOVERY_RESERVE_PERCENT"},
      // Money and limits: a zero or absurd value that would silently stop delivery or let
      // one sender take a group's month is refused.
      {{{"MAILROOM_MAX_COST_MICROS", "0"}}, "MAILROOM_MAX_COST_MICROS"},
      {{{"MAILROOM_MAX_COST_MICROS", "100000001"}}, "MAILROOM_MAX_COST_MICROS"},
      {{{"MAILROOM_MIN_PRICE_MICROS", "0"}}, "MAILROOM_MIN_PRICE_MICROS"},
      {{{"MAILROOM_MIN_PRICE_MICROS", "1001"}, {"MAILROOM_MAX_COST_MICROS", "1000"}},
       "MAILROOM_MIN_PRICE_MICROS"},
      {{{"MAILROOM_DEFAULT_GROUP_BUDGET", "0"}}, "MAILROOM_DEFAULT_GROUP_BUDGET"},
      {{{"MAILROOM_DEFAULT_GROUP_BUDGET", "1e12"}}, "MAILROOM_DEFAULT_GROUP_BUDGET"},
      {{{"MAILROOM_RECOVERY_RESERVE_PERCENT", "100"}}, "MAILROOM_RECOVERY_RESERVE_PERCENT"},
      {{{"MAILROOM_BUDGET_GRANT_LEASE_MS", "10"}}, "MAILROOM_BUDGET_GRANT_LEASE_MS"},
      {{{"MAILROOM_RETENTION", "-1"}}, "MAILROOM_RETENTION"},
      {{{"MAILROOM_RETENTION", "30d"}}, "MAILROOM_RETENTION"},
      {{{"MAILROOM_RETENTION", "315360000001"}}, "MAILROOM_RETENTION"},
      {{{"MAILROOM_RETENTION_INTERVAL", "10"}}, "MAILROOM_RETENTION_INTERVAL"},
      {{{"MAILROOM_SUBSCRIBER_TOKENS", "hidden-token-0123456789@mailroom:root"}},
       "MAILROOM_SUBSCRIBER_TOKENS"},
  };
  for (const auto& [vars, name] : cases) {
    auto c = Load(vars);
    ASSERT_FALSE(c.ok()) << name;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(name + ":"));
    EXPECT_THAT(std::string(c.status().message()), Not(HasSubstr("hidden-token")));
  }
}

}  // namespace
}  // namespace mailroom

namespace mailroom {
namespace {

// Moved from integration_tests/collector_test: a malformed key names its variable and is never
// echoed (bad_input_test checks the binary's exit code for every variable).
TEST_F(LoadConfigTest, ConfigErrorsNameTheVariableWithoutEchoingSecrets) {
  const std::string secret_ish = "zz0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
  auto c = Load({{"MAILROOM_SECRET_KEY", secret_ish}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("MAILROOM_SECRET_KEY"));
  EXPECT_THAT(c.status().message(), Not(HasSubstr(secret_ish)));
  EXPECT_THAT(c.status().message(), Not(HasSubstr("0102030405")));
  const std::string token = "leaky-token-0123456789@nope!:subscriber";
  c = Load({{"MAILROOM_SUBSCRIBER_TOKENS", token}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("MAILROOM_SUBSCRIBER_TOKENS"));
  EXPECT_THAT(c.status().message(), Not(HasSubstr("leaky-token")));
  c = Load({{"MAILROOM_GROUPS", "mailroom,Bad Group"}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("MAILROOM_GROUPS"));
}

}  // namespace
}  // namespace mailroom

namespace mailroom {
namespace {

TEST_F(LoadConfigTest, FeedbackIsOffByDefaultAndTakesItsVariables) {
  auto d = Load({});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->feedback.address, "");
  EXPECT_EQ(d->feedback.soft_bounce_limit, 3);
  EXPECT_EQ(d->feedback.reputation_window, absl::Hours(24 * 7));
  EXPECT_EQ(d->feedback.sns.max_age, absl::Hours(1));
  EXPECT_FALSE(d->feedback.guard.enabled());
  EXPECT_EQ(d->feedback.guard.min_sent, 100u);
  EXPECT_EQ(d->feedback.server.workers, 32);
  EXPECT_EQ(d->feedback.server.request_timeout, absl::Seconds(6));
  EXPECT_EQ(d->feedback.server.max_body, 256u * 1024);

  auto c = Load({{"MAILROOM_FEEDBACK_ADDRESS", "127.0.0.1:9470"},
                 {"MAILROOM_FEEDBACK_SNS_HOSTS", "127.0.0.1:8443"},
                 {"MAILROOM_FEEDBACK_TOPIC_ARNS", "arn:aws:sns:eu-west-1:123456789012:fb"},
                 {"MAILROOM_FEEDBACK_MAX_AGE", "600000"},
                 {"MAILROOM_SOFT_BOUNCE_LIMIT", "5"},
                 {"MAILROOM_REPUTATION_WINDOW", "86400000"},
                 {"MAILROOM_REPUTATION_REFRESH", "1000"},
                 {"MAILROOM_GUARD_MAX_BOUNCE_RATE", "0.02"},
                 {"MAILROOM_GUARD_MAX_COMPLAINT_RATE", "0.0005"},
                 {"MAILROOM_GUARD_MIN_SENT", "500"},
                 {"MAILROOM_FEEDBACK_WORKERS", "8"},
                 {"MAILROOM_FEEDBACK_REQUEST_TIMEOUT", "3000"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->feedback.address, "127.0.0.1:9470");
  EXPECT_THAT(c->feedback.sns.extra_hosts, ElementsAre("127.0.0.1:8443"));
  EXPECT_THAT(c->feedback.sns.topic_arns, ElementsAre("arn:aws:sns:eu-west-1:123456789012:fb"));
  EXPECT_EQ(c->feedback.sns.max_age, absl::Minutes(10));
  EXPECT_EQ(c->feedback.soft_bounce_limit, 5);
  EXPECT_EQ(c->feedback.reputation_window, absl::Hours(24));
  EXPECT_EQ(c->feedback.reputation_refresh, absl::Seconds(1));
  EXPECT_DOUBLE_EQ(c->feedback.guard.max_bounce_rate, 0.02);
  EXPECT_DOUBLE_EQ(c->feedback.guard.max_complaint_rate, 0.0005);
  EXPECT_EQ(c->feedback.guard.min_sent, 500u);
  EXPECT_TRUE(c->feedback.guard.enabled());
  EXPECT_EQ(c->feedback.server.workers, 8);
  EXPECT_EQ(c->feedback.server.request_timeout, absl::Seconds(3));
}

// Anyone can publish signed messages from a topic of their own: the endpoint does not start
// without the operator's topics.
TEST_F(LoadConfigTest, TheFeedbackEndpointNeedsItsTopics) {
  auto c = Load({{"MAILROOM_FEEDBACK_ADDRESS", "127.0.0.1:9470"}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("MAILROOM_FEEDBACK_TOPIC_ARNS: required when MAILROOM_FEEDBACK_ADDRESS"));
  EXPECT_TRUE(
      Load({{"MAILROOM_FEEDBACK_TOPIC_ARNS", "arn:aws:sns:eu-west-1:123456789012:fb"}}).ok());
}

// Each provider's path is on with its secret; the endpoint may then run without SNS topics.
TEST_F(LoadConfigTest, ProviderFeedbackPathsTakeTheirSecrets) {
  const std::string whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
  const std::string dir = getenv("TEST_TMPDIR");
  {
    std::ofstream f(dir + "/mailgun.key");
    f << "key-3ax6xnjp29jd6fds4gc373sgvjxteol0\n";
  }
  auto c = Load({{"MAILROOM_FEEDBACK_ADDRESS", "127.0.0.1:9470"},
                 {"MAILROOM_FEEDBACK_POSTMARK_CREDENTIALS", "postmark:9b3e1c0f7a6d4e25"},
                 {"MAILROOM_FEEDBACK_SENDGRID_PUBLIC_KEY",
                  "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEDr2LjtURuePQzplybdC+u4CwrqDqBaWjcMMsTbhdbc"
                  "wHBcepxo7yAQGhHPTnlvFYPAZFceEu/1FwCM/QmGUhA=="},
                 {"MAILROOM_FEEDBACK_MAILGUN_SIGNING_KEY_FILE", dir + "/mailgun.key"},
                 {"MAILROOM_FEEDBACK_RESEND_SECRET", whsec},
                 {"MAILROOM_FEEDBACK_HTTP_SECRET", whsec + " " + whsec},
                 {"MAILROOM_FEEDBACK_SANDBOX_SECRET", whsec},
                 {"MAILROOM_FEEDBACK_MAX_AGE", "600000"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->feedback.providers.Enabled(),
              ElementsAre("postmark", "sendgrid", "mailgun", "resend", "http", "sandbox"));
  EXPECT_EQ(c->feedback.providers.sandbox_keys.size(), 1u);
  EXPECT_EQ(c->feedback.providers.mailgun_signing_key, "key-3ax6xnjp29jd6fds4gc373sgvjxteol0");
  EXPECT_EQ(c->feedback.providers.http_keys.size(), 2u);
  EXPECT_EQ(c->feedback.providers.max_age, absl::Minutes(10));
  EXPECT_EQ(FeedbackPaths(c->feedback), "postmark,sendgrid,mailgun,resend,http,sandbox");
  EXPECT_EQ(FeedbackPaths(Load({})->feedback), "none");

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"MAILROOM_FEEDBACK_POSTMARK_CREDENTIALS", "postmark:short"},
      {"MAILROOM_FEEDBACK_POSTMARK_CREDENTIALS", "no-colon-at-all-0123456789"},
      {"MAILROOM_FEEDBACK_SENDGRID_PUBLIC_KEY", "c2VjcmV0LWlzaC12YWx1ZQ=="},
      {"MAILROOM_FEEDBACK_RESEND_SECRET", "secret-ish-value-0123456789"},
      {"MAILROOM_FEEDBACK_HTTP_SECRET", "whsec_c2VjcmV0"},
      {"MAILROOM_FEEDBACK_SANDBOX_SECRET", "whsec_c2VjcmV0"},
      {"MAILROOM_FEEDBACK_MAILGUN_SIGNING_KEY_FILE", "/nonexistent/key"},
  };
  for (const auto& [name, value] : bad) {
    auto e = Load({{name, value}});
    ASSERT_FALSE(e.ok()) << name;
    EXPECT_THAT(std::string(e.status().message()), HasSubstr(name));
    if (name.find("_FILE") == std::string::npos) {
      EXPECT_THAT(std::string(e.status().message()), Not(HasSubstr(value.substr(9)))) << name;
    }
  }
  auto both = Load({{"MAILROOM_FEEDBACK_MAILGUN_SIGNING_KEY", "key-a"},
                    {"MAILROOM_FEEDBACK_MAILGUN_SIGNING_KEY_FILE", dir + "/mailgun.key"}});
  ASSERT_FALSE(both.ok());
  EXPECT_THAT(std::string(both.status().message()),
              HasSubstr("MAILROOM_FEEDBACK_MAILGUN_SIGNING_KEY: set either it or"));
}

// Per-group delivery-report secrets turn /feedback/http on, each for its group; the opt-in for
// unmatched events names providers. Errors name the variable and the entry's position, never a
// secret.
TEST_F(LoadConfigTest, HttpGroupSecretsAndTheUnmatchedOptIn) {
  const std::string whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
  auto c = Load({{"MAILROOM_FEEDBACK_ADDRESS", "127.0.0.1:9470"},
                 {"MAILROOM_FEEDBACK_HTTP_GROUP_SECRETS",
                  absl::StrCat("mailroom:", whsec, ", billing:", whsec, ",mailroom:", whsec)},
                 {"MAILROOM_FEEDBACK_SUPPRESS_UNMATCHED", "ses, postmark"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->feedback.providers.Enabled(), ElementsAre("http"));
  EXPECT_TRUE(c->feedback.providers.http_keys.empty());
  std::vector<std::string> groups;
  for (const GroupWebhookKeys& g : c->feedback.providers.http_group_keys) {
    groups.push_back(absl::StrCat(g.group, "/", g.keys.size()));
  }
  EXPECT_THAT(groups, ElementsAre("mailroom/1", "billing/1", "mailroom/1"));
  EXPECT_THAT(c->feedback.providers.suppress_unmatched, ElementsAre("ses", "postmark"));
  EXPECT_TRUE(Load({})->feedback.providers.suppress_unmatched.empty());

  for (const std::string& value :
       {absl::StrCat("mailroom:", whsec, ",", whsec), absl::StrCat("Bad Group:", whsec),
        std::string("mailroom:whsec_c2VjcmV0")}) {
    auto e = Load({{"MAILROOM_FEEDBACK_HTTP_GROUP_SECRETS", value}});
    ASSERT_FALSE(e.ok()) << value;
    EXPECT_THAT(std::string(e.status().message()),
                HasSubstr("MAILROOM_FEEDBACK_HTTP_GROUP_SECRETS: entry "));
    EXPECT_THAT(std::string(e.status().message()), Not(HasSubstr("MfKQ9r8G")));
    EXPECT_THAT(std::string(e.status().message()), Not(HasSubstr("c2VjcmV0")));
  }
  auto unknown = Load({{"MAILROOM_FEEDBACK_SUPPRESS_UNMATCHED", "ses,mailchimp"}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()),
              HasSubstr("MAILROOM_FEEDBACK_SUPPRESS_UNMATCHED: \"mailchimp\""));
  // The sandbox posts an unmatched event again: the opt-in would suppress on each post.
  auto sandbox = Load({{"MAILROOM_FEEDBACK_SUPPRESS_UNMATCHED", "sandbox"}});
  ASSERT_FALSE(sandbox.ok());
  EXPECT_THAT(std::string(sandbox.status().message()),
              HasSubstr("MAILROOM_FEEDBACK_SUPPRESS_UNMATCHED: sandbox cannot be named"));
}

TEST_F(LoadConfigTest, FeedbackErrorsNameTheVariable) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"MAILROOM_FEEDBACK_ADDRESS", "nowhere"},
      {"MAILROOM_FEEDBACK_SNS_HOSTS", "evil.test/x"},
      {"MAILROOM_FEEDBACK_TOPIC_ARNS", "my-topic"},
      {"MAILROOM_FEEDBACK_TOPIC_ARNS", "arn:aws:s3:::bucket"},
      {"MAILROOM_FEEDBACK_WORKERS", "0"},
      {"MAILROOM_FEEDBACK_REQUEST_TIMEOUT", "100"},
      {"MAILROOM_FEEDBACK_CA_FILE", "/nonexistent/ca.pem"},
      {"MAILROOM_FEEDBACK_MAX_AGE", "10"},
      {"MAILROOM_SOFT_BOUNCE_LIMIT", "0"},
      {"MAILROOM_REPUTATION_WINDOW", "1000"},
      {"MAILROOM_REPUTATION_REFRESH", "soon"},
      {"MAILROOM_GUARD_MAX_BOUNCE_RATE", "2"},
      {"MAILROOM_GUARD_MAX_COMPLAINT_RATE", "-0.1"},
      {"MAILROOM_GUARD_MIN_SENT", "0"},
  };
  for (const auto& [name, value] : cases) {
    auto c = Load({{name, value}});
    ASSERT_FALSE(c.ok()) << name;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(name + ":"));
  }
}

TEST(LoopbackAddressTest, OnlyLoopbackHostsCount) {
  for (const char* a : {"127.0.0.1:50051", "127.8.9.10:1", "localhost:50051", "LocalHost:0",
                        "[::1]:50051", "[::ffff:127.0.0.1]:50051"}) {
    EXPECT_TRUE(IsLoopbackAddress(a)) << a;
  }
  for (const char* a : {"0.0.0.0:50051", "[::]:50051", "10.1.2.3:50051", "128.0.0.1:50051",
                        "[::2]:50051", "[::ffff:10.0.0.1]:50051", "collector:50051",
                        "localhost.example:50051", "127.0.0.1.example:50051"}) {
    EXPECT_FALSE(IsLoopbackAddress(a)) << a;
  }
}

// A readable PEM-named file: LoadCollectorConfig only checks that the TLS files can be read.
std::string ReadableFile(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << "-----BEGIN CERTIFICATE-----\n";
  return path;
}

// The console: off by default; on loopback only (unless plaintext is allowed), and only with
// tokens to sign in with.
TEST_F(LoadConfigTest, TheConsoleListensOnLoopbackWithTokensOnly) {
  auto off = Load({});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->console_address, "");
  auto on = Load({{"MAILROOM_CONSOLE_ADDRESS", "127.0.0.1:9480"}});
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(on->console_address, "127.0.0.1:9480");
  auto network = Load({{"MAILROOM_CONSOLE_ADDRESS", "0.0.0.0:9480"}});
  ASSERT_FALSE(network.ok());
  EXPECT_THAT(network.status().message(), HasSubstr("MAILROOM_CONSOLE_ADDRESS: \"0.0.0.0:9480\""));
  EXPECT_TRUE(
      Load({{"MAILROOM_CONSOLE_ADDRESS", "0.0.0.0:9480"}, {"MAILROOM_ALLOW_PLAINTEXT", "true"}})
          .ok());
  auto bad = Load({{"MAILROOM_CONSOLE_ADDRESS", "nowhere"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("MAILROOM_CONSOLE_ADDRESS"));
  auto anonymous = Load({{"MAILROOM_CONSOLE_ADDRESS", "127.0.0.1:9480"},
                         {"MAILROOM_SUBSCRIBER_TOKENS", ""},
                         {"MAILROOM_INSECURE_NO_AUTH", "true"}});
  ASSERT_FALSE(anonymous.ok());
  EXPECT_THAT(anonymous.status().message(),
              HasSubstr("MAILROOM_CONSOLE_ADDRESS: the console's sign-in takes an operator token"));
}

TEST_F(LoadConfigTest, PlaintextOnANetworkAddressIsRefusedUnlessAllowed) {
  for (const char* address : {"0.0.0.0:50051", "[::]:50051", "10.1.2.3:50051", "collector:50051"}) {
    auto c = Load({{"MAILROOM_LISTEN_ADDRESS", address}});
    ASSERT_FALSE(c.ok()) << address;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(c.status().message());
    EXPECT_THAT(message, HasSubstr("MAILROOM_LISTEN_ADDRESS: "));
    EXPECT_THAT(message, HasSubstr(address));
    EXPECT_THAT(message, HasSubstr("MAILROOM_TLS_CERT"));
    EXPECT_THAT(message, HasSubstr("MAILROOM_ALLOW_PLAINTEXT=true"));
  }
  // Loopback, TLS, or the explicit setting.
  for (const char* address : {"127.0.0.1:50051", "[::1]:50051", "localhost:50051"}) {
    auto c = Load({{"MAILROOM_LISTEN_ADDRESS", address}});
    ASSERT_TRUE(c.ok()) << address << ": " << c.status();
    EXPECT_FALSE(c->allow_plaintext);
  }
  auto c = Load({{"MAILROOM_LISTEN_ADDRESS", "0.0.0.0:50051"},
                 {"MAILROOM_TLS_CERT", ReadableFile("cert.pem")},
                 {"MAILROOM_TLS_KEY", ReadableFile("key.pem")}});
  ASSERT_TRUE(c.ok()) << c.status();
  c = Load({{"MAILROOM_LISTEN_ADDRESS", "0.0.0.0:50051"}, {"MAILROOM_ALLOW_PLAINTEXT", "true"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->allow_plaintext);
  c = Load({{"MAILROOM_LISTEN_ADDRESS", "0.0.0.0:50051"}, {"MAILROOM_ALLOW_PLAINTEXT", "false"}});
  EXPECT_FALSE(c.ok());
  c = Load({{"MAILROOM_ALLOW_PLAINTEXT", "perhaps"}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("MAILROOM_ALLOW_PLAINTEXT:"));
}

TEST_F(LoadConfigTest, HealthAddressIsOffByDefault) {
  auto c = Load({});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->health_address, "");
  c = Load({{"MAILROOM_HEALTH_ADDRESS", "0.0.0.0:50053"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->health_address, "0.0.0.0:50053");
  c = Load({{"MAILROOM_HEALTH_ADDRESS", "50053"}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("MAILROOM_HEALTH_ADDRESS:"));
}

}  // namespace
}  // namespace mailroom
