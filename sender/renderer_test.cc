// Templates (per action and locale, built in and from a directory), the locale's date format,
// and the renderer that turns a job into a MIME message.
#include "sender/renderer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/fake_clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using testing::FreshDir;
using testing::WriteFile;

// 2026-11-23T10:15:00Z
const absl::Time kExpiry = absl::FromUnixSeconds(1795428900);

TEST(TemplatesTest, DefaultsRenderLinksCodesAndEscapeHtml) {
  auto t = Templates::Load("");
  ASSERT_TRUE(t.ok());
  TemplateVars v{"<b>bob</b> & \"co\"", "bob@example.test", std::string(86, 'T'), "01234",
                 "Acme", "https://app.example.test/", absl::Now() + absl::Minutes(15), absl::Now()};
  auto act = t->Render(v1::ACTION_ACTIVATION, v);
  ASSERT_TRUE(act.ok());
  EXPECT_EQ(act->subject, "Activate your Acme account");
  EXPECT_THAT(act->text, HasSubstr("https://app.example.test/activate?token=" + v.token));
  EXPECT_THAT(act->text, HasSubstr("Hello <b>bob</b> & \"co\","));  // text is not escaped
  EXPECT_THAT(act->html, HasSubstr("Hello &lt;b&gt;bob&lt;/b&gt; &amp; &quot;co&quot;,"));
  EXPECT_THAT(act->html, Not(HasSubstr("<b>bob")));
  EXPECT_THAT(act->text, HasSubstr("expires in 1"));  // 14 or 15 minutes
  auto rec = t->Render(v1::ACTION_PASSWORD_RECOVERY, v);
  ASSERT_TRUE(rec.ok());
  EXPECT_THAT(rec->subject, HasSubstr("01234"));
  EXPECT_THAT(rec->text, HasSubstr("/recover?token="));
  v.link_base_url = "https://app.example.test";  // no trailing slash: same link
  EXPECT_THAT(t->Render(v1::ACTION_PASSWORD_RECOVERY, v)->text,
              HasSubstr("https://app.example.test/recover?token="));
}

TEST(TemplatesTest, SubjectCannotCarryALineBreak) {
  auto t = Templates::Load("");
  TemplateVars v{"x", "x@example.test", "t", "12345\r\nBcc: y@evil.test", "P", "https://a.test",
                 absl::Now(), absl::Now()};
  auto rec = t->Render(v1::ACTION_PASSWORD_RECOVERY, v);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->subject.find('\n'), std::string::npos);
  EXPECT_EQ(rec->subject.find('\r'), std::string::npos);
}

TEST(TemplatesTest, DirectoryOverridesOneTemplateAndKeepsTheOthers) {
  std::string dir = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
                    "/templates";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/activation.subject") << "Welcome, {{login}}!";
  auto t = Templates::Load(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  TemplateVars v{"ann", "ann@example.test", "tok", "11111", "P", "https://a.test", absl::Now(), absl::Now()};
  EXPECT_EQ(t->Render(v1::ACTION_ACTIVATION, v)->subject, "Welcome, ann!");
  EXPECT_THAT(t->Render(v1::ACTION_ACTIVATION, v)->text, HasSubstr("activate?token=tok"));
  std::ofstream(dir + "/password_recovery.html") << "{{#unclosed}} oops";
  auto broken = Templates::Load(dir);
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr("password_recovery.html"));
}

TEST(TemplatesTest, FileNamesAreTheReadmes) {
  // README: MAILROOM_TEMPLATE_DIR holds activation.subject, activation.txt, activation.html,
  // password_recovery.{subject,txt,html}.
  std::string dir = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
                    "/readme-templates";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const char* actions[] = {"activation", "password_recovery"};
  for (const char* a : actions) {
    std::ofstream(dir + "/" + a + ".subject") << a << " subject {{login}}";
    std::ofstream(dir + "/" + a + ".txt") << a << " text {{link}}";
    std::ofstream(dir + "/" + a + ".html") << a << " html {{code}}";
  }
  auto t = Templates::Load(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  TemplateVars v{"ann", "ann@example.test", "tok", "11111", "P", "https://a.test", absl::Now(), absl::Now()};
  auto act = t->Render(v1::ACTION_ACTIVATION, v);
  auto rec = t->Render(v1::ACTION_PASSWORD_RECOVERY, v);
  ASSERT_TRUE(act.ok() && rec.ok());
  EXPECT_EQ(act->subject, "activation subject ann");
  EXPECT_EQ(act->text, "activation text https://a.test/activate?token=tok");
  EXPECT_EQ(act->html, "activation html 11111");
  EXPECT_EQ(rec->subject, "password_recovery subject ann");
  EXPECT_EQ(rec->text, "password_recovery text https://a.test/recover?token=tok");
  EXPECT_EQ(rec->html, "password_recovery html 11111");
  // A file under the old name would be ignored silently: it is an error naming the fix.
  std::ofstream(dir + "/activation.txt.mustache") << "old";
  auto old = Templates::Load(dir);
  ASSERT_FALSE(old.ok());
  EXPECT_THAT(std::string(old.status().message()),
              HasSubstr("rename activation.txt.mustache to activation.txt"));
}

TEST(LocaleTest, TagsAreNormalisedAndFallBackToTheLanguageThenTheDefault) {
  EXPECT_EQ(NormalizeLocale("de-AT"), "de-AT");
  EXPECT_EQ(NormalizeLocale("DE_at"), "de-AT");
  EXPECT_EQ(NormalizeLocale("sr-latn-rs"), "sr-Latn-RS");
  for (const char* bad : {"", "d", "deutsch", "de-", "de-A", "de/AT", "../x", "1e-AT"}) {
    EXPECT_EQ(NormalizeLocale(bad), "") << bad;
  }
  EXPECT_EQ(LocaleChain("de-AT"), (std::vector<std::string>{"de-AT", "de", ""}));
  EXPECT_EQ(LocaleChain(""), std::vector<std::string>{""});
  EXPECT_EQ(LocaleChain("not a locale"), std::vector<std::string>{""});
}

TEST(LocaleTest, ExpiryIsWrittenTheLocalesWayInUtc) {
  EXPECT_EQ(FormatExpiry(kExpiry, ""), "2026-11-23T10:15:00Z");  // unchanged without a locale
  EXPECT_EQ(FormatExpiry(kExpiry, "de"), "23.11.2026, 10:15 UTC");
  EXPECT_EQ(FormatExpiry(kExpiry, "de-AT"), "23.11.2026, 10:15 UTC");
  EXPECT_EQ(FormatExpiry(kExpiry, "en-US"), "11/23/2026, 10:15 AM UTC");
  EXPECT_EQ(FormatExpiry(kExpiry, "en-GB"), "23/11/2026, 10:15 UTC");
  EXPECT_EQ(FormatExpiry(kExpiry, "fr"), "23/11/2026 10:15 UTC");
  EXPECT_EQ(FormatExpiry(kExpiry, "fr-CA"), "2026-11-23 10:15 UTC");
  EXPECT_EQ(FormatExpiry(kExpiry, "ja-JP"), "2026/11/23 10:15 UTC");
  EXPECT_EQ(FormatExpiry(kExpiry, "tlh"), "2026-11-23T10:15:00Z");  // not in the table
}

TEST(TemplatesTest, BuiltInGermanForGermanLocalesEnglishOtherwise) {
  auto t = Templates::Load("");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->Locales(v1::ACTION_PASSWORD_RECOVERY), (std::vector<std::string>{"", "de"}));
  EXPECT_EQ(t->Resolve(v1::ACTION_PASSWORD_RECOVERY, "de-AT"), "de");
  EXPECT_EQ(t->Resolve(v1::ACTION_PASSWORD_RECOVERY, "fr"), "");
  TemplateVars v{"anna", "anna@example.test", "tok", "54321", "Acme", "https://a.test",
                 kExpiry, kExpiry - absl::Minutes(30), "de-AT"};
  auto de = t->Render(v1::ACTION_PASSWORD_RECOVERY, v);
  ASSERT_TRUE(de.ok()) << de.status();
  EXPECT_EQ(de->subject, "Ihr Acme-Code zum Zurücksetzen des Passworts: 54321");
  EXPECT_THAT(de->text, HasSubstr("Code und Link sind 30 Minuten gültig (bis 23.11.2026, 10:15 UTC)"));
  EXPECT_THAT(de->html, HasSubstr("<html lang=\"de\">"));
  v.locale = "fr-FR";  // no French templates: the default ones, with a French date
  auto fr = t->Render(v1::ACTION_ACTIVATION, v);
  ASSERT_TRUE(fr.ok());
  EXPECT_EQ(fr->subject, "Activate your Acme account");
  EXPECT_THAT(fr->text, HasSubstr("(23/11/2026 10:15 UTC)"));
}

TEST(TemplatesTest, RegionalTemplatesWinOverTheLanguagesOnes) {
  std::string dir = FreshDir("regional");
  WriteFile(dir + "/activation.de-AT.subject", "Servus {{login}}");
  WriteFile(dir + "/activation.de-at.txt", "Grüß Gott, {{login}}: {{link}} ({{expires_at_iso}})");
  WriteFile(dir + "/activation.de-AT.html", "<p>Servus {{login}}</p>");
  WriteFile(dir + "/notes.md", "not a template");
  auto t = Templates::Load(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  TemplateVars v{"sepp", "sepp@example.test", "tok", "", "P", "https://a.test", kExpiry,
                 kExpiry, "de-AT"};
  auto at = t->Render(v1::ACTION_ACTIVATION, v);
  ASSERT_TRUE(at.ok());
  EXPECT_EQ(at->subject, "Servus sepp");
  EXPECT_EQ(at->text, "Grüß Gott, sepp: https://a.test/activate?token=tok (2026-11-23T10:15:00Z)");
  v.locale = "de-DE";
  EXPECT_EQ(t->Render(v1::ACTION_ACTIVATION, v)->subject, "Aktivieren Sie Ihr P-Konto");
  // Password recovery has no de-AT set: German it is.
  v.locale = "de-AT";
  EXPECT_EQ(t->Resolve(v1::ACTION_PASSWORD_RECOVERY, "de-AT"), "de");
}

TEST(TemplatesTest, AnIncompleteLocaleIsAConfigErrorNamingTheMissingFile) {
  std::string dir = FreshDir("incomplete");
  WriteFile(dir + "/password_recovery.fr.subject", "Votre code {{code}}");
  WriteFile(dir + "/password_recovery.fr.html", "<p>{{code}}</p>");
  auto t = Templates::Load(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()),
              HasSubstr(dir + "/password_recovery.fr.txt is missing"));
}

TEST(TemplatesTest, BrokenMisnamedOrUnreadableFilesAreConfigErrorsNamingThem) {
  std::string dir = FreshDir("broken");
  WriteFile(dir + "/activation.de.html", "{{#open}} never closed");
  auto broken = Templates::Load(dir);
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr(dir + "/activation.de.html"));

  dir = FreshDir("misnamed");
  WriteFile(dir + "/activation.german.txt", "x");
  auto misnamed = Templates::Load(dir);
  ASSERT_FALSE(misnamed.ok());
  EXPECT_THAT(std::string(misnamed.status().message()), HasSubstr("activation.german.txt"));

  dir = FreshDir("unreadable");
  std::filesystem::create_directories(dir + "/activation.txt");  // a directory, not a file
  auto unreadable = Templates::Load(dir);
  ASSERT_FALSE(unreadable.ok());
  EXPECT_THAT(std::string(unreadable.status().message()), HasSubstr(dir + "/activation.txt"));

  auto missing_dir = Templates::Load(dir + "/nope");
  ASSERT_FALSE(missing_dir.ok());
  EXPECT_THAT(std::string(missing_dir.status().message()), HasSubstr(dir + "/nope"));
}

TEST(TemplatesTest, LoadAllReportsEveryProblemAndKeepsTheSetsThatRender) {
  std::string dir = FreshDir("every_problem");
  WriteFile(dir + "/activation.de.html", "{{#open}} never closed");
  WriteFile(dir + "/activation.german.txt", "x");
  WriteFile(dir + "/password_recovery.fr.subject", "Votre code {{code}}");
  WriteFile(dir + "/password_recovery.fr.html", "<p>{{code}}</p>");
  WriteFile(dir + "/password_recovery.it.subject", "Il tuo codice {{code}}");
  WriteFile(dir + "/password_recovery.it.txt", "{{code}}");
  WriteFile(dir + "/password_recovery.it.html", "<p>{{code}}</p>");
  std::vector<absl::Status> problems;
  Templates t = Templates::LoadAll(dir, &problems);
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_THAT(std::string(problems[0].message()), HasSubstr("activation.german.txt"));
  EXPECT_THAT(std::string(problems[1].message()), HasSubstr(dir + "/activation.de.html"));
  EXPECT_THAT(std::string(problems[2].message()),
              HasSubstr(dir + "/password_recovery.fr.txt is missing"));
  // Load's error is the first of them.
  EXPECT_EQ(Templates::Load(dir).status(), problems[0]);
  // The broken sets are left out; the rest render.
  EXPECT_EQ(t.Locales(v1::ACTION_ACTIVATION), (std::vector<std::string>{""}));
  EXPECT_EQ(t.Locales(v1::ACTION_PASSWORD_RECOVERY), (std::vector<std::string>{"", "de", "it"}));
}

TEST(TemplatesTest, TheShippedTemplateFolderIsTheBuiltInSet) {
  // sender/templates/ is what the binary carries: a starting point for MAILROOM_TEMPLATE_DIR.
  bool de = false;
  for (const auto& [name, content] : BuiltinTemplateFiles()) {
    EXPECT_FALSE(content.empty()) << name;
    de |= name == "password_recovery.de.html";
  }
  EXPECT_TRUE(de);
  EXPECT_EQ(BuiltinTemplateFiles().size(), 12u);
}

class RendererTest : public ::testing::Test {
 protected:
  RendererTest() : clock_(kExpiry - absl::Minutes(45)) {}
  Renderer Make() {
    auto t = Templates::Load("");
    EXPECT_TRUE(t.ok());
    auto r = Renderer::Create(*std::move(t),
                              {"Acme <no-reply@acme.example>", "Acme", "https://acme.example"},
                              &clock_);
    EXPECT_TRUE(r.ok()) << r.status();
    return *std::move(r);
  }
  v1::Job Job(const std::string& locale) {
    v1::Job j;
    j.set_job_id(7);
    j.set_action(v1::ACTION_PASSWORD_RECOVERY);
    j.set_email("anna@example.test");
    j.set_login("anna");
    j.set_token("tok");
    j.set_code("54321");
    j.set_expires_at(absl::ToUnixSeconds(kExpiry));
    j.set_locale(locale);
    return j;
  }
  FakeClock clock_;
};

TEST_F(RendererTest, JobsBecomeMimeInTheirLocale) {
  Renderer r = Make();
  auto email = r.Render(Job("de-AT"));
  ASSERT_TRUE(email.ok()) << email.status();
  EXPECT_EQ(email->from_address, "no-reply@acme.example");
  EXPECT_EQ(email->to_address, "anna@example.test");
  EXPECT_TRUE(absl::EndsWith(email->message_id, "@acme.example"));
  // Non-ASCII subjects are RFC 2047-encoded; the date is the clock's.
  EXPECT_THAT(email->mime, HasSubstr("Subject: =?UTF-8?B?"));
  EXPECT_THAT(email->mime, HasSubstr("Date: Mon, 23 Nov 2026 09:30:00 +0000"));
  // What the message was made of, for transports that send fields (http).
  const EmailContent& c = email->content;
  EXPECT_EQ(c.job_id, 7u);
  EXPECT_EQ(c.action, "password_recovery");
  EXPECT_EQ(c.attempt, 1);
  EXPECT_EQ(c.from, "Acme <no-reply@acme.example>");
  EXPECT_EQ(c.locale, "de-AT");
  EXPECT_EQ(c.expires_at, kExpiry);
  EXPECT_THAT(c.text, HasSubstr("45 Minuten gültig"));
  EXPECT_THAT(c.html, HasSubstr("54321"));
  EXPECT_FALSE(c.subject.empty());
  std::string body;
  const std::string html_part = "Content-Type: text/plain; charset=UTF-8\r\n"
                                "Content-Transfer-Encoding: base64\r\n\r\n";
  size_t at = email->mime.find(html_part);
  ASSERT_NE(at, std::string::npos);
  std::string b64 = email->mime.substr(at + html_part.size());
  b64 = b64.substr(0, b64.find("--"));
  b64.erase(std::remove(b64.begin(), b64.end(), '\r'), b64.end());
  b64.erase(std::remove(b64.begin(), b64.end(), '\n'), b64.end());
  ASSERT_TRUE(absl::Base64Unescape(b64, &body));
  EXPECT_THAT(body, HasSubstr("45 Minuten gültig (bis 23.11.2026, 10:15 UTC)"));
  EXPECT_THAT(body, HasSubstr("https://acme.example/recover?token=tok"));
}

TEST_F(RendererTest, BadRecipientsAndSendersAreRefused) {
  Renderer r = Make();
  v1::Job j = Job("");
  j.set_email("anna@@example.test");
  EXPECT_EQ(r.Render(j).status().code(), absl::StatusCode::kInvalidArgument);
  auto t = Templates::Load("");
  auto bad = Renderer::Create(*std::move(t), {"not an address", "P", "https://a.test"}, &clock_);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StartsWith(bad.status().message(), "MAILROOM_FROM: "));
}

TEST_F(RendererTest, PreviewUsesSampleData) {
  Renderer r = Make();
  auto p = r.Preview(v1::ACTION_ACTIVATION, "de");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->subject, "Aktivieren Sie Ihr Acme-Konto");
  EXPECT_THAT(p->text, HasSubstr("Hallo jane.doe,"));
  EXPECT_THAT(p->text, HasSubstr("https://acme.example/activate?token=SAMPLE-TOKEN"));
  EXPECT_THAT(p->text, HasSubstr("60 Minuten"));
}

}  // namespace
}  // namespace mailroom
