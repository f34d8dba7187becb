// Templates (per action and locale, built in and from a directory), the locale's date format,
// and the renderer that turns a job into a MIME message.
#include "sender/render/renderer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/fake_clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sender/render/template_pool.h"
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
  TemplateVars v{"<b>bob</b> & \"co\"",
                 "bob@example.test",
                 std::string(86, 'T'),
                 "01234",
                 "Acme",
                 "https://app.example.test/",
                 absl::Now() + absl::Minutes(15),
                 absl::Now()};
  auto act = t->Render("activation", v);
  ASSERT_TRUE(act.ok());
  EXPECT_EQ(act->subject, "Activate your Acme account");
  EXPECT_THAT(act->text, HasSubstr("https://app.example.test/activate?token=" + v.token));
  EXPECT_THAT(act->text, HasSubstr("Hello <b>bob</b> & \"co\","));  // text is not escaped
  EXPECT_THAT(act->html, HasSubstr("Hello &lt;b&gt;bob&lt;/b&gt; &amp; &quot;co&quot;,"));
  EXPECT_THAT(act->html, Not(HasSubstr("<b>bob")));
  EXPECT_THAT(act->text, HasSubstr("expires in 1"));  // 14 or 15 minutes
  auto rec = t->Render("password_recovery", v);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->subject, "Reset your Acme password");
  EXPECT_THAT(rec->text, HasSubstr("Your code is 01234."));
  EXPECT_THAT(rec->html, HasSubstr("<strong>01234</strong>"));
  EXPECT_THAT(rec->text, HasSubstr("/recover?token="));
  v.link_base_url = "https://app.example.test";  // no trailing slash: same link
  EXPECT_THAT(t->Render("password_recovery", v)->text,
              HasSubstr("https://app.example.test/recover?token="));
}

TEST(TemplatesTest, SubjectCannotCarryALineBreak) {
  // A job's login in an operator's subject, the product name in a built-in one.
  std::string dir = FreshDir("subject_crlf");
  WriteFile(dir + "/activation.subject", "Welcome, {{login}}");
  auto t = Templates::Load(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  TemplateVars v{"x\r\nBcc: y@evil.test", "x@example.test", "t",         "12345",
                 "P\r\nBcc: z@evil.test", "https://a.test", absl::Now(), absl::Now()};
  for (const char* action : {"activation", "password_recovery"}) {
    auto r = t->Render(action, v);
    ASSERT_TRUE(r.ok()) << action;
    EXPECT_THAT(r->subject, HasSubstr("Bcc: ")) << action;  // the variable is in it, on one line
    EXPECT_EQ(r->subject.find('\n'), std::string::npos) << action;
    EXPECT_EQ(r->subject.find('\r'), std::string::npos) << action;
  }
}

TEST(TemplatesTest, DirectoryOverridesOneTemplateAndKeepsTheOthers) {
  std::string dir = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
                    "/templates";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/activation.subject") << "Welcome, {{login}}!";
  auto t = Templates::Load(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  TemplateVars v{"ann", "ann@example.test", "tok",       "11111",
                 "P",   "https://a.test",   absl::Now(), absl::Now()};
  EXPECT_EQ(t->Render("activation", v)->subject, "Welcome, ann!");
  EXPECT_THAT(t->Render("activation", v)->text, HasSubstr("activate?token=tok"));
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
  TemplateVars v{"ann", "ann@example.test", "tok",       "11111",
                 "P",   "https://a.test",   absl::Now(), absl::Now()};
  auto act = t->Render("activation", v);
  auto rec = t->Render("password_recovery", v);
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
  EXPECT_EQ(t->Locales("password_recovery"), (std::vector<std::string>{"", "de"}));
  EXPECT_EQ(t->Resolve("password_recovery", "de-AT"), "de");
  EXPECT_EQ(t->Resolve("password_recovery", "fr"), "");
  TemplateVars v{"anna",  "anna@example.test",         "tok",  "54321", "Acme", "https://a.test",
                 kExpiry, kExpiry - absl::Minutes(30), "de-AT"};
  auto de = t->Render("password_recovery", v);
  ASSERT_TRUE(de.ok()) << de.status();
  EXPECT_EQ(de->subject, "Setzen Sie Ihr Acme-Passwort zurück");
  EXPECT_THAT(de->text, HasSubstr("Ihr Code lautet 54321."));
  EXPECT_THAT(de->text,
              HasSubstr("Code und Link sind 30 Minuten gültig (bis 23.11.2026, 10:15 UTC)"));
  EXPECT_THAT(de->html, HasSubstr("<html lang=\"de\">"));
  v.locale = "fr-FR";  // no French templates: the default ones, with a French date
  auto fr = t->Render("activation", v);
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
  TemplateVars v{"sepp", "sepp@example.test", "tok", "", "P", "https://a.test", kExpiry, kExpiry,
                 "de-AT"};
  auto at = t->Render("activation", v);
  ASSERT_TRUE(at.ok());
  EXPECT_EQ(at->subject, "Servus sepp");
  EXPECT_EQ(at->text, "Grüß Gott, sepp: https://a.test/activate?token=tok (2026-11-23T10:15:00Z)");
  v.locale = "de-DE";
  EXPECT_EQ(t->Render("activation", v)->subject, "Aktivieren Sie Ihr P-Konto");
  // Password recovery has no de-AT set: German it is.
  v.locale = "de-AT";
  EXPECT_EQ(t->Resolve("password_recovery", "de-AT"), "de");
}

TEST(TemplatesTest, AnIncompleteLocaleIsAConfigErrorNamingTheMissingFile) {
  std::string dir = FreshDir("incomplete");
  WriteFile(dir + "/password_recovery.fr.subject", "Réinitialisez votre mot de passe");
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
  WriteFile(dir + "/password_recovery.fr.subject", "Réinitialisez votre mot de passe");
  WriteFile(dir + "/password_recovery.fr.html", "<p>{{code}}</p>");
  WriteFile(dir + "/password_recovery.it.subject", "Reimposta la tua password");
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
  EXPECT_EQ(t.Locales("activation"), (std::vector<std::string>{""}));
  EXPECT_EQ(t.Locales("password_recovery"), (std::vector<std::string>{"", "de", "it"}));
}

TEST(TemplatesTest, ABrokenDefaultSetIsOneProblemAndItsOtherLocalesStayForTheDoctor) {
  std::string dir = FreshDir("broken_default");
  WriteFile(dir + "/password_recovery.html", "<p>{{#code}}{{code}}</p>");
  std::vector<absl::Status> problems;
  Templates t = Templates::LoadAll(dir, &problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(std::string(problems[0].message()), HasSubstr(dir + "/password_recovery.html"));
  EXPECT_EQ(t.Locales("password_recovery"), (std::vector<std::string>{"de"}));
  EXPECT_EQ(Templates::Load(dir).status(), problems[0]);
}

TEST(TemplatesTest, TheShippedTemplateFolderIsTheBuiltInSet) {
  // sender/render/templates/ is what the binary carries: a starting point for
  // MAILROOM_TEMPLATE_DIR.
  bool de = false;
  for (const auto& [name, content] : BuiltinTemplateFiles()) {
    EXPECT_FALSE(content.empty()) << name;
    de |= name == "password_recovery.de.html";
  }
  EXPECT_TRUE(de);
  EXPECT_EQ(BuiltinTemplateFiles().size(), 54u);
}

TEST(TemplatesTest, NoBuiltInSubjectInAnyLanguageUsesTheCode) {
  int subjects = 0;
  for (const auto& [name, content] : BuiltinTemplateFiles()) {
    if (!absl::EndsWith(name, ".subject")) continue;
    ++subjects;
    TemplatePool parsed(content, /*escape=*/false);
    ASSERT_TRUE(parsed.valid()) << name;
    EXPECT_FALSE(parsed.Uses("code")) << name << ": " << content;
  }
  EXPECT_EQ(subjects, 18);  // 9 actions, English and German
}

// Every way a Mustache tag can name the code, as kainjow reads them.
const std::vector<std::string> kSubjectsWithTheCode = {
    "Code: {{code}}",
    "{{ code }}",
    "{{{code}}}",
    "{{{ code }}}",
    "{{&code}}",
    "{{& code}}",
    "{{#code}}{{.}}{{/code}}",
    "{{^code}}no code{{/code}}",
    "{{#login}}{{code}}{{/login}}",
    "{{>code}}",
    "{{code.x}}",
    "{{=<% %>=}}Code: <%code%>",
    "{{=<% %>=}}<%={{ }}=%>{{{code}}}",
};

TEST(TemplatesTest, AnOperatorsSubjectThatUsesTheCodeIsAConfigErrorNamingTheFile) {
  int i = 0;
  for (const std::string& subject : kSubjectsWithTheCode) {
    SCOPED_TRACE(subject);
    const std::string dir = FreshDir(absl::StrCat("code_subject_", i++));
    WriteFile(dir + "/login_code.subject", subject);
    auto t = Templates::Load(dir);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(t.status().message()),
                HasSubstr(absl::StrCat("MAILROOM_TEMPLATE_DIR: ", dir,
                                       "/login_code.subject: a subject may not use the code")));
  }
  // In a locale's set and in an action of the application's own alike; the body may use it.
  std::string dir = FreshDir("code_subject_locale");
  WriteFile(dir + "/password_recovery.de-AT.subject", "Ihr Code: {{code}}");
  WriteFile(dir + "/password_recovery.de-AT.txt", "{{code}} {{link}}");
  WriteFile(dir + "/password_recovery.de-AT.html", "<p>{{code}}</p>");
  EXPECT_THAT(std::string(Templates::Load(dir).status().message()),
              HasSubstr(dir + "/password_recovery.de-AT.subject: a subject may not use the code"));
  std::vector<absl::Status> problems;
  Templates all = Templates::LoadAll(dir, &problems);  // `sender doctor`: the set is left out
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(all.Locales("password_recovery"), (std::vector<std::string>{"", "de"}));
  dir = FreshDir("code_subject_own_action");
  WriteFile(dir + "/welcome_gift.subject", "Your gift: {{{ code }}}");
  WriteFile(dir + "/welcome_gift.txt", "Redeem {{code}}");
  WriteFile(dir + "/welcome_gift.html", "<p>Redeem {{code}}</p>");
  EXPECT_THAT(std::string(Templates::Load(dir).status().message()),
              HasSubstr(dir + "/welcome_gift.subject: a subject may not use the code"));
  // Other names, a comment and the word itself are not the code.
  WriteFile(
      dir + "/welcome_gift.subject",
      "{{! no {{code here }}Your {{product_name}} gift code, {{login}} {{codes}} {{zipcode}}");
  auto fine = Templates::Load(dir);
  ASSERT_TRUE(fine.ok()) << fine.status();
  TemplateVars v{"ann",  "ann@example.test", "tok",   "31415926",
                 "Acme", "https://a.test",   kExpiry, kExpiry};
  auto gift = fine->Render("welcome_gift", v);
  ASSERT_TRUE(gift.ok()) << gift.status();
  EXPECT_EQ(gift->subject, "Your Acme gift code, ann  ");
  EXPECT_EQ(gift->text, "Redeem 31415926");
}

class RendererTest : public ::testing::Test {
 protected:
  RendererTest() : clock_(kExpiry - absl::Minutes(45)) {}
  Renderer Make(const std::string& dir = "") {
    auto t = Templates::Load(dir);
    EXPECT_TRUE(t.ok()) << t.status();
    auto r = Renderer::Create(*std::move(t),
                              {"Acme <no-reply@acme.example>", "Acme", "https://acme.example", dir},
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

TEST_F(RendererTest, EveryTryOfAJobIsTheSameMessage) {
  v1::Job j = Job("");
  j.set_created_at(absl::ToUnixSeconds(clock_.Now()));  // requested at 09:30, expires 10:15
  Renderer first_sender = Make();
  auto first = first_sender.Render(j);
  ASSERT_TRUE(first.ok()) << first.status();
  // A retry three minutes later, in another sender, after a failure.
  clock_.Advance(absl::Minutes(3));
  j.set_failures(1);
  j.set_attempt(2);
  Renderer second_sender = Make();
  auto retry = second_sender.Render(j);
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_EQ(retry->message_id, first->message_id);
  EXPECT_EQ(retry->content.subject, first->content.subject);
  EXPECT_EQ(retry->content.text, first->content.text);
  EXPECT_EQ(retry->content.html, first->content.html);
  EXPECT_EQ(retry->content.attempt, 2);
  // The text is composed at the request (the token's lifetime); the Date is the try's.
  EXPECT_THAT(retry->content.text, HasSubstr("expire in 45 minutes"));
  EXPECT_THAT(first->mime, HasSubstr("Date: Mon, 23 Nov 2026 09:30:00 +0000"));
  EXPECT_THAT(retry->mime, HasSubstr("Date: Mon, 23 Nov 2026 09:33:00 +0000"));
  auto without_date = [](std::string mime) {
    const size_t at = mime.find("Date: ");
    return mime.erase(at, mime.find("\r\n", at) - at);
  };
  EXPECT_EQ(without_date(retry->mime), without_date(first->mime));
  EXPECT_TRUE(absl::EndsWith(retry->message_id, "@acme.example"));
  EXPECT_EQ(retry->message_id.size(), 32 + std::string("@acme.example").size());
  // Another job (another id, or the same id in another request) is another message; the id
  // is keyed by the job's secret, so it cannot be told from the job's public facts alone.
  v1::Job other = j;
  other.set_job_id(8);
  EXPECT_NE(second_sender.Render(other)->message_id, first->message_id);
  other = j;
  other.set_created_at(j.created_at() + 1);
  EXPECT_NE(second_sender.Render(other)->message_id, first->message_id);
  other = j;
  other.set_token("another secret");
  EXPECT_NE(second_sender.Render(other)->message_id, first->message_id);
  // A notice (no token) and a sample (no request time) get a new id each time.
  other = j;
  other.set_token("");
  EXPECT_NE(second_sender.Render(other)->message_id, second_sender.Render(other)->message_id);
  j.set_created_at(0);
  auto sample = second_sender.Render(j);
  ASSERT_TRUE(sample.ok());
  EXPECT_THAT(sample->content.text, HasSubstr("expire in 42 minutes"));
  EXPECT_NE(second_sender.Render(j)->message_id, sample->message_id);
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
  auto p = r.Preview("activation", "de");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->subject, "Aktivieren Sie Ihr Acme-Konto");
  EXPECT_THAT(p->text, HasSubstr("Hallo jane.doe,"));
  EXPECT_THAT(p->text, HasSubstr("https://acme.example/activate?token=SAMPLE-TOKEN"));
  EXPECT_THAT(p->text, HasSubstr("15 Minuten"));  // the activation's expiry as installed
}

// A preview shows each built-in action's real code length and expiry (the database's seeds), and
// the rules given (sender render --code-length/--expiry) for a changed or an application's own.
TEST_F(RendererTest, PreviewsUseEachActionsCodeLengthAndExpiry) {
  Renderer r = Make();
  auto login = r.Preview("login_code", "");
  ASSERT_TRUE(login.ok()) << login.status();
  EXPECT_THAT(login->text, HasSubstr("    123456\n"));
  EXPECT_THAT(login->text, HasSubstr("expire in 10 minutes"));
  auto recovery = r.Preview("password_recovery", "");
  ASSERT_TRUE(recovery.ok()) << recovery.status();
  EXPECT_THAT(recovery->text, HasSubstr("12345"));
  EXPECT_THAT(recovery->text, Not(HasSubstr("123456")));
  EXPECT_THAT(recovery->text, HasSubstr("15 minutes"));
  auto longer = r.Preview("login_code", "", ActionRules{8, absl::Minutes(30)});
  ASSERT_TRUE(longer.ok()) << longer.status();
  EXPECT_THAT(longer->text, HasSubstr("    12345678\n"));
  EXPECT_THAT(longer->text, HasSubstr("expire in 30 minutes"));
  EXPECT_EQ(DefaultActionRules("invitation").expiry, absl::Hours(24 * 7));
  EXPECT_EQ(DefaultActionRules("document_signature").code_length, 6);
  EXPECT_EQ(DefaultActionRules("document_signature").expiry, absl::Hours(24));
}

// The parts of a rendered job's MIME message, decoded.
std::string DecodedPart(const std::string& mime, const std::string& type) {
  const std::string head = absl::StrCat(
      "Content-Type: ", type, "; charset=UTF-8\r\nContent-Transfer-Encoding: base64\r\n\r\n");
  size_t at = mime.find(head);
  if (at == std::string::npos) return "";
  std::string b64 = mime.substr(at + head.size());
  b64 = b64.substr(0, b64.find("--"));
  b64.erase(std::remove(b64.begin(), b64.end(), '\r'), b64.end());
  b64.erase(std::remove(b64.begin(), b64.end(), '\n'), b64.end());
  std::string out;
  return absl::Base64Unescape(b64, &out) ? out : "";
}

// What every built-in action's email must say, in every built-in locale.
struct Expected {
  std::string action;
  std::string link_path;  // "" for a notice: no link, no token, no code
  bool shows_code = false;
  bool shows_address = false;
};

TEST_F(RendererTest, EveryBuiltInActionRendersInEveryBuiltInLocale) {
  const std::vector<Expected> expected = {
      {"activation", "/activate"},
      {"password_recovery", "/recover", true},
      {"login_code", "/action/login_code", true},
      {"email_change", "/action/email_change", false, true},
      {"invitation", "/action/invitation"},
      {"password_changed", ""},
      {"email_changed", "", false, true},
      {"account_suspended", ""},
      {"account_reactivated", ""},
  };
  ASSERT_EQ(expected.size(), BuiltinActions().size());
  Renderer r = Make();
  std::set<std::string> subjects;
  int rendered = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const Expected& e = expected[i];
    ASSERT_EQ(e.action, BuiltinActions()[i]);
    EXPECT_EQ(IsBuiltinNotice(e.action), e.link_path.empty()) << e.action;
    EXPECT_EQ(r.templates()->Locales(e.action), (std::vector<std::string>{"", "de"}));
    for (const std::string locale : {"en-GB", "de-CH"}) {
      SCOPED_TRACE(e.action + " " + locale);
      v1::Job j = Job(locale);
      j.set_action(v1::ACTION_OTHER);
      j.set_action_name(e.action);
      j.set_email("new.anna@example.test");
      j.set_token(e.link_path.empty() ? "" : "tok");
      j.set_code(e.shows_code ? "12345678" : "");
      auto email = r.Render(j);
      ASSERT_TRUE(email.ok()) << email.status();
      ++rendered;
      const EmailContent& c = email->content;
      EXPECT_EQ(c.action, e.action);
      EXPECT_EQ(DecodedPart(email->mime, "text/plain"), c.text);
      EXPECT_EQ(DecodedPart(email->mime, "text/html"), c.html);
      EXPECT_TRUE(subjects.insert(c.subject).second) << "a subject shared: " << c.subject;
      EXPECT_THAT(c.subject, HasSubstr("Acme"));
      for (const std::string& part : {c.subject, c.text, c.html}) {
        EXPECT_THAT(part, Not(HasSubstr("{{")));
      }
      EXPECT_THAT(c.text, HasSubstr(locale == "de-CH" ? "Hallo anna," : "Hello anna,"));
      EXPECT_THAT(c.html, HasSubstr(locale == "de-CH" ? "<html lang=\"de\">" : "<html>"));
      if (e.link_path.empty()) {
        EXPECT_THAT(c.text + c.html, Not(HasSubstr("token=")));
        EXPECT_THAT(c.text + c.html, Not(HasSubstr("href")));
      } else {
        const std::string link = absl::StrCat("https://acme.example", e.link_path, "?token=tok");
        EXPECT_THAT(c.text, HasSubstr(link));
        // A sign-in link carries its code: one click signs in where the email is read.
        const std::string href = e.action == "login_code" ? link + "&amp;code=12345678" : link;
        EXPECT_THAT(c.html, HasSubstr(absl::StrCat("href=\"", href, "\"")));
        if (e.action == "login_code") {
          EXPECT_THAT(c.text, HasSubstr(link + "&code=12345678\n"));
        }
        EXPECT_THAT(c.text,
                    HasSubstr(locale == "de-CH" ? "45 Minuten gültig (bis 23.11.2026, 10:15 UTC)"
                                                : "45 minutes (23/11/2026, 10:15 UTC)"));
      }
      // The code is in the body only: a subject shows on lock screens and in previews.
      EXPECT_THAT(c.subject, Not(HasSubstr("12345678")));
      if (e.shows_code) {
        EXPECT_THAT(c.text, HasSubstr("12345678"));
        EXPECT_THAT(c.html, HasSubstr("<strong>12345678</strong>"));
      }
      if (e.shows_address) {
        EXPECT_THAT(c.text + c.html, HasSubstr("new.anna@example.test"));
      }
    }
  }
  EXPECT_EQ(rendered, 18);
}

TEST_F(RendererTest, TheSignInCodeStandsOnALineOfItsOwn) {
  Renderer r = Make();
  v1::Job j = Job("");
  j.set_action(v1::ACTION_OTHER);
  j.set_action_name("login_code");
  j.set_code("482913");
  auto email = r.Render(j);
  ASSERT_TRUE(email.ok()) << email.status();
  EXPECT_EQ(email->content.subject, "Your Acme sign-in code");
  EXPECT_THAT(email->content.text, HasSubstr("\n\n    482913\n\n"));
  j.set_locale("de");
  auto de = r.Render(j);
  ASSERT_TRUE(de.ok()) << de.status();
  EXPECT_EQ(de->content.subject, "Ihr Acme-Anmeldecode");
  EXPECT_THAT(de->content.text, HasSubstr("\n\n    482913\n\n"));
}

TEST_F(RendererTest, RecoveryAndSignInSubjectsNeverCarryTheCode) {
  Renderer r = Make();
  for (const std::string action : {"password_recovery", "login_code"}) {
    for (const std::string locale : {"", "en-US", "de", "de-AT"}) {
      SCOPED_TRACE(action + " " + locale);
      v1::Job j = Job(locale);
      j.set_action(v1::ACTION_OTHER);
      j.set_action_name(action);
      const std::string code = action == "login_code" ? "904711" : "54321";
      j.set_code(code);
      auto email = r.Render(j);
      ASSERT_TRUE(email.ok()) << email.status();
      EXPECT_FALSE(email->content.subject.empty());
      EXPECT_THAT(email->content.subject, Not(HasSubstr(code)));
      const std::string headers = email->mime.substr(0, email->mime.find("\r\n\r\n"));
      EXPECT_THAT(headers, Not(HasSubstr(code)));
      // The body still shows it, in both parts.
      EXPECT_THAT(DecodedPart(email->mime, "text/plain"), HasSubstr(code));
      EXPECT_THAT(DecodedPart(email->mime, "text/html"),
                  HasSubstr("<strong>" + code + "</strong>"));
    }
  }
}

TEST_F(RendererTest, AReloadWithASubjectThatUsesTheCodeKeepsTheTemplatesInUse) {
  const std::string dir = FreshDir("reload_code_subject");
  WriteFile(dir + "/login_code.subject", "Sign in to {{product_name}}");
  Renderer r = Make(dir);
  v1::Job j = Job("");
  j.set_action(v1::ACTION_OTHER);
  j.set_action_name("login_code");
  j.set_code("271828");
  EXPECT_EQ(r.Render(j)->content.subject, "Sign in to Acme");
  WriteFile(dir + "/login_code.subject", "Sign in to {{product_name}}: {{& code }}");
  absl::Status st = r.Reload();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr(dir + "/login_code.subject: a subject may not use the code"));
  auto kept = r.Render(j);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->content.subject, "Sign in to Acme");
  EXPECT_THAT(kept->content.text, HasSubstr("271828"));

  // An action of the application's own that appears with such a subject is not used either: its
  // job fails naming the file.
  WriteFile(dir + "/login_code.subject", "Sign in to {{product_name}}");
  WriteFile(dir + "/welcome_gift.subject", "{{=<% %>=}}Your gift: <%code%>");
  WriteFile(dir + "/welcome_gift.txt", "Redeem {{code}}");
  WriteFile(dir + "/welcome_gift.html", "<p>Redeem {{code}}</p>");
  j.set_action_name("welcome_gift");
  auto gift = r.Render(j);
  EXPECT_EQ(gift.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(gift.status().message()),
              HasSubstr(dir + "/welcome_gift.subject: a subject may not use the code"));
}

TEST_F(RendererTest, AnOldCollectorsJobsRenderByTheirEnum) {
  Renderer r = Make();
  v1::Job j = Job("");  // ACTION_PASSWORD_RECOVERY, no action_name
  ASSERT_TRUE(j.action_name().empty());
  auto rec = r.Render(j);
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ(rec->content.action, "password_recovery");
  EXPECT_EQ(rec->content.subject, "Reset your Acme password");
  EXPECT_THAT(rec->content.text, HasSubstr("Your code is 54321."));
  j.set_action(v1::ACTION_ACTIVATION);
  auto act = r.Render(j);
  ASSERT_TRUE(act.ok()) << act.status();
  EXPECT_EQ(act->content.action, "activation");
  EXPECT_THAT(act->content.text, HasSubstr("https://acme.example/activate?token=tok"));
}

TEST_F(RendererTest, JobsWithoutAUsableActionFailWithTheReason) {
  Renderer r = Make();
  v1::Job j = Job("");
  j.set_action(v1::ACTION_OTHER);  // and no name
  auto unnamed = r.Render(j);
  EXPECT_EQ(unnamed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unnamed.status().message(),
            "the job names no action (ACTION_OTHER without action_name)");
  for (const std::string& bad :
       std::vector<std::string>{"../activation", "Login_code", "9lives", std::string(64, 'a')}) {
    j.set_action_name(bad);
    auto misnamed = r.Render(j);
    EXPECT_EQ(misnamed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(misnamed.status().message()), HasSubstr("not an action name"));
  }
  j.set_action_name(std::string(63, 'a'));  // a valid name, without templates
  auto unknown = r.Render(j);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  j.set_action_name("welcome_gift");
  EXPECT_EQ(r.Render(j).status().message(),
            "no templates for action \"welcome_gift\" (add welcome_gift.subject, "
            "welcome_gift.txt and welcome_gift.html to MAILROOM_TEMPLATE_DIR)");
}

TEST_F(RendererTest, AnActionsTemplatesAddedToTheDirectoryAreUsedWithoutARestart) {
  const std::string dir = FreshDir("custom_action");
  Renderer r = Make(dir);
  v1::Job j = Job("de");
  j.set_action(v1::ACTION_OTHER);
  j.set_action_name("welcome_gift");
  j.set_code("777777");
  EXPECT_EQ(r.Render(j).status().code(), absl::StatusCode::kNotFound);
  // The files appear after the renderer was made: the next job of the action reads the
  // directory again.
  WriteFile(dir + "/welcome_gift.subject", "A gift from {{product_name}}");
  WriteFile(dir + "/welcome_gift.txt", "{{login}}, redeem {{code}} at {{link}}");
  WriteFile(dir + "/welcome_gift.html", "<p>{{login}}, redeem <b>{{code}}</b></p>");
  auto gift = r.Render(j);
  ASSERT_TRUE(gift.ok()) << gift.status();
  EXPECT_EQ(gift->content.subject, "A gift from Acme");
  EXPECT_EQ(gift->content.text,
            "anna, redeem 777777 at https://acme.example/action/welcome_gift?token=tok");
  EXPECT_EQ(gift->content.action, "welcome_gift");
  // The built-in actions are still there, and a copy of the renderer sees the same templates.
  Renderer copy = r;
  EXPECT_TRUE(copy.templates()->Has("welcome_gift"));
  EXPECT_TRUE(copy.templates()->Has("login_code"));

  // A broken file for another action: that action's job fails naming the file, the rest stay.
  WriteFile(dir + "/team_invite.subject", "Join {{product_name}}");
  WriteFile(dir + "/team_invite.txt", "{{#open}} never closed");
  WriteFile(dir + "/team_invite.html", "<p>{{link}}</p>");
  j.set_action_name("team_invite");
  auto broken = r.Render(j);
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr(dir + "/team_invite.txt"));
  j.set_action_name("welcome_gift");
  EXPECT_TRUE(r.Render(j).ok());
}

TEST_F(RendererTest, ReloadReplacesChangedTemplatesAndKeepsThemWhenTheNewOnesAreBroken) {
  const std::string dir = FreshDir("reload");
  WriteFile(dir + "/activation.subject", "Welcome v1");
  Renderer r = Make(dir);
  v1::Job j = Job("");
  j.set_action(v1::ACTION_ACTIVATION);
  EXPECT_EQ(r.Render(j)->content.subject, "Welcome v1");
  // Edited in place: the directory does not change, the file does; a reload (SIGHUP) reads it.
  WriteFile(dir + "/activation.subject", "Welcome v2");
  EXPECT_EQ(r.Render(j)->content.subject, "Welcome v1");
  ASSERT_TRUE(r.Reload().ok());
  EXPECT_EQ(r.Render(j)->content.subject, "Welcome v2");
  WriteFile(dir + "/activation.subject", "{{#open}} Welcome v3");
  absl::Status st = r.Reload();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr(dir + "/activation.subject"));
  EXPECT_EQ(r.Render(j)->content.subject, "Welcome v2");
}

TEST_F(RendererTest, PreviewsOfNoticesHaveNoCodeAndCustomActionsArePreviewed) {
  const std::string dir = FreshDir("preview_custom");
  WriteFile(dir + "/team_invite.subject", "Join the team at {{product_name}}");
  WriteFile(dir + "/team_invite.txt", "{{link}}");
  WriteFile(dir + "/team_invite.html", "<p>{{link}}</p>");
  Renderer r = Make(dir);
  auto notice = r.Preview("account_suspended", "de");
  ASSERT_TRUE(notice.ok()) << notice.status();
  EXPECT_EQ(notice->subject, "Ihr Acme-Konto wurde gesperrt");
  EXPECT_THAT(notice->text, Not(HasSubstr("SAMPLE-TOKEN")));
  auto team = r.Preview("team_invite", "fr");
  ASSERT_TRUE(team.ok()) << team.status();
  EXPECT_EQ(team->text, "https://acme.example/action/team_invite?token=SAMPLE-TOKEN");
  EXPECT_EQ(r.Preview("nothing_here", "").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace mailroom
