// `sender doctor`'s judgements that need no peer: the SES account's state, the message settings,
// the templates (every problem, not only the first) and the file directory. The checks against
// real servers (SMTP, SES, collector) are in integration_tests/doctor_test.cc.
#include "sender/doctor/doctor.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/testing/fake_clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sender/transport/file_transport.h"
#include "sender/transport/sandbox_transport.h"
#include "testing/temp_dir.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Level = DoctorLine::Level;

using testing::FreshDir;
using testing::WriteFile;

int Count(const std::vector<DoctorLine>& lines, Level level) {
  return std::count_if(lines.begin(), lines.end(),
                       [&](const DoctorLine& l) { return l.level == level; });
}

std::string Joined(const std::vector<DoctorLine>& lines) {
  std::string out;
  for (const DoctorLine& l : lines) absl::StrAppend(&out, FormatDoctorLine(l), "\n");
  return out;
}

SenderConfig Healthy() {
  SenderConfig c;
  c.transport.kind = "smtp";
  c.from = "Acme <no-reply@acme.net>";
  c.link_base_url = "https://app.example.net/";
  c.product_name = "Example";
  return c;
}

TEST(DoctorTest, LinesSayTheirLevelAndCheckOnOneLine) {
  EXPECT_EQ(FormatDoctorLine({Level::kOk, "smtp", "connected"}), "ok   smtp: connected");
  EXPECT_EQ(FormatDoctorLine({Level::kWarn, "ses", "probation"}), "warn ses: probation");
  EXPECT_EQ(FormatDoctorLine({Level::kFail, "templates", "a\r\nb"}), "FAIL templates: a  b");
}

TEST(DoctorTest, SesAccountStatesThatStopOrLimitSendingAreProblems) {
  SesAccountInfo healthy;
  healthy.enforcement_status = "HEALTHY";
  healthy.max_24_hour_send = 50000;
  healthy.sent_last_24_hours = 10;
  healthy.max_send_rate = 14;
  auto ok = JudgeSesAccount(healthy);
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].level, Level::kOk);
  EXPECT_THAT(ok[0].text, HasSubstr("10 of 50000 sent in the last 24 hours"));

  SesAccountInfo sandbox = healthy;
  sandbox.production_access = false;
  EXPECT_THAT(Joined(JudgeSesAccount(sandbox)),
              HasSubstr("FAIL ses: the account is in the sandbox"));

  SesAccountInfo disabled = healthy;
  disabled.sending_enabled = false;
  EXPECT_THAT(Joined(JudgeSesAccount(disabled)), HasSubstr("FAIL ses: sending is disabled"));

  SesAccountInfo shutdown = healthy;
  shutdown.enforcement_status = "SHUTDOWN";
  EXPECT_THAT(Joined(JudgeSesAccount(shutdown)), HasSubstr("FAIL ses: the account is shut down"));

  SesAccountInfo used_up = healthy;
  used_up.sent_last_24_hours = 50000;
  EXPECT_THAT(Joined(JudgeSesAccount(used_up)),
              HasSubstr("FAIL ses: the 24-hour quota is used up"));

  SesAccountInfo nearly = healthy;
  nearly.sent_last_24_hours = 45500;
  auto lines = JudgeSesAccount(nearly);
  EXPECT_EQ(Count(lines, Level::kFail), 0);
  EXPECT_THAT(Joined(lines), HasSubstr("warn ses: the 24-hour quota is nearly used up"));

  SesAccountInfo probation = healthy;
  probation.enforcement_status = "PROBATION";
  lines = JudgeSesAccount(probation);
  EXPECT_EQ(Count(lines, Level::kFail), 0);
  EXPECT_EQ(Count(lines, Level::kWarn), 1);

  SesAccountInfo all = healthy;
  all.production_access = false;
  all.sending_enabled = false;
  all.sent_last_24_hours = 60000;
  EXPECT_EQ(Count(JudgeSesAccount(all), Level::kFail), 3);
}

TEST(DoctorTest, SesRefusesMailFromAnAddressWhoseAddressOrDomainIsNotAVerifiedIdentity) {
  auto judge = [](const std::string& list) {
    return FormatDoctorLine(JudgeSesIdentity(list, "no-reply@acme.net"));
  };
  EXPECT_EQ(judge(R"({"EmailIdentities": [{"IdentityName": "ACME.net", "SendingEnabled": true}]})"),
            "ok   ses: sending identity acme.net is verified");
  EXPECT_EQ(judge(R"({"EmailIdentities": [{"IdentityName": "no-reply@acme.net",
                                           "SendingEnabled": true}]})"),
            "ok   ses: sending identity no-reply@acme.net is verified");
  EXPECT_THAT(judge(R"({"EmailIdentities": [{"IdentityName": "acme.net", "SendingEnabled": false,
                                             "VerificationStatus": "FAILED"}]})"),
              HasSubstr("FAIL ses: identity acme.net cannot send (VerificationStatus FAILED)"));
  EXPECT_THAT(judge(R"({"EmailIdentities": []})"),
              HasSubstr("FAIL ses: neither no-reply@acme.net nor acme.net is a verified"));
  EXPECT_THAT(judge(R"({"EmailIdentities": [], "NextToken": "more"})"),
              HasSubstr("warn ses: neither no-reply@acme.net nor acme.net is among"));
  EXPECT_THAT(judge("<html>"), HasSubstr("warn ses: the sending identity was not checked"));
}

TEST(DoctorTest, MessageSettings) {
  const auto healthy = CheckMessageSettings(Healthy());
  EXPECT_EQ(Count(healthy, Level::kOk), 2) << Joined(healthy);

  SenderConfig c = Healthy();
  c.from = "Example <no-reply@mailroom.localhost>";
  c.link_base_url = "http://app.example.net/?x=1";
  const std::string out = Joined(CheckMessageSettings(c));
  EXPECT_THAT(out, HasSubstr("warn from: no-reply@mailroom.localhost: mailroom.localhost is a "
                             "placeholder domain"));
  EXPECT_THAT(out, HasSubstr("warn links: MAILROOM_LINK_BASE_URL \"http://app.example.net/?x=1\" "
                             "has a query or fragment"));
  EXPECT_THAT(out, HasSubstr("in clear"));

  c = Healthy();
  c.from = "not an address";
  c.link_base_url = "https:///activate";
  const std::string bad = Joined(CheckMessageSettings(c));
  EXPECT_THAT(bad, HasSubstr("FAIL from: MAILROOM_FROM:"));
  EXPECT_THAT(bad, HasSubstr("FAIL links:"));
}

TEST(DoctorTest, TemplatesReportEveryProblemAndWhatRendersNothingToActOn) {
  FakeClock clock(absl::FromUnixSeconds(1795425300));
  SenderConfig c = Healthy();
  auto lines = CheckTemplates(c, &clock);
  ASSERT_EQ(lines.size(), 1u) << Joined(lines);
  // Every built-in action in English (the default) and German.
  EXPECT_THAT(Joined(lines), HasSubstr("ok   templates: 18 sets of 9 actions render a sample job "
                                       "(account_reactivated, account_reactivated.de, "
                                       "account_suspended, account_suspended.de, activation, "
                                       "activation.de, email_change, email_change.de, "
                                       "email_changed, email_changed.de, invitation, "
                                       "invitation.de, login_code, login_code.de, "
                                       "password_changed, password_changed.de, "
                                       "password_recovery, password_recovery.de) from the "
                                       "built-in templates"));

  // An action of the application's own, from the directory, is rendered too.
  c.template_dir = FreshDir("doctor_custom");
  WriteFile(c.template_dir + "/welcome_gift.subject", "A gift from {{product_name}}");
  WriteFile(c.template_dir + "/welcome_gift.txt", "Your code: {{code}} {{link}}");
  WriteFile(c.template_dir + "/welcome_gift.html", "<p>{{code}}</p>");
  lines = CheckTemplates(c, &clock);
  ASSERT_EQ(lines.size(), 1u) << Joined(lines);
  EXPECT_THAT(Joined(lines), HasSubstr("ok   templates: 19 sets of 10 actions render"));
  EXPECT_THAT(Joined(lines), HasSubstr("password_recovery.de, welcome_gift) from the built-in "
                                       "templates and " +
                                       c.template_dir));

  c.template_dir = FreshDir("doctor_templates");
  WriteFile(c.template_dir + "/activation.de.html", "{{#open}} never closed");
  WriteFile(c.template_dir + "/password_recovery.fr.subject", "Réinitialisez votre mot de passe");
  WriteFile(c.template_dir + "/login_code.de.subject", "Ihr Code: {{code}}");
  WriteFile(c.template_dir + "/password_recovery.fr.html", "<p>{{code}}</p>");
  WriteFile(c.template_dir + "/activation.it.subject", "Benvenuto {{login}}");
  WriteFile(c.template_dir + "/activation.it.txt", "Ciao {{login}}: {{lnik}}");
  WriteFile(c.template_dir + "/activation.it.html", "<p>Ciao {{login}}</p>");
  const std::string out = Joined(CheckTemplates(c, &clock));
  EXPECT_THAT(out, HasSubstr(absl::StrCat("FAIL templates: MAILROOM_TEMPLATE_DIR: ", c.template_dir,
                                          "/activation.de.html")));
  EXPECT_THAT(out, HasSubstr(absl::StrCat("FAIL templates: MAILROOM_TEMPLATE_DIR: ", c.template_dir,
                                          "/password_recovery.fr.txt is missing")));
  EXPECT_THAT(out, HasSubstr(absl::StrCat("FAIL templates: MAILROOM_TEMPLATE_DIR: ", c.template_dir,
                                          "/login_code.de.subject: a subject may not use the "
                                          "code")));
  EXPECT_THAT(out, HasSubstr("warn templates: activation.it: neither the text nor the HTML shows"));
  EXPECT_THAT(out, HasSubstr("warn templates: locale it has templates for activation but none "
                             "for password_recovery, login_code, email_change, invitation, "
                             "password_changed, email_changed, account_suspended, "
                             "account_reactivated: its readers get those in the default "
                             "language"));
  // Notices carry nothing to act on: no warning for them.
  WriteFile(c.template_dir + "/password_changed.subject", "Password changed");
  WriteFile(c.template_dir + "/password_changed.txt", "It was changed.");
  WriteFile(c.template_dir + "/password_changed.html", "<p>It was changed.</p>");
  // An action of the application's own without a default-language set.
  WriteFile(c.template_dir + "/team_invite.fr.subject", "Invitation");
  WriteFile(c.template_dir + "/team_invite.fr.txt", "{{link}}");
  WriteFile(c.template_dir + "/team_invite.fr.html", "<p>{{link}}</p>");
  const std::string more = Joined(CheckTemplates(c, &clock));
  EXPECT_THAT(more, Not(HasSubstr("password_changed: neither")));
  EXPECT_THAT(more, HasSubstr(absl::StrCat(
                        "FAIL templates: MAILROOM_TEMPLATE_DIR: ", c.template_dir,
                        "/team_invite.subject, team_invite.txt and team_invite.html are missing "
                        "(every action needs templates in the default language)")));
  EXPECT_THAT(out, Not(HasSubstr("ok   templates")));
}

TEST(DoctorTest, FileDirectoryMustTakeAFile) {
  SenderConfig c = Healthy();
  c.transport.kind = "file";
  c.transport.Mutable<FileSettings>().dir = FreshDir("doctor_outbox") + "/new";
  auto lines = CheckFileTransport(c);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].level, Level::kOk) << Joined(lines);
  EXPECT_TRUE(std::filesystem::is_empty(c.transport.Get<FileSettings>().dir));  // the probe is gone

  c.transport.Mutable<FileSettings>().dir = "/proc";  // no one, root included, creates a file there
  lines = CheckFileTransport(c);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(Joined(lines), HasSubstr("FAIL file: MAILROOM_FILE_DIR: cannot write in \"/proc\""));

  WriteFile(FreshDir("doctor_file") + "/plain", "x");
  c.transport.Mutable<FileSettings>().dir = std::string(std::getenv("TEST_TMPDIR")
                                                            ? std::getenv("TEST_TMPDIR")
                                                            : "/tmp") +
                                            "/doctor_file/plain/outbox";
  EXPECT_THAT(Joined(CheckFileTransport(c)),
              HasSubstr("FAIL file: MAILROOM_FILE_DIR: cannot create"));
}

// `sender doctor --send-test` through the sandbox: accepted with the provider's message id,
// refused with its class for suppressed@, 2 for an address that cannot be sent to; never the
// secret. (Against a real SMTP peer: integration_tests/doctor_test.cc.)
class SendTestTest : public ::testing::Test {
 protected:
  struct Result {
    int code;
    std::string out;
  };
  Result SendTest(const SenderConfig& c, const std::string& address) {
    std::FILE* f = std::tmpfile();
    const int code = RunSendTest(c, address, f, &clock_);
    std::rewind(f);
    std::string out;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
    std::fclose(f);
    return {code, out};
  }
  static SenderConfig Sandbox() {
    SenderConfig c = Healthy();
    c.transport.kind = "sandbox";
    c.transport.connections = 1;
    c.transport.Mutable<SandboxSettings>().domain = "sandbox.mailroom.test";
    // Events to a port nothing listens on: the test ends before the first is due.
    c.transport.Mutable<SandboxSettings>().feedback_url = "http://127.0.0.1:9/feedback/sandbox";
    c.transport.Mutable<SandboxSettings>().feedback_secret = kSecret;
    c.transport.Mutable<SandboxSettings>().event_delay = absl::Seconds(60);
    return c;
  }
  static constexpr char kSecret[] = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
  FakeClock clock_{absl::FromUnixSeconds(1767225600)};
};

TEST_F(SendTestTest, TheSandboxAcceptsOrRefusesAsAProviderDoes) {
  Result ok = SendTest(Sandbox(), "delivered@sandbox.mailroom.test");
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_THAT(ok.out, ::testing::StartsWith(
                          "ok   send-test: accepted by sandbox, provider message id sbx-"));

  Result refused = SendTest(Sandbox(), "suppressed@sandbox.mailroom.test");
  EXPECT_EQ(refused.code, 1) << refused.out;
  EXPECT_EQ(refused.out,
            "FAIL send-test: refused by sandbox: recipient rejected (permanent; the address is "
            "suppressed): sandbox 406: the recipient is on the sandbox's suppression list "
            "(suppressed@)\n");

  Result bad = SendTest(Sandbox(), "not an address");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_THAT(bad.out, HasSubstr("FAIL send-test: cannot send to that address: "));

  SenderConfig unparsable = Sandbox();
  unparsable.transport.Mutable<SandboxSettings>().feedback_secret = "whsec_dG9vLXNob3J0";
  Result config = SendTest(unparsable, "delivered@sandbox.mailroom.test");
  EXPECT_EQ(config.code, 2) << config.out;
  EXPECT_THAT(config.out, HasSubstr("FAIL send-test: MAILROOM_SANDBOX_FEEDBACK_SECRET: "));
  for (const Result* r : {&ok, &refused, &bad, &config}) {
    EXPECT_THAT(r->out, Not(HasSubstr("MfKQ9r8G")));
    EXPECT_THAT(r->out, Not(HasSubstr("dG9vLXNob3J0")));
  }
}

TEST_F(SendTestTest, EachFailureHasItsClass) {
  EXPECT_EQ(SendErrorClass(RecipientRejected("550 5.1.1 no such user")),
            "recipient rejected (permanent; the address is suppressed)");
  EXPECT_EQ(SendErrorClass(ProviderError("535 authentication failed")),
            "provider error (the breaker holds every job)");
  EXPECT_EQ(SendErrorClass(MaybeSent(absl::UnavailableError("timeout"))),
            "maybe sent (retried once)");
  EXPECT_EQ(SendErrorClass(absl::UnavailableError("451 try later")), "temporary (retried)");
  EXPECT_EQ(SendErrorClass(absl::InvalidArgumentError("554 rejected")),
            "permanent (the job fails)");
}

TEST(DoctorTest, TheSandboxWarnsThatNobodyReceivesAnything) {
  SenderConfig c = Healthy();
  c.transport.kind = "sandbox";
  c.transport.Mutable<SandboxSettings>().domain = "sandbox.mailroom.test";
  auto lines = CheckSandboxTransport(c);
  EXPECT_EQ(Joined(lines),
            "warn sandbox: a provider simulator: no email reaches anyone; recipients at "
            "sandbox.mailroom.test choose the answer and the events\n"
            "ok   sandbox: no events are posted (MAILROOM_SANDBOX_FEEDBACK_URL is unset)\n");
  c.transport.Mutable<SandboxSettings>().feedback_url = "http://127.0.0.1:9470/feedback/sandbox";
  EXPECT_THAT(Joined(CheckSandboxTransport(c)),
              HasSubstr("ok   sandbox: events are posted to 127.0.0.1 (not checked"));
}

}  // namespace
}  // namespace mailroom
