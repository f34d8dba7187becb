#include "sender/config/config.h"

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sender/transport/file_transport.h"
#include "sender/transport/http_transport.h"
#include "sender/transport/provider_transport.h"
#include "sender/transport/sandbox_transport.h"
#include "sender/transport/ses_transport.h"
#include "sender/transport/smtp_session.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

Env Vars(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return Env([shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  });
}

// Variable -> value changes, each with the variable its error must start with.
using Changes = std::map<std::string, std::pair<std::map<std::string, std::string>, std::string>>;

// Each change of `base` is refused with an error that names its variable and never shows
// `secret`.
void ExpectRefused(const std::map<std::string, std::string>& base, const Changes& bad,
                   const std::string& secret) {
  for (const auto& [what, change] : bad) {
    auto w = base;
    for (const auto& [k, val] : change.first) w[k] = val;
    auto r = LoadSenderConfig(Vars(w));
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_TRUE(absl::StartsWith(r.status().message(), change.second))
        << what << ": " << r.status();
    EXPECT_THAT(std::string(r.status().message()), Not(HasSubstr(secret))) << what;
  }
}

TEST(SenderConfigTest, DefaultsAreTheReadmes) {
  auto c = LoadSenderConfig(Vars({}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->collector_address, "127.0.0.1:50051");
  EXPECT_EQ(c->group, "mailroom");
  EXPECT_EQ(c->transport.kind, "file");
  EXPECT_EQ(c->transport.Get<FileSettings>().dir, "./outbox");
  EXPECT_EQ(c->template_dir, "");
  EXPECT_FALSE(c->monthly_budget.has_value());
  EXPECT_EQ(c->ses_account_interval, absl::Minutes(5));
  EXPECT_EQ(c->ack_delay, absl::Milliseconds(5));
}

TEST(SenderConfigTest, AckDelay) {
  for (const auto& [value, want] :
       std::map<std::string, absl::Duration>{{"0", absl::ZeroDuration()},
                                             {"20", absl::Milliseconds(20)},
                                             {"1000", absl::Seconds(1)}}) {
    auto c = LoadSenderConfig(Vars({{"MAILROOM_ACK_DELAY_MS", value}}));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->ack_delay, want) << value;
  }
  for (const char* bad : {"-1", "1001", "soon"}) {
    auto c = LoadSenderConfig(Vars({{"MAILROOM_ACK_DELAY_MS", bad}}));
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_TRUE(absl::StartsWith(c.status().message(), "MAILROOM_ACK_DELAY_MS: ")) << c.status();
  }
}

TEST(SenderConfigTest, SesAccountInterval) {
  auto c = LoadSenderConfig(Vars({{"MAILROOM_SES_ACCOUNT_INTERVAL_MS", "60000"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ses_account_interval, absl::Minutes(1));
  for (const char* bad : {"999", "86400001", "often"}) {
    c = LoadSenderConfig(Vars({{"MAILROOM_SES_ACCOUNT_INTERVAL_MS", bad}}));
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_TRUE(absl::StartsWith(c.status().message(), "MAILROOM_SES_ACCOUNT_INTERVAL_MS: "))
        << c.status();
  }
}

// The first error of `vars` names `var`.
void ExpectRefused(std::map<std::string, std::string> vars, const std::string& var) {
  const std::string what = vars.begin()->first + "=" + vars.begin()->second;
  auto c = LoadSenderConfig(Vars(std::move(vars)));
  ASSERT_FALSE(c.ok()) << what;
  EXPECT_TRUE(absl::StartsWith(c.status().message(), var + ": ")) << what << ": " << c.status();
}

TEST(SenderConfigTest, MoneyAndLimitSettingsHaveRanges) {
  // An email must cost at least one micro-unit exactly (0.001 per 1000): a price that rounds
  // up to it would let the group's budget count a fraction of what the provider bills.
  for (const char* bad : {"0", "0.0009", "-0.1", "1000.01", "inf", "nan"}) {
    ExpectRefused({{"MAILROOM_PRICE_PER_1000", bad}}, "MAILROOM_PRICE_PER_1000");
  }
  for (const auto& [value, micros] :
       std::map<std::string, double>{{"0.001", 1}, {"0.10", 100}, {"1000", 1e6}}) {
    auto c = LoadSenderConfig(Vars({{"MAILROOM_PRICE_PER_1000", value}}));
    ASSERT_TRUE(c.ok()) << value << ": " << c.status();
    EXPECT_DOUBLE_EQ(c->price_per_1000 * 1000, micros) << value;
  }
  // The sender's own cap must allow one email at least.
  for (const char* bad : {"0", "0.00009", "-5"}) {
    ExpectRefused({{"MAILROOM_BUDGET", bad}}, "MAILROOM_BUDGET");
  }
  ExpectRefused({{"MAILROOM_BUDGET", "0.5"}, {"MAILROOM_PRICE_PER_1000", "1000"}},
                "MAILROOM_BUDGET");
  auto cap = LoadSenderConfig(Vars({{"MAILROOM_BUDGET", "0.0001"}}));
  ASSERT_TRUE(cap.ok()) << cap.status();
  EXPECT_EQ(*cap->monthly_budget, 0.0001);
  for (const auto& [var, bad] :
       std::map<std::string, std::string>{{"MAILROOM_BURST", "0"},
                                          {"MAILROOM_PROVIDER_RATE_LIMIT", "0"},
                                          {"MAILROOM_RETRY_MAX_ATTEMPTS", "0"},
                                          {"MAILROOM_MAX_IN_FLIGHT", "0"},
                                          {"MAILROOM_CONNECTIONS", "0"},
                                          {"MAILROOM_RETRY_BASE_MS", "0"}}) {
    ExpectRefused({{var, bad}}, var);
  }
  // Up to 256 connections: a provider 100 ms away needs more than 64 for a few hundred
  // emails/s (4 round trips per SMTP message).
  auto wide = LoadSenderConfig(Vars({{"MAILROOM_CONNECTIONS", "256"}}));
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(wide->transport.connections, 256);
  ExpectRefused({{"MAILROOM_CONNECTIONS", "257"}}, "MAILROOM_CONNECTIONS");
}

// Plaintext to a collector reachable over the network carries the bearer token and the signed
// tokens in clear: only with TLS, on a loopback address, or when the operator says so.
TEST(SenderConfigTest, PlaintextToANetworkAddressIsRefusedUnlessAllowed) {
  for (const char* address : {"mailroom-collector:50051", "10.1.2.3:50051", "[::]:50051"}) {
    ExpectRefused({{"MAILROOM_COLLECTOR_ADDRESS", address}}, "MAILROOM_COLLECTOR_ADDRESS");
    EXPECT_TRUE(LoadSenderConfig(Vars({{"MAILROOM_COLLECTOR_ADDRESS", address},
                                       {"MAILROOM_COLLECTOR_TLS", "true"}}))
                    .ok())
        << address;
    auto allowed = LoadSenderConfig(
        Vars({{"MAILROOM_COLLECTOR_ADDRESS", address}, {"MAILROOM_ALLOW_PLAINTEXT", "true"}}));
    ASSERT_TRUE(allowed.ok()) << allowed.status();
    EXPECT_TRUE(allowed->allow_plaintext);
  }
  for (const char* address : {"127.0.0.1:50051", "localhost:50051", "[::1]:50051"}) {
    EXPECT_TRUE(LoadSenderConfig(Vars({{"MAILROOM_COLLECTOR_ADDRESS", address}})).ok()) << address;
  }
}

TEST(SenderConfigTest, TheTransportPartCarriesEverySetting) {
  auto c = LoadSenderConfig(Vars({{"MAILROOM_TRANSPORT", "SMTP"},
                                  {"MAILROOM_SMTP_URL", "smtps://mail.example:465"},
                                  {"MAILROOM_SMTP_USERNAME", "u"},
                                  {"MAILROOM_SMTP_PASSWORD", "hunter2-secret"},
                                  {"MAILROOM_SMTP_ALLOW_PLAIN", "true"},
                                  {"MAILROOM_CONNECTIONS", "7"},
                                  {"MAILROOM_SEND_TIMEOUT_MS", "1500"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  TransportConfig t = TransportConfigOf(*c);
  EXPECT_EQ(t.kind, "smtp");
  EXPECT_EQ(t.Get<SmtpSettings>().url, "smtps://mail.example:465");
  EXPECT_EQ(t.Get<SmtpSettings>().username, "u");
  EXPECT_EQ(t.Get<SmtpSettings>().password, "hunter2-secret");
  EXPECT_FALSE(t.Get<SmtpSettings>().require_tls);
  EXPECT_EQ(t.connections, 7);
  EXPECT_EQ(t.timeout, absl::Milliseconds(1500));

  auto ses = LoadSenderConfig(Vars({{"MAILROOM_TRANSPORT", "ses"},
                                    {"MAILROOM_SES_REGION", "eu-west-2"},
                                    {"AWS_ACCESS_KEY_ID", "AKID"},
                                    {"AWS_SECRET_ACCESS_KEY", "s3cr3t"},
                                    {"AWS_SESSION_TOKEN", "tok"},
                                    {"MAILROOM_SES_CONFIGURATION_SET", "cs-1"}}));
  ASSERT_TRUE(ses.ok()) << ses.status();
  t = TransportConfigOf(*ses);
  EXPECT_EQ(t.kind, "ses");
  EXPECT_EQ(t.Get<SesSettings>().region, "eu-west-2");
  EXPECT_EQ(t.Get<SesSettings>().access_key_id, "AKID");
  EXPECT_EQ(t.Get<SesSettings>().secret_access_key, "s3cr3t");
  EXPECT_EQ(t.Get<SesSettings>().session_token, "tok");
  EXPECT_EQ(t.Get<SesSettings>().configuration_set, "cs-1");
}

TEST(SenderConfigTest, ErrorsNameTheVariableNeverASecret) {
  auto c = LoadSenderConfig(Vars({{"MAILROOM_TRANSPORT", "smtp"},
                                  {"MAILROOM_SMTP_URL", "smtp://mail.example:587"},
                                  {"MAILROOM_SMTP_PASSWORD", "hunter2-secret"}}));
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::StartsWith(c.status().message(), "MAILROOM_SMTP_USERNAME: "));
  EXPECT_THAT(std::string(c.status().message()), Not(HasSubstr("hunter2")));
  auto group = LoadSenderConfig(Vars({{"MAILROOM_CONSUMER_GROUP", "Bad Group"}}));
  ASSERT_FALSE(group.ok());
  EXPECT_TRUE(absl::StartsWith(group.status().message(), "MAILROOM_CONSUMER_GROUP: "));
  auto dir = LoadSenderConfig(Vars({{"MAILROOM_TEMPLATE_DIR", "/no/such/dir"}}));
  ASSERT_FALSE(dir.ok());
  EXPECT_TRUE(absl::StartsWith(dir.status().message(), "MAILROOM_TEMPLATE_DIR: "));
}

TEST(SenderConfigTest, SmtpOAuth2FromAnEndpoint) {
  std::map<std::string, std::string> v = {
      {"MAILROOM_TRANSPORT", "smtp"},
      {"MAILROOM_SMTP_URL", "smtp://smtp.office365.com:587"},
      {"MAILROOM_SMTP_USERNAME", "no-reply@example.com"},
      {"MAILROOM_SMTP_OAUTH2_TOKEN_URL",
       "https://login.microsoftonline.com/tenant/oauth2/v2.0/token"},
      {"MAILROOM_SMTP_OAUTH2_CLIENT_ID", "client"},
      {"MAILROOM_SMTP_OAUTH2_CLIENT_SECRET", "s3cr3t-value"}};
  auto c = LoadSenderConfig(Vars(v));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->transport.Get<SmtpSettings>().oauth2_scope,
            "https://outlook.office365.com/.default");
  TransportConfig tc = TransportConfigOf(*c);
  EXPECT_EQ(tc.Get<SmtpSettings>().oauth2_client_secret, "s3cr3t-value");
  EXPECT_EQ(tc.Get<SmtpSettings>().oauth2_token_url, v["MAILROOM_SMTP_OAUTH2_TOKEN_URL"]);

  // Each error names the variable to fix and never shows the secret.
  ExpectRefused(
      v,
      {
          {"password too", {{{"MAILROOM_SMTP_PASSWORD", "pw"}}, "MAILROOM_SMTP_PASSWORD"}},
          {"no mailbox", {{{"MAILROOM_SMTP_USERNAME", ""}}, "MAILROOM_SMTP_USERNAME"}},
          {"no client id",
           {{{"MAILROOM_SMTP_OAUTH2_CLIENT_ID", ""}}, "MAILROOM_SMTP_OAUTH2_CLIENT_ID"}},
          {"no secret",
           {{{"MAILROOM_SMTP_OAUTH2_CLIENT_SECRET", ""}}, "MAILROOM_SMTP_OAUTH2_CLIENT_SECRET"}},
          {"file too",
           {{{"MAILROOM_SMTP_OAUTH2_TOKEN_FILE", "/etc/hostname"}},
            "MAILROOM_SMTP_OAUTH2_TOKEN_FILE"}},
          {"plain http",
           {{{"MAILROOM_SMTP_OAUTH2_TOKEN_URL", "http://login.example.com/token"}},
            "MAILROOM_SMTP_OAUTH2_TOKEN_URL"}},
      },
      "s3cr3t-value");
  // Plain HTTP is fine to this machine (a local identity agent, tests).
  auto local = v;
  local["MAILROOM_SMTP_OAUTH2_TOKEN_URL"] = "http://127.0.0.1:8181/token";
  EXPECT_TRUE(LoadSenderConfig(Vars(local)).ok());
}

TEST(SenderConfigTest, SmtpOAuth2FromAFile) {
  std::map<std::string, std::string> v = {{"MAILROOM_TRANSPORT", "smtp"},
                                          {"MAILROOM_SMTP_URL", "smtp://smtp.gmail.com:587"},
                                          {"MAILROOM_SMTP_USERNAME", "no-reply@example.com"},
                                          {"MAILROOM_SMTP_OAUTH2_TOKEN_FILE", "/etc/hostname"}};
  auto c = LoadSenderConfig(Vars(v));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(TransportConfigOf(*c).Get<SmtpSettings>().oauth2_token_file, "/etc/hostname");
  v["MAILROOM_SMTP_OAUTH2_TOKEN_FILE"] = "/nonexistent/token";
  auto r = LoadSenderConfig(Vars(v));
  EXPECT_TRUE(absl::StartsWith(r.status().message(), "MAILROOM_SMTP_OAUTH2_TOKEN_FILE"))
      << r.status();
  // Client settings without the endpoint they are for.
  v["MAILROOM_SMTP_OAUTH2_TOKEN_FILE"] = "/etc/hostname";
  v["MAILROOM_SMTP_OAUTH2_CLIENT_SECRET"] = "s3cr3t-value";
  r = LoadSenderConfig(Vars(v));
  EXPECT_TRUE(absl::StartsWith(r.status().message(), "MAILROOM_SMTP_OAUTH2_CLIENT_SECRET"))
      << r.status();
}

TEST(SenderConfigTest, HttpWebhook) {
  std::map<std::string, std::string> v = {{"MAILROOM_TRANSPORT", "http"},
                                          {"MAILROOM_HTTP_URL", "https://hooks.example.com/mail"},
                                          {"MAILROOM_HTTP_SECRET", "whsec_s3cr3t-value"},
                                          {"MAILROOM_HTTP_AUTHORIZATION", "Bearer auth-s3cr3t"}};
  auto c = LoadSenderConfig(Vars(v));
  ASSERT_TRUE(c.ok()) << c.status();
  TransportConfig tc = TransportConfigOf(*c);
  EXPECT_EQ(tc.kind, "http");
  EXPECT_EQ(tc.Get<HttpSettings>().url, "https://hooks.example.com/mail");
  EXPECT_EQ(tc.Get<HttpSettings>().secret, "whsec_s3cr3t-value");
  EXPECT_EQ(tc.Get<HttpSettings>().authorization, "Bearer auth-s3cr3t");
  EXPECT_EQ(tc.Get<HttpSettings>().ca_file, "");

  // Each error names the variable to fix and never shows a secret.
  ExpectRefused(
      v,
      {
          {"no url", {{{"MAILROOM_HTTP_URL", ""}}, "MAILROOM_HTTP_URL"}},
          {"not http", {{{"MAILROOM_HTTP_URL", "ftp://hooks.example.com/"}}, "MAILROOM_HTTP_URL"}},
          {"plain http",
           {{{"MAILROOM_HTTP_URL", "http://hooks.example.com/mail"}}, "MAILROOM_HTTP_URL"}},
          {"no secret", {{{"MAILROOM_HTTP_SECRET", ""}}, "MAILROOM_HTTP_SECRET"}},
          {"no ca", {{{"MAILROOM_HTTP_CA_FILE", "/nonexistent/ca.pem"}}, "MAILROOM_HTTP_CA_FILE"}},
          {"two lines",
           {{{"MAILROOM_HTTP_AUTHORIZATION", "Bearer auth-s3cr3t\r\nX-Evil: 1"}},
            "MAILROOM_HTTP_AUTHORIZATION"}},
      },
      "s3cr3t");
  // Plain HTTP to this machine, or anywhere when the operator says so.
  auto local = v;
  local["MAILROOM_HTTP_URL"] = "http://127.0.0.1:8080/mail";
  EXPECT_TRUE(LoadSenderConfig(Vars(local)).ok());
  local["MAILROOM_HTTP_URL"] = "http://localhost/mail";
  EXPECT_TRUE(LoadSenderConfig(Vars(local)).ok());
  auto allowed = v;
  allowed["MAILROOM_HTTP_URL"] = "http://mailer.internal:8080/mail";
  allowed["MAILROOM_HTTP_ALLOW_PLAIN"] = "true";
  EXPECT_TRUE(LoadSenderConfig(Vars(allowed)).ok());
}

// The sandbox: its domain, and its events' URL and secret (required together), the URL https://
// or http:// to this machine; also as the secondary.
TEST(SenderConfigTest, Sandbox) {
  auto plain = LoadSenderConfig(Vars({{"MAILROOM_TRANSPORT", "Sandbox"}}));
  ASSERT_TRUE(plain.ok()) << plain.status();
  TransportConfig tc = TransportConfigOf(*plain);
  EXPECT_EQ(tc.kind, "sandbox");
  EXPECT_EQ(tc.Get<SandboxSettings>().domain, "sandbox.mailroom.test");
  EXPECT_EQ(tc.Get<SandboxSettings>().dir, "");
  EXPECT_EQ(tc.Get<SandboxSettings>().feedback_url, "");
  EXPECT_EQ(tc.Get<SandboxSettings>().event_delay, absl::Seconds(1));

  std::map<std::string, std::string> v = {
      {"MAILROOM_TRANSPORT", "sandbox"},
      {"MAILROOM_SANDBOX_DOMAIN", "Sim.Example.Test"},
      {"MAILROOM_SANDBOX_DIR", "/tmp/sandbox-out"},
      {"MAILROOM_SANDBOX_FEEDBACK_URL", "http://127.0.0.1:9470/feedback/sandbox"},
      {"MAILROOM_SANDBOX_FEEDBACK_SECRET", "whsec_s3cr3t-value"},
      {"MAILROOM_SANDBOX_EVENT_DELAY_MS", "250"}};
  auto c = LoadSenderConfig(Vars(v));
  ASSERT_TRUE(c.ok()) << c.status();
  tc = TransportConfigOf(*c);
  EXPECT_EQ(tc.Get<SandboxSettings>().domain, "sim.example.test");
  EXPECT_EQ(tc.Get<SandboxSettings>().dir, "/tmp/sandbox-out");
  EXPECT_EQ(tc.Get<SandboxSettings>().feedback_url, "http://127.0.0.1:9470/feedback/sandbox");
  EXPECT_EQ(tc.Get<SandboxSettings>().feedback_secret, "whsec_s3cr3t-value");
  EXPECT_EQ(tc.Get<SandboxSettings>().event_delay, absl::Milliseconds(250));
  ExpectRefused(
      v,
      {
          {"bad domain",
           {{{"MAILROOM_SANDBOX_DOMAIN", "not a domain"}}, "MAILROOM_SANDBOX_DOMAIN"}},
          {"plain http",
           {{{"MAILROOM_SANDBOX_FEEDBACK_URL", "http://collector.example.com/feedback/sandbox"}},
            "MAILROOM_SANDBOX_FEEDBACK_URL"}},
          {"no secret",
           {{{"MAILROOM_SANDBOX_FEEDBACK_SECRET", ""}}, "MAILROOM_SANDBOX_FEEDBACK_SECRET"}},
          {"delay",
           {{{"MAILROOM_SANDBOX_EVENT_DELAY_MS", "-1"}}, "MAILROOM_SANDBOX_EVENT_DELAY_MS"}},
      },
      "s3cr3t");

  auto failover = LoadSenderConfig(Vars({{"MAILROOM_TRANSPORT", "file"},
                                         {"MAILROOM_FAILOVER_TRANSPORT", "sandbox"},
                                         {"MAILROOM_FAILOVER_SANDBOX_DOMAIN", "second.test"},
                                         {"MAILROOM_FAILOVER_PRICE_PER_1000", "0.01"}}));
  ASSERT_TRUE(failover.ok()) << failover.status();
  EXPECT_EQ(failover->failover->kind, "sandbox");
  EXPECT_EQ(failover->failover->Get<SandboxSettings>().domain, "second.test");
}

// A webhook as the secondary: its settings under the prefix, checked as the primary's are.
TEST(SenderConfigTest, FailoverToAWebhook) {
  std::map<std::string, std::string> v = {{"MAILROOM_TRANSPORT", "smtp"},
                                          {"MAILROOM_SMTP_URL", "smtp://primary.example:587"},
                                          {"MAILROOM_FAILOVER_TRANSPORT", "http"},
                                          {"MAILROOM_FAILOVER_HTTP_URL",
                                           "https://hooks.example.com/mail"},
                                          {"MAILROOM_FAILOVER_HTTP_SECRET", "whsec_s3cr3t-value"},
                                          {"MAILROOM_FAILOVER_PRICE_PER_1000", "0.50"}};
  auto c = LoadSenderConfig(Vars(v));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->failover.has_value());
  EXPECT_EQ(c->failover->kind, "http");
  EXPECT_EQ(c->failover->Get<HttpSettings>().url, "https://hooks.example.com/mail");
  EXPECT_EQ(c->failover->Get<HttpSettings>().secret, "whsec_s3cr3t-value");
  EXPECT_EQ(c->transport.Get<HttpSettings>().url, "");  // the primary's own are untouched
  ExpectRefused(v,
                {
                    {"no secret",
                     {{{"MAILROOM_FAILOVER_HTTP_SECRET", ""}}, "MAILROOM_FAILOVER_HTTP_SECRET"}},
                    {"plain http",
                     {{{"MAILROOM_FAILOVER_HTTP_URL", "http://hooks.example.com/mail"}},
                      "MAILROOM_FAILOVER_HTTP_URL"}},
                },
                "s3cr3t");
}

// The provider transports: each its own key and base URL, the key required and never shown,
// the URL https:// (http:// only to this machine).
TEST(SenderConfigTest, ProviderTransports) {
  for (const auto& [kind, key, url] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"postmark", "MAILROOM_POSTMARK_SERVER_TOKEN", "MAILROOM_POSTMARK_API_URL"},
           {"sendgrid", "MAILROOM_SENDGRID_API_KEY", "MAILROOM_SENDGRID_API_URL"},
           {"mailgun", "MAILROOM_MAILGUN_API_KEY", "MAILROOM_MAILGUN_API_URL"},
           {"resend", "MAILROOM_RESEND_API_KEY", "MAILROOM_RESEND_API_URL"}}) {
    std::map<std::string, std::string> v = {{"MAILROOM_TRANSPORT", kind},
                                            {key, "key-s3cr3t"},
                                            {"MAILROOM_MAILGUN_DOMAIN", "mg.example.com"}};
    auto c = LoadSenderConfig(Vars(v));
    ASSERT_TRUE(c.ok()) << kind << ": " << c.status();
    TransportConfig tc = TransportConfigOf(*c);
    EXPECT_EQ(tc.kind, kind);
    EXPECT_EQ(tc.Get<ProviderSettings>().api_key, "key-s3cr3t");
    EXPECT_EQ(tc.Get<ProviderSettings>().api_url, "");  // the provider's own
    v[url] = "http://127.0.0.1:9000";
    ASSERT_TRUE(LoadSenderConfig(Vars(v)).ok()) << kind;
    EXPECT_EQ(TransportConfigOf(*LoadSenderConfig(Vars(v))).Get<ProviderSettings>().api_url,
              "http://127.0.0.1:9000");
    ExpectRefused(v,
                  {
                      {"no key", {{{key, ""}}, key}},
                      {"a space", {{{key, "key s3cr3t"}}, key}},
                      {"plain http", {{{url, "http://api.example.com"}}, url}},
                      {"not http", {{{url, "ftp://api.example.com"}}, url}},
                  },
                  "s3cr3t");
  }
  std::map<std::string, std::string> pm = {{"MAILROOM_TRANSPORT", "postmark"},
                                           {"MAILROOM_POSTMARK_SERVER_TOKEN", "t0ken"}};
  EXPECT_EQ(LoadSenderConfig(Vars(pm))->transport.Get<ProviderSettings>().postmark_message_stream,
            "outbound");
  pm["MAILROOM_POSTMARK_MESSAGE_STREAM"] = "password-resets";
  EXPECT_EQ(LoadSenderConfig(Vars(pm))->transport.Get<ProviderSettings>().postmark_message_stream,
            "password-resets");
  ExpectRefused(
      pm,
      {{"bad stream",
        {{{"MAILROOM_POSTMARK_MESSAGE_STREAM", "Out Bound"}}, "MAILROOM_POSTMARK_MESSAGE_STREAM"}}},
      "t0ken");
  std::map<std::string, std::string> mg = {{"MAILROOM_TRANSPORT", "mailgun"},
                                           {"MAILROOM_MAILGUN_API_KEY", "key-s3cr3t"},
                                           {"MAILROOM_MAILGUN_DOMAIN", "MG.Example.com"}};
  EXPECT_EQ(TransportConfigOf(*LoadSenderConfig(Vars(mg))).Get<ProviderSettings>().mailgun_domain,
            "mg.example.com");
  ExpectRefused(mg,
                {
                    {"no domain", {{{"MAILROOM_MAILGUN_DOMAIN", ""}}, "MAILROOM_MAILGUN_DOMAIN"}},
                    {"not a domain",
                     {{{"MAILROOM_MAILGUN_DOMAIN", "mg/x"}}, "MAILROOM_MAILGUN_DOMAIN"}},
                },
                "s3cr3t");
}

// A provider as the secondary: its settings under the prefix, checked as the primary's are.
TEST(SenderConfigTest, FailoverToAProvider) {
  std::map<std::string, std::string> v = {{"MAILROOM_TRANSPORT", "ses"},
                                          {"AWS_ACCESS_KEY_ID", "AKID"},
                                          {"AWS_SECRET_ACCESS_KEY", "aws-s3cr3t"},
                                          {"MAILROOM_FAILOVER_TRANSPORT", "resend"},
                                          {"MAILROOM_FAILOVER_RESEND_API_KEY", "re_s3cr3t"},
                                          {"MAILROOM_FAILOVER_PRICE_PER_1000", "0.40"}};
  auto c = LoadSenderConfig(Vars(v));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->failover.has_value());
  EXPECT_EQ(c->failover->kind, "resend");
  EXPECT_EQ(c->failover->Get<ProviderSettings>().api_key, "re_s3cr3t");
  EXPECT_EQ(c->transport.Get<ProviderSettings>().api_key, "");  // the primary's own are untouched
  ExpectRefused(
      v,
      {
          {"no key",
           {{{"MAILROOM_FAILOVER_RESEND_API_KEY", ""}}, "MAILROOM_FAILOVER_RESEND_API_KEY"}},
          {"plain http",
           {{{"MAILROOM_FAILOVER_RESEND_API_URL", "http://api.example.com"}},
            "MAILROOM_FAILOVER_RESEND_API_URL"}},
      },
      "s3cr3t");
}

// One URL setting and the settings that make the sender use it.
struct UrlSetting {
  std::string var;
  std::map<std::string, std::string> base;
  std::string scheme;  // "http" for the HTTP ones (https:// and http://), "smtp" for SMTP's
  bool plain_http_loopback_only;
};

// Every URL the sender hands to libcurl, primary and secondary.
std::vector<UrlSetting> EveryUrlSetting() {
  std::vector<UrlSetting> out;
  for (const std::string prefix : {"MAILROOM_", "MAILROOM_FAILOVER_"}) {
    const bool failover = prefix == "MAILROOM_FAILOVER_";
    auto with = [&](std::map<std::string, std::string> vars) {
      std::map<std::string, std::string> v;
      // AWS_ACCESS_KEY_ID and its twin MAILROOM_FAILOVER_AWS_ACCESS_KEY_ID.
      for (auto& [k, x] : vars) {
        v[absl::StartsWith(k, "AWS_") && !failover ? k : prefix + k] = x;
      }
      if (failover) v["MAILROOM_FAILOVER_PRICE_PER_1000"] = "0.5";
      return v;
    };
    out.push_back({prefix + "HTTP_URL",
                   with({{"TRANSPORT", "http"}, {"HTTP_SECRET", "whsec_s3cr3t-value"}}), "http",
                   true});
    for (const auto& [kind, key] :
         std::vector<std::pair<std::string, std::string>>{{"postmark", "POSTMARK_SERVER_TOKEN"},
                                                          {"sendgrid", "SENDGRID_API_KEY"},
                                                          {"mailgun", "MAILGUN_API_KEY"},
                                                          {"resend", "RESEND_API_KEY"}}) {
      std::string upper = absl::AsciiStrToUpper(kind);
      out.push_back(
          {absl::StrCat(prefix, upper, "_API_URL"),
           with({{"TRANSPORT", kind}, {key, "key-s3cr3t"}, {"MAILGUN_DOMAIN", "mg.example.com"}}),
           "http", true});
    }
    out.push_back({prefix + "SMTP_OAUTH2_TOKEN_URL",
                   with({{"TRANSPORT", "smtp"},
                         {"SMTP_URL", "smtp://smtp.office365.com:587"},
                         {"SMTP_USERNAME", "no-reply@example.com"},
                         {"SMTP_OAUTH2_CLIENT_ID", "client"},
                         {"SMTP_OAUTH2_CLIENT_SECRET", "s3cr3t-value"}}),
                   "http", true});
    out.push_back({prefix + "SMTP_URL", with({{"TRANSPORT", "smtp"}}), "smtp", false});
    out.push_back({prefix + "SES_ENDPOINT",
                   with({{"TRANSPORT", "ses"},
                         {"AWS_ACCESS_KEY_ID", "AKID"},
                         {"AWS_SECRET_ACCESS_KEY", "aws-s3cr3t"}}),
                   "http", false});
  }
  return out;
}

// Every URL setting is read by libcurl's own parser: the host that decides "loopback" is the
// host libcurl connects to, and a user name or password in the URL is refused, the error naming
// the variable and showing no part of the URL.
TEST(SenderConfigTest, EveryUrlIsCheckedOnLibcurlsOwnParse) {
  for (const UrlSetting& s : EveryUrlSetting()) {
    const std::string plain = s.scheme == "smtp" ? "smtp" : "http";
    const std::string tls = s.scheme == "smtp" ? "smtps" : "https";
    auto load = [&](const std::string& url) {
      auto v = s.base;
      v[s.var] = url;
      return LoadSenderConfig(Vars(v));
    };
    auto accepted = [&](const std::string& url) {
      auto c = load(url);
      EXPECT_TRUE(c.ok()) << s.var << "=" << url << ": " << c.status();
    };
    // Refused with an error that starts with the variable and holds none of `hidden`.
    auto refused = [&](const std::string& url, std::vector<std::string> hidden) {
      auto c = load(url);
      ASSERT_FALSE(c.ok()) << s.var << "=" << url;
      const std::string message(c.status().message());
      EXPECT_TRUE(absl::StartsWith(message, s.var + ": "))
          << s.var << "=" << url << ": " << message;
      hidden.push_back(url);
      for (const std::string& h : hidden) {
        EXPECT_THAT(message, Not(HasSubstr(h))) << s.var << "=" << url;
      }
    };
    // A loopback address before '@' is a password: libcurl connects to evil.invalid.
    refused(plain + "://127.0.0.1:x7Kp2q@evil.invalid/", {"x7Kp2q", "evil"});
    // Userinfo is refused even to this machine.
    refused(plain + "://mailer:pw-9Vb4@127.0.0.1/", {"pw-9Vb4", "mailer"});
    refused(tls + "://mailer:pw-9Vb4@mail.example.com/", {"pw-9Vb4", "mailer"});
    // What libcurl cannot parse, and another scheme.
    refused(plain + "://[::1/", {});
    refused("127.0.0.1/x", {});
    refused(s.scheme == "smtp" ? "https://mail.example.com/" : "ftp://api.example.com/", {});
    accepted(plain + "://[::1]/");
    accepted(plain + "://127.0.0.1:8080/");
    accepted(tls + "://mail.example.com/v1");
    if (s.plain_http_loopback_only) {
      refused(plain + "://127.0.0.1.evil.invalid/", {});
      refused(plain + "://localhost.evil.invalid/", {});
    } else {
      accepted(plain + "://127.0.0.1.evil.invalid/");
      accepted(plain + "://localhost.evil.invalid/");
    }
  }
}

// With MAILROOM_HTTP_ALLOW_PLAIN a webhook may be http:// to any host, never with userinfo.
TEST(SenderConfigTest, AllowPlainHttpStillRefusesUserinfo) {
  std::map<std::string, std::string> v = {{"MAILROOM_TRANSPORT", "http"},
                                          {"MAILROOM_HTTP_SECRET", "whsec_s3cr3t-value"},
                                          {"MAILROOM_HTTP_ALLOW_PLAIN", "true"},
                                          {"MAILROOM_HTTP_URL", "http://127.0.0.1.evil.invalid/"}};
  EXPECT_TRUE(LoadSenderConfig(Vars(v)).ok());
  v["MAILROOM_HTTP_URL"] = "http://127.0.0.1:x7Kp2q@evil.invalid/";
  auto c = LoadSenderConfig(Vars(v));
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::StartsWith(c.status().message(), "MAILROOM_HTTP_URL: ")) << c.status();
  EXPECT_THAT(std::string(c.status().message()), Not(HasSubstr("x7Kp2q")));
}

TEST(SenderConfigTest, NoFailoverByDefault) {
  auto c = LoadSenderConfig(Vars({}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->failover.has_value());
  c = LoadSenderConfig(Vars({{"MAILROOM_FAILOVER_TRANSPORT", "off"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->failover.has_value());
}

TEST(SenderConfigTest, FailoverReadsThePrimarysSettingsUnderItsPrefix) {
  auto c = LoadSenderConfig(Vars({{"MAILROOM_TRANSPORT", "smtp"},
                                  {"MAILROOM_SMTP_URL", "smtp://primary.example:587"},
                                  {"MAILROOM_CONNECTIONS", "8"},
                                  {"MAILROOM_FAILOVER_TRANSPORT", "SES"},
                                  {"MAILROOM_FAILOVER_SES_REGION", "eu-west-2"},
                                  {"MAILROOM_FAILOVER_AWS_ACCESS_KEY_ID", "AKIDFAILOVER"},
                                  {"MAILROOM_FAILOVER_AWS_SECRET_ACCESS_KEY", "failover-secret"},
                                  {"AWS_REGION", "us-west-1"},
                                  {"MAILROOM_FAILOVER_PRICE_PER_1000", "0.80"},
                                  {"MAILROOM_FAILOVER_CLASSES", "all"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->transport.kind, "smtp");
  EXPECT_EQ(c->transport.Get<SmtpSettings>().url, "smtp://primary.example:587");
  ASSERT_TRUE(c->failover.has_value());
  EXPECT_EQ(c->failover->kind, "ses");
  EXPECT_EQ(c->failover->Get<SesSettings>().region, "eu-west-2");
  EXPECT_EQ(c->failover->Get<SesSettings>().access_key_id, "AKIDFAILOVER");
  EXPECT_EQ(c->failover->Get<SesSettings>().secret_access_key, "failover-secret");
  EXPECT_EQ(c->failover->connections, 8);
  EXPECT_EQ(c->failover->group, "mailroom");
  EXPECT_DOUBLE_EQ(c->failover_price_per_1000, 0.80);
  EXPECT_EQ(c->failover_classes, "all");

  c = LoadSenderConfig(Vars({{"MAILROOM_FAILOVER_TRANSPORT", "smtp"},
                             {"MAILROOM_FAILOVER_SMTP_URL", "smtps://backup.example:465"},
                             {"MAILROOM_FAILOVER_SMTP_USERNAME", "u"},
                             {"MAILROOM_FAILOVER_SMTP_PASSWORD", "p"},
                             {"MAILROOM_FAILOVER_PRICE_PER_1000", "0.10"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->transport.kind, "file");
  EXPECT_EQ(c->failover->kind, "smtp");
  EXPECT_EQ(c->failover->Get<SmtpSettings>().url, "smtps://backup.example:465");
  EXPECT_EQ(c->failover->Get<SmtpSettings>().password, "p");
  EXPECT_EQ(c->failover_classes, "recovery");
}

TEST(SenderConfigTest, FailoverErrorsNameTheSecondarysVariable) {
  const std::map<std::string, std::string> smtp = {{"MAILROOM_FAILOVER_TRANSPORT", "smtp"},
                                                   {"MAILROOM_FAILOVER_SMTP_URL",
                                                    "smtp://backup.example:587"},
                                                   {"MAILROOM_FAILOVER_PRICE_PER_1000", "0.5"}};
  auto with = [&](std::map<std::string, std::string> more) {
    auto v = smtp;
    for (auto& [k, x] : more) v[k] = x;
    return v;
  };
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {with({{"MAILROOM_FAILOVER_TRANSPORT", "pigeon"}}), "MAILROOM_FAILOVER_TRANSPORT: "},
      {with({{"MAILROOM_FAILOVER_SMTP_URL", ""}}), "MAILROOM_FAILOVER_SMTP_URL: required when "
                                                   "MAILROOM_FAILOVER_TRANSPORT=smtp"},
      {with({{"MAILROOM_FAILOVER_SMTP_URL", "http://x"}}), "MAILROOM_FAILOVER_SMTP_URL: "},
      {with({{"MAILROOM_FAILOVER_SMTP_USERNAME", "u"}}), "MAILROOM_FAILOVER_SMTP_PASSWORD: "},
      {with({{"MAILROOM_FAILOVER_SMTP_OAUTH2_TOKEN_URL", "http://idp.example/token"}}),
       "MAILROOM_FAILOVER_SMTP_USERNAME: required with OAuth2"},
      {with({{"MAILROOM_FAILOVER_PRICE_PER_1000", ""}}), "MAILROOM_FAILOVER_PRICE_PER_1000: "},
      {with({{"MAILROOM_FAILOVER_PRICE_PER_1000", "0"}}), "MAILROOM_FAILOVER_PRICE_PER_1000: "},
      {with({{"MAILROOM_FAILOVER_CLASSES", "activation"}}), "MAILROOM_FAILOVER_CLASSES: "},
      {{{"MAILROOM_FAILOVER_TRANSPORT", "ses"}, {"MAILROOM_FAILOVER_PRICE_PER_1000", "1"}},
       "MAILROOM_FAILOVER_AWS_ACCESS_KEY_ID: required when MAILROOM_FAILOVER_TRANSPORT=ses"},
  };
  for (const auto& [vars, want] : cases) {
    auto c = LoadSenderConfig(Vars(vars));
    ASSERT_FALSE(c.ok()) << want;
    EXPECT_TRUE(absl::StartsWith(c.status().message(), want)) << c.status();
  }
}

}  // namespace
}  // namespace mailroom
