// The transport registry and every entry's settings, read from an in-memory environment: each
// kind is found by its name, an unknown kind is an InvalidArgument naming MAILROOM_TRANSPORT
// (or MAILROOM_FAILOVER_TRANSPORT), the documented defaults load, and each entry rejects a bad
// value with an error that names its variable and never shows a secret. (The sender's whole
// configuration, and its exit 2 on such an error: sender/config.)
#include "sender/transport/registry.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
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
using Vars = std::map<std::string, std::string>;

constexpr char kKinds[] = "file, smtp, ses, http, postmark, sendgrid, mailgun, resend or sandbox";

// LoadTransportConfig of `kind` over an environment that holds exactly `vars`.
absl::StatusOr<TransportConfig> Load(const Vars& vars, const std::string& kind,
                                     bool failover = false) {
  Env env([&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
  TransportConfig config;
  absl::Status st = LoadTransportConfig(env, TransportVars(failover), kind, &config);
  if (!st.ok()) return st;
  return config;
}

// The error of loading `kind` over `vars`: InvalidArgument, or a failure naming what came back.
std::string Error(const Vars& vars, const std::string& kind, bool failover = false) {
  absl::StatusOr<TransportConfig> c = Load(vars, kind, failover);
  if (c.ok()) return "(loaded)";
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  return std::string(c.status().message());
}

TEST(RegistryTest, EveryKindIsFoundByItsNameInTheListedOrder) {
  const std::vector<std::string> kinds = {"file",     "smtp",    "ses",    "http",   "postmark",
                                          "sendgrid", "mailgun", "resend", "sandbox"};
  std::vector<std::string> listed;
  for (const TransportEntry* e : TransportEntries()) listed.push_back(e->kind);
  EXPECT_EQ(listed, kinds);
  for (const std::string& kind : kinds) {
    const TransportEntry* e = FindTransportEntry(kind);
    ASSERT_NE(e, nullptr) << kind;
    EXPECT_EQ(std::string(e->kind), kind);
    EXPECT_NE(e->settings, nullptr) << kind;
    EXPECT_NE(e->check, nullptr) << kind;
    EXPECT_NE(e->make, nullptr) << kind;
    // http_entry.h: "It has no doctor check" (the doctor skips a null one).
    EXPECT_EQ(e->doctor == nullptr, kind == "http") << kind;
  }
  EXPECT_FALSE(FindTransportEntry("file")->reaches_recipients);
  EXPECT_TRUE(FindTransportEntry("smtp")->reaches_recipients);
  EXPECT_EQ(TransportKinds(), kKinds);
}

TEST(RegistryTest, AKindIsMatchedExactly) {
  EXPECT_EQ(FindTransportEntry(""), nullptr);
  EXPECT_EQ(FindTransportEntry("SMTP"), nullptr);  // the loader lower-cases it first
  EXPECT_EQ(FindTransportEntry("smtp "), nullptr);
  EXPECT_EQ(FindTransportEntry("smtps"), nullptr);
  EXPECT_EQ(FindTransportEntry("ses2"), nullptr);
}

TEST(RegistryTest, AnUnknownKindNamesTheVariableAndListsTheKinds) {
  EXPECT_EQ(Error({}, "pigeon"), std::string("MAILROOM_TRANSPORT: \"pigeon\" is not ") + kKinds);
  EXPECT_EQ(Error({}, "pigeon", /*failover=*/true),
            std::string("MAILROOM_FAILOVER_TRANSPORT: \"pigeon\" is not ") + kKinds);
  EXPECT_EQ(Error({}, ""), std::string("MAILROOM_TRANSPORT: \"\" is not ") + kKinds);
}

TEST(RegistryTest, AMalformedValueOfAnotherTransportsVariableStopsTheLoad) {
  EXPECT_THAT(Error({{"MAILROOM_SMTP_ALLOW_PLAIN", "perhaps"}}, "file"),
              ::testing::StartsWith("MAILROOM_SMTP_ALLOW_PLAIN: "));
  EXPECT_THAT(Error({{"MAILROOM_SANDBOX_EVENT_DELAY_MS", "soon"}}, "smtp"),
              ::testing::StartsWith("MAILROOM_SANDBOX_EVENT_DELAY_MS: "));
  EXPECT_THAT(Error({{"MAILROOM_HTTP_CA_FILE", "/nonexistent/ca.pem"}}, "file"),
              ::testing::StartsWith("MAILROOM_HTTP_CA_FILE: "));
  // Read before the kind is looked at: the bad value is the error, not the kind.
  EXPECT_THAT(Error({{"MAILROOM_SMTP_INSECURE_SKIP_VERIFY", "2"}}, "pigeon"),
              ::testing::StartsWith("MAILROOM_SMTP_INSECURE_SKIP_VERIFY: "));
}

TEST(RegistryTest, TheFileAndSandboxTransportsLoadTheirDefaultsFromNothing) {
  absl::StatusOr<TransportConfig> file = Load({}, "file");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->kind, "file");
  EXPECT_EQ(file->Get<FileSettings>().dir, "./outbox");

  absl::StatusOr<TransportConfig> sandbox = Load({}, "sandbox");
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  const SandboxSettings& s = sandbox->Get<SandboxSettings>();
  EXPECT_EQ(s.domain, "sandbox.mailroom.test");
  EXPECT_EQ(s.dir, "");
  EXPECT_EQ(s.feedback_url, "");
  EXPECT_EQ(s.event_delay, absl::Seconds(1));

  absl::StatusOr<TransportConfig> failover = Load(
      {{"MAILROOM_FILE_DIR", "/primary"}, {"MAILROOM_FAILOVER_FILE_DIR", "/secondary"}}, "file",
      /*failover=*/true);
  ASSERT_TRUE(failover.ok()) << failover.status();
  EXPECT_EQ(failover->kind, "file");
  EXPECT_EQ(failover->Get<FileSettings>().dir, "/secondary");
}

TEST(RegistryTest, SmtpNeedsItsUrlAndDefaultsToStartTlsWithVerification) {
  EXPECT_EQ(Error({}, "smtp"), "MAILROOM_SMTP_URL: required when MAILROOM_TRANSPORT=smtp");
  EXPECT_EQ(Error({}, "smtp", true),
            "MAILROOM_FAILOVER_SMTP_URL: required when MAILROOM_FAILOVER_TRANSPORT=smtp");
  absl::StatusOr<TransportConfig> c = Load({{"MAILROOM_SMTP_URL", "smtp://127.0.0.1:587"}}, "smtp");
  ASSERT_TRUE(c.ok()) << c.status();
  const SmtpSettings& s = c->Get<SmtpSettings>();
  EXPECT_EQ(s.url, "smtp://127.0.0.1:587");
  EXPECT_TRUE(s.require_tls);
  EXPECT_FALSE(s.insecure_skip_verify);
  EXPECT_EQ(s.username, "");
  EXPECT_EQ(s.ca_file, "");
  EXPECT_EQ(s.oauth2_scope, "https://outlook.office365.com/.default");
  Vars plain = {{"MAILROOM_SMTP_URL", "smtp://127.0.0.1:25"}, {"MAILROOM_SMTP_ALLOW_PLAIN", "yes"}};
  ASSERT_TRUE(Load(plain, "smtp").ok());
  EXPECT_FALSE(Load(plain, "smtp")->Get<SmtpSettings>().require_tls);
}

TEST(RegistryTest, SmtpRejectsABadUrlOrHalfACredentialNamingTheVariable) {
  EXPECT_EQ(Error({{"MAILROOM_SMTP_URL", "http://mail.example.com"}}, "smtp"),
            "MAILROOM_SMTP_URL: must start with smtp:// or smtps://");
  const std::string userinfo = Error(
      {{"MAILROOM_SMTP_URL", "smtp://me:hunter2secret@mail.example.com:587"}}, "smtp");
  EXPECT_THAT(userinfo, ::testing::StartsWith("MAILROOM_SMTP_URL: must not hold a user name"));
  EXPECT_THAT(userinfo, Not(HasSubstr("hunter2secret")));
  EXPECT_EQ(Error({{"MAILROOM_SMTP_URL", "smtps://mail.example.com:465"},
                   {"MAILROOM_SMTP_USERNAME", "me"}},
                  "smtp"),
            "MAILROOM_SMTP_PASSWORD: username and password must be given together");
  const std::string no_user = Error({{"MAILROOM_SMTP_URL", "smtps://mail.example.com:465"},
                                     {"MAILROOM_SMTP_PASSWORD", "hunter2secret"}},
                                    "smtp");
  EXPECT_EQ(no_user, "MAILROOM_SMTP_USERNAME: username and password must be given together");
  EXPECT_EQ(Error({{"MAILROOM_SMTP_URL", "smtps://mail.example.com:465"},
                   {"MAILROOM_SMTP_OAUTH2_CLIENT_ID", "app"}},
                  "smtp"),
            "MAILROOM_SMTP_OAUTH2_CLIENT_ID: needs MAILROOM_SMTP_OAUTH2_TOKEN_URL");
}

TEST(RegistryTest, SesNeedsItsKeysAndTakesAwsRegionOnlyForThePrimary) {
  EXPECT_EQ(Error({}, "ses"), "AWS_ACCESS_KEY_ID: required when MAILROOM_TRANSPORT=ses");
  EXPECT_EQ(Error({{"AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"}}, "ses"),
            "AWS_SECRET_ACCESS_KEY: required when MAILROOM_TRANSPORT=ses");
  EXPECT_EQ(Error({}, "ses", true),
            "MAILROOM_FAILOVER_AWS_ACCESS_KEY_ID: required when MAILROOM_FAILOVER_TRANSPORT=ses");
  Vars keys = {{"AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"}, {"AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI"}};
  absl::StatusOr<TransportConfig> c = Load(keys, "ses");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->Get<SesSettings>().region, "us-east-1");
  EXPECT_EQ(c->Get<SesSettings>().endpoint, "");
  EXPECT_EQ(c->Get<SesSettings>().access_key_id, "AKIDEXAMPLE");
  keys["AWS_REGION"] = "eu-west-2";
  EXPECT_EQ(Load(keys, "ses")->Get<SesSettings>().region, "eu-west-2");
  keys["MAILROOM_SES_REGION"] = "ap-south-1";
  EXPECT_EQ(Load(keys, "ses")->Get<SesSettings>().region, "ap-south-1");

  Vars secondary = {{"MAILROOM_FAILOVER_AWS_ACCESS_KEY_ID", "AKID2"},
                    {"MAILROOM_FAILOVER_AWS_SECRET_ACCESS_KEY", "s2"},
                    {"AWS_REGION", "eu-west-2"}};
  absl::StatusOr<TransportConfig> f = Load(secondary, "ses", true);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->Get<SesSettings>().region, "us-east-1");
  EXPECT_EQ(f->Get<SesSettings>().access_key_id, "AKID2");
}

TEST(RegistryTest, SesRejectsABadRegionConfigurationSetOrEndpointNamingTheVariable) {
  const Vars keys = {{"AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"}, {"AWS_SECRET_ACCESS_KEY", "wJalr"}};
  auto with = [&keys](const std::string& var, const std::string& value) {
    Vars v = keys;
    v[var] = value;
    return v;
  };
  EXPECT_EQ(Error(with("MAILROOM_SES_REGION", "US-EAST-1"), "ses"),
            "MAILROOM_SES_REGION: must look like us-east-1");
  EXPECT_EQ(Error(with("MAILROOM_SES_REGION", "useast"), "ses"),
            "MAILROOM_SES_REGION: must look like us-east-1");
  EXPECT_EQ(Error(with("MAILROOM_SES_CONFIGURATION_SET", "my set"), "ses"),
            "MAILROOM_SES_CONFIGURATION_SET: must be letters, digits, - or _ (at most 64)");
  EXPECT_EQ(Error(with("MAILROOM_SES_CONFIGURATION_SET", std::string(65, 'a')), "ses"),
            "MAILROOM_SES_CONFIGURATION_SET: must be letters, digits, - or _ (at most 64)");
  EXPECT_TRUE(Load(with("MAILROOM_SES_CONFIGURATION_SET", std::string(64, 'a')), "ses").ok());
  EXPECT_EQ(Error(with("MAILROOM_SES_ENDPOINT", "ftp://ses.example.com"), "ses"),
            "MAILROOM_SES_ENDPOINT: must start with https:// or http://");
  EXPECT_TRUE(Load(with("MAILROOM_SES_ENDPOINT", "http://127.0.0.1:8005"), "ses").ok());
}

TEST(RegistryTest, HttpNeedsAnHttpsUrlAndASecretAndNeverShowsTheAuthorization) {
  EXPECT_EQ(Error({}, "http"),
            "MAILROOM_HTTP_URL: required when MAILROOM_TRANSPORT=http: an https:// URL");
  EXPECT_EQ(Error({{"MAILROOM_HTTP_URL", "http://hooks.example.com/mail"}}, "http"),
            "MAILROOM_HTTP_URL: must start with https:// (http:// only to a loopback address, or "
            "with MAILROOM_HTTP_ALLOW_PLAIN=true)");
  EXPECT_EQ(Error({{"MAILROOM_HTTP_URL", "https://hooks.example.com/mail"}}, "http"),
            "MAILROOM_HTTP_SECRET: required when MAILROOM_TRANSPORT=http (whsec_...)");
  Vars ok = {{"MAILROOM_HTTP_URL", "https://hooks.example.com/mail"},
             {"MAILROOM_HTTP_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}};
  absl::StatusOr<TransportConfig> c = Load(ok, "http");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->Get<HttpSettings>().allow_plain);
  EXPECT_EQ(c->Get<HttpSettings>().authorization, "");
  Vars loopback = ok;
  loopback["MAILROOM_HTTP_URL"] = "http://127.0.0.1:8080/mail";
  EXPECT_TRUE(Load(loopback, "http").ok());
  Vars plain = ok;
  plain["MAILROOM_HTTP_URL"] = "http://hooks.example.com/mail";
  plain["MAILROOM_HTTP_ALLOW_PLAIN"] = "true";
  EXPECT_TRUE(Load(plain, "http").ok());
  Vars header = ok;
  header["MAILROOM_HTTP_AUTHORIZATION"] = "Bearer tok\r\nX-Injected: topsecretvalue";
  const std::string e = Error(header, "http");
  EXPECT_EQ(e, "MAILROOM_HTTP_AUTHORIZATION: must be one line of at most 4000 bytes");
  EXPECT_THAT(e, Not(HasSubstr("topsecretvalue")));
}

TEST(RegistryTest, EachProviderNeedsItsKeyNamedByItsOwnVariable) {
  EXPECT_EQ(Error({}, "postmark"),
            "MAILROOM_POSTMARK_SERVER_TOKEN: required when MAILROOM_TRANSPORT=postmark");
  EXPECT_EQ(Error({}, "sendgrid"),
            "MAILROOM_SENDGRID_API_KEY: required when MAILROOM_TRANSPORT=sendgrid");
  EXPECT_EQ(Error({}, "mailgun"),
            "MAILROOM_MAILGUN_API_KEY: required when MAILROOM_TRANSPORT=mailgun");
  EXPECT_EQ(Error({}, "resend"),
            "MAILROOM_RESEND_API_KEY: required when MAILROOM_TRANSPORT=resend");
  EXPECT_EQ(Error({}, "resend", true), "MAILROOM_FAILOVER_RESEND_API_KEY: required when "
                                       "MAILROOM_FAILOVER_TRANSPORT=resend");
  EXPECT_EQ(Error({{"MAILROOM_MAILGUN_API_KEY", "key-1"}}, "mailgun"),
            "MAILROOM_MAILGUN_DOMAIN: required when MAILROOM_TRANSPORT=mailgun");

  absl::StatusOr<TransportConfig> postmark = Load({{"MAILROOM_POSTMARK_SERVER_TOKEN", "pm-token"}},
                                                  "postmark");
  ASSERT_TRUE(postmark.ok()) << postmark.status();
  EXPECT_EQ(postmark->Get<ProviderSettings>().api_key, "pm-token");
  EXPECT_EQ(postmark->Get<ProviderSettings>().api_url, "");
  EXPECT_EQ(postmark->Get<ProviderSettings>().postmark_message_stream, "outbound");
  absl::StatusOr<TransportConfig> mailgun = Load({{"MAILROOM_MAILGUN_API_KEY", "key-1"},
                                                  {"MAILROOM_MAILGUN_DOMAIN", "MG.Example.com"}},
                                                 "mailgun");
  ASSERT_TRUE(mailgun.ok()) << mailgun.status();
  EXPECT_EQ(mailgun->Get<ProviderSettings>().mailgun_domain, "mg.example.com");
}

TEST(RegistryTest, AProviderRejectsABadKeyUrlStreamOrDomainWithoutShowingTheKey) {
  const std::string key = Error({{"MAILROOM_SENDGRID_API_KEY", "SG.secret part"}}, "sendgrid");
  EXPECT_EQ(key, "MAILROOM_SENDGRID_API_KEY: must be printable ASCII without spaces (at most "
                 "1000 bytes)");
  EXPECT_THAT(key, Not(HasSubstr("SG.secret")));
  EXPECT_EQ(Error({{"MAILROOM_RESEND_API_KEY", "re_1"},
                   {"MAILROOM_RESEND_API_URL", "http://api.example.com"}},
                  "resend"),
            "MAILROOM_RESEND_API_URL: must start with https:// (http:// only to a loopback "
            "address)");
  EXPECT_TRUE(Load({{"MAILROOM_RESEND_API_KEY", "re_1"},
                    {"MAILROOM_RESEND_API_URL", "http://127.0.0.1:9000"}},
                   "resend")
                  .ok());
  EXPECT_EQ(
      Error({{"MAILROOM_POSTMARK_SERVER_TOKEN", "pm"},
             {"MAILROOM_POSTMARK_MESSAGE_STREAM", "Outbound!"}},
            "postmark"),
      "MAILROOM_POSTMARK_MESSAGE_STREAM: must be a stream id: a-z, 0-9, - or _ (at most 100)");
  EXPECT_EQ(Error({{"MAILROOM_MAILGUN_API_KEY", "key-1"}, {"MAILROOM_MAILGUN_DOMAIN", "localhost"}},
                  "mailgun"),
            "MAILROOM_MAILGUN_DOMAIN: must be a domain name (mg.example.com)");
}

TEST(RegistryTest, TheSandboxRejectsABadDomainDelayOrAFeedbackUrlWithoutItsSecret) {
  EXPECT_EQ(Error({{"MAILROOM_SANDBOX_DOMAIN", "bad_domain"}}, "sandbox"),
            "MAILROOM_SANDBOX_DOMAIN: must be a domain name such as sandbox.mailroom.test");
  EXPECT_EQ(Error({{"MAILROOM_SANDBOX_DOMAIN", ".mailroom.test"}}, "sandbox"),
            "MAILROOM_SANDBOX_DOMAIN: must be a domain name such as sandbox.mailroom.test");
  EXPECT_THAT(Error({{"MAILROOM_SANDBOX_EVENT_DELAY_MS", "600001"}}, "sandbox"),
              ::testing::StartsWith("MAILROOM_SANDBOX_EVENT_DELAY_MS: "));
  absl::StatusOr<TransportConfig> most = Load({{"MAILROOM_SANDBOX_EVENT_DELAY_MS", "600000"}},
                                              "sandbox");
  ASSERT_TRUE(most.ok()) << most.status();
  EXPECT_EQ(most->Get<SandboxSettings>().event_delay, absl::Minutes(10));
  EXPECT_EQ(Error({{"MAILROOM_SANDBOX_FEEDBACK_URL", "http://127.0.0.1:8443/feedback/sandbox"}},
                  "sandbox"),
            "MAILROOM_SANDBOX_FEEDBACK_SECRET: required with MAILROOM_SANDBOX_FEEDBACK_URL "
            "(whsec_...)");
  EXPECT_EQ(Error({{"MAILROOM_SANDBOX_FEEDBACK_URL", "http://collector.example.com/feedback"},
                   {"MAILROOM_SANDBOX_FEEDBACK_SECRET", "whsec_x"}},
                  "sandbox"),
            "MAILROOM_SANDBOX_FEEDBACK_URL: must start with https:// (http:// only to a loopback "
            "address)");
}

// A secondary's settings are read under MAILROOM_FAILOVER_* names, but TransportConfig does not
// say which names, so the entries' make errors always name the primary's variable; the
// sender's main.cc turns "MAILROOM_X: ..." into "MAILROOM_FAILOVER_X: ...". This holds the
// entries to the form that rewrite relies on.
TEST(RegistryTest, AConstructionErrorNamesThePrimarysVariableForTheSenderToRewrite) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string blocker = std::string(tmp != nullptr ? tmp : "/tmp") + "/registry-blocker";
  std::ofstream(blocker) << "a file, so no directory can be made under it";
  absl::StatusOr<TransportConfig> file = Load({{"MAILROOM_FAILOVER_FILE_DIR", blocker + "/outbox"}},
                                              "file", /*failover=*/true);
  ASSERT_TRUE(file.ok()) << file.status();
  auto made = FindTransportEntry("file")->make(*file);
  ASSERT_FALSE(made.ok());
  EXPECT_THAT(std::string(made.status().message()),
              ::testing::StartsWith("MAILROOM_FILE_DIR: cannot create \""));

  absl::StatusOr<TransportConfig> http = Load(
      {{"MAILROOM_FAILOVER_HTTP_URL", "https://hooks.example.com/mail"},
       {"MAILROOM_FAILOVER_HTTP_SECRET", "whsec_dG9vLXNob3J0"}},  // "too-short"
      "http", /*failover=*/true);
  ASSERT_TRUE(http.ok()) << http.status();
  auto webhook = FindTransportEntry("http")->make(*http);
  ASSERT_FALSE(webhook.ok());
  EXPECT_THAT(std::string(webhook.status().message()),
              ::testing::StartsWith("MAILROOM_HTTP_SECRET: "));
}

TEST(RegistryTest, TheSettingsRowsNameEveryVariableOnceAndMarkTheSecrets) {
  const SettingsTable primary = TransportSettingsRows(TransportVars(false));
  ASSERT_FALSE(primary.empty());
  EXPECT_EQ(primary[0].name, "MAILROOM_TRANSPORT");
  EXPECT_EQ(primary[0].default_value, "file");
  std::set<std::string> names;
  std::set<std::string> secrets;
  for (const SettingSpec& s : primary) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name << " listed twice";
    if (s.secret) secrets.insert(s.name);
  }
  EXPECT_EQ(secrets,
            (std::set<std::string>{"MAILROOM_SMTP_PASSWORD", "MAILROOM_SMTP_OAUTH2_CLIENT_SECRET",
                                   "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                                   "MAILROOM_HTTP_SECRET", "MAILROOM_HTTP_AUTHORIZATION",
                                   "MAILROOM_POSTMARK_SERVER_TOKEN", "MAILROOM_SENDGRID_API_KEY",
                                   "MAILROOM_MAILGUN_API_KEY", "MAILROOM_RESEND_API_KEY",
                                   "MAILROOM_SANDBOX_FEEDBACK_SECRET"}));
  EXPECT_EQ(names.count("AWS_REGION"), 1u);
  EXPECT_EQ(FindSetting(primary, "MAILROOM_FILE_DIR").default_value, "./outbox");
  EXPECT_EQ(FindSetting(primary, "MAILROOM_SES_REGION").default_value, "us-east-1");
  EXPECT_EQ(FindSetting(primary, "MAILROOM_SANDBOX_EVENT_DELAY_MS").max, "600000");

  // The secondary's rows: every one under MAILROOM_FAILOVER_, none for the kind itself (the
  // sender's own row) and no AWS_REGION fallback; as many as the primary's less those two.
  const SettingsTable secondary = TransportSettingsRows(TransportVars(true));
  for (const SettingSpec& s : secondary) {
    EXPECT_TRUE(absl::StartsWith(s.name, "MAILROOM_FAILOVER_")) << s.name;
    EXPECT_NE(s.name, "MAILROOM_FAILOVER_TRANSPORT");
    EXPECT_TRUE(absl::StartsWith(s.help, "secondary ")) << s.name << ": " << s.help;
  }
  EXPECT_EQ(secondary.size(), primary.size() - 2);
}

}  // namespace
}  // namespace mailroom
