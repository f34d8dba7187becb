#include "sender/renderer.h"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include <kainjow/mustache.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "sender/message.h"
#include "sender/template_pool.h"

namespace mailroom {
namespace {

constexpr const char* kActions[2] = {"activation", "password_recovery"};
constexpr const char* kParts[3] = {"subject", "txt", "html"};

int ActionIndex(v1::Action action) { return action == v1::ACTION_ACTIVATION ? 0 : 1; }

// Date and time formats (absl::FormatTime, UTC) by language, and by language-REGION where
// the region writes them differently. Numeric forms only: no month names to translate.
struct DateFormat {
  const char* tag;
  const char* format;
};
constexpr DateFormat kDateFormats[] = {
    {"en-US", "%m/%d/%Y, %I:%M %p UTC"},
    {"en-CA", "%Y-%m-%d, %H:%M UTC"},
    {"en", "%d/%m/%Y, %H:%M UTC"},  // en-GB, en-IE, en-AU, en-NZ, en-IN, ...
    {"de", "%d.%m.%Y, %H:%M UTC"},
    {"fr-CA", "%Y-%m-%d %H:%M UTC"},
    {"fr", "%d/%m/%Y %H:%M UTC"},
    {"es", "%d/%m/%Y, %H:%M UTC"},
    {"it", "%d/%m/%Y, %H:%M UTC"},
    {"pt", "%d/%m/%Y, %H:%M UTC"},
    {"nl", "%d-%m-%Y %H:%M UTC"},
    {"sv", "%Y-%m-%d %H:%M UTC"},
    {"da", "%d.%m.%Y %H.%M UTC"},
    {"nb", "%d.%m.%Y, %H:%M UTC"},
    {"no", "%d.%m.%Y, %H:%M UTC"},
    {"fi", "%d.%m.%Y klo %H.%M UTC"},
    {"pl", "%d.%m.%Y, %H:%M UTC"},
    {"cs", "%d. %m. %Y %H:%M UTC"},
    {"ru", "%d.%m.%Y, %H:%M UTC"},
    {"uk", "%d.%m.%Y, %H:%M UTC"},
    {"tr", "%d.%m.%Y %H:%M UTC"},
    {"ja", "%Y/%m/%d %H:%M UTC"},
    {"zh", "%Y/%m/%d %H:%M UTC"},
    {"ko", "%Y. %m. %d. %H:%M UTC"},
};

std::string Iso(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

// The file `path`, or an error naming it.
absl::StatusOr<std::string> ReadTemplateFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("MAILROOM_TEMPLATE_DIR: ", path, " is not a readable file"));
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::InvalidArgumentError(
        absl::StrCat("MAILROOM_TEMPLATE_DIR: cannot read ", path, ": ", std::strerror(errno)));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) {
    return absl::InvalidArgumentError(absl::StrCat("MAILROOM_TEMPLATE_DIR: cannot read ", path));
  }
  return ss.str();
}

// A template file name: "<action>[.<locale>].<part>".
struct TemplateName {
  int action = -1;
  int part = -1;
  std::string locale;
};

// nullopt for a file that is not a template (left alone); an error for a template file whose
// locale is malformed or that has the old `.mustache` suffix.
absl::StatusOr<std::optional<TemplateName>> ParseName(const std::string& file) {
  std::vector<std::string> pieces = absl::StrSplit(file, '.');
  if (pieces.size() < 2) return std::nullopt;
  TemplateName n;
  for (int a = 0; a < 2; ++a) {
    if (pieces[0] == kActions[a]) n.action = a;
  }
  if (n.action < 0) return std::nullopt;
  if (pieces.back() == "mustache") {
    // Earlier builds read "<name>.mustache": such a file would be silently ignored now.
    std::string renamed = file.substr(0, file.size() - strlen(".mustache"));
    return absl::InvalidArgumentError(
        absl::StrCat("MAILROOM_TEMPLATE_DIR: rename ", file, " to ", renamed));
  }
  for (int p = 0; p < 3; ++p) {
    if (pieces.back() == kParts[p]) n.part = p;
  }
  if (n.part < 0) return std::nullopt;  // a README, a backup file, ...
  if (pieces.size() == 3) {
    n.locale = NormalizeLocale(pieces[1]);
    if (n.locale.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MAILROOM_TEMPLATE_DIR: ", file, ": \"", pieces[1],
          "\" is not a locale (write e.g. password_recovery.de-AT.html)"));
    }
  } else if (pieces.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MAILROOM_TEMPLATE_DIR: ", file, ": expected <action>.<part> or <action>.<locale>.<part>"));
  }
  return n;
}

TemplateVars SampleVars() {
  TemplateVars v;
  v.login = "jane.doe";
  v.email = "jane.doe@example.com";
  v.token = "SAMPLE-TOKEN";
  v.code = "12345";
  v.product_name = "mailroom";
  v.link_base_url = "https://example.com";
  v.now = absl::FromUnixSeconds(1795425300);  // 2026-11-23T09:15:00Z
  v.expires_at = v.now + absl::Hours(1);
  return v;
}

}  // namespace

std::string NormalizeLocale(absl::string_view tag) {
  std::string t(absl::StripAsciiWhitespace(tag));
  std::replace(t.begin(), t.end(), '_', '-');
  if (t.empty() || t.size() > 35) return "";
  std::vector<std::string> subtags = absl::StrSplit(t, '-');
  for (size_t i = 0; i < subtags.size(); ++i) {
    std::string& s = subtags[i];
    const size_t min = 2, max = i == 0 ? 3 : 8;
    if (s.size() < min || s.size() > max) return "";
    for (char c : s) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c))) return "";
      if (i == 0 && !absl::ascii_isalpha(static_cast<unsigned char>(c))) return "";
    }
    absl::AsciiStrToLower(&s);
    if (i > 0 && s.size() == 2) absl::AsciiStrToUpper(&s);                   // region: AT
    if (i > 0 && s.size() == 4 && absl::ascii_isalpha(s[0])) s[0] = absl::ascii_toupper(s[0]);  // script: Latn
  }
  return absl::StrJoin(subtags, "-");
}

std::vector<std::string> LocaleChain(absl::string_view locale) {
  std::string tag = NormalizeLocale(locale);
  std::vector<std::string> chain;
  while (!tag.empty()) {
    chain.push_back(tag);
    size_t dash = tag.rfind('-');
    tag = dash == std::string::npos ? "" : tag.substr(0, dash);
  }
  chain.push_back("");
  return chain;
}

std::string FormatExpiry(absl::Time t, absl::string_view locale) {
  for (const std::string& tag : LocaleChain(locale)) {
    if (tag.empty()) break;
    // Language-REGION entries match "en-US" and "en-US-x"; language entries match any region.
    for (const DateFormat& f : kDateFormats) {
      if (tag == f.tag) return absl::FormatTime(f.format, t, absl::UTCTimeZone());
    }
  }
  return Iso(t);
}

absl::StatusOr<Templates> Templates::Load(const std::string& dir) {
  std::vector<absl::Status> problems;
  Templates t = LoadAll(dir, &problems);
  if (!problems.empty()) return problems.front();
  return t;
}

Templates Templates::LoadAll(const std::string& dir, std::vector<absl::Status>* problems) {
  Templates t;
  // Built in first, then the directory's files over them.
  for (const auto& [file, content] : BuiltinTemplateFiles()) {
    auto name = ParseName(file);
    if (!name.ok() || !name->has_value()) {
      problems->push_back(
          absl::InternalError(absl::StrCat("built-in template ", file, " is misnamed")));
      continue;
    }
    Set& set = t.sets_[(*name)->action][(*name)->locale];
    set.part[(*name)->part] = content;
    set.origin[(*name)->part] = absl::StrCat("built-in ", file);
  }
  if (!dir.empty()) {
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) {
      problems->push_back(absl::InvalidArgumentError(absl::StrCat(
          "MAILROOM_TEMPLATE_DIR: cannot read directory \"", dir, "\": ", std::strerror(errno))));
    } else {
      std::vector<std::string> files;
      while (dirent* e = readdir(d)) files.emplace_back(e->d_name);
      closedir(d);
      std::sort(files.begin(), files.end());  // the first error is the same on every start
      for (const std::string& file : files) {
        if (file.empty() || file[0] == '.') continue;
        auto name = ParseName(file);
        if (!name.ok()) {
          problems->push_back(name.status());
          continue;
        }
        if (!name->has_value()) continue;
        const std::string path = absl::StrCat(dir, "/", file);
        auto content = ReadTemplateFile(path);
        if (!content.ok()) {
          problems->push_back(content.status());
          continue;
        }
        Set& set = t.sets_[(*name)->action][(*name)->locale];
        set.part[(*name)->part] = *std::move(content);
        set.origin[(*name)->part] = path;
      }
    }
  }
  // Every set complete and every template valid, checked by rendering it with sample data. A
  // set with a problem is dropped, so what remains renders.
  const std::string where = dir.empty() ? "" : absl::StrCat(dir, "/");
  for (int a = 0; a < 2; ++a) {
    for (auto it = t.sets_[a].begin(); it != t.sets_[a].end();) {
      const std::string& locale = it->first;
      Set& set = it->second;
      bool complete = true;
      for (int p = 0; p < 3; ++p) {
        const std::string file = locale.empty()
                                     ? absl::StrCat(kActions[a], ".", kParts[p])
                                     : absl::StrCat(kActions[a], ".", locale, ".", kParts[p]);
        if (set.origin[p].empty()) {
          problems->push_back(absl::InvalidArgumentError(absl::StrCat(
              "MAILROOM_TEMPLATE_DIR: ", where, file, " is missing (a locale's templates must "
              "include subject, txt and html)")));
          complete = false;
          continue;
        }
        // The HTML part escapes variables; the subject and the text part do not.
        auto parsed = std::make_shared<const TemplatePool>(set.part[p], /*escape=*/p == 2);
        if (!parsed->valid()) {
          problems->push_back(absl::InvalidArgumentError(
              absl::StrCat("MAILROOM_TEMPLATE_DIR: ", set.origin[p], ": ", parsed->error())));
          complete = false;
          continue;
        }
        set.parsed[p] = std::move(parsed);
      }
      it = complete ? std::next(it) : t.sets_[a].erase(it);
    }
  }
  for (int a = 0; a < 2; ++a) {
    std::vector<std::string> broken;
    for (const auto& [locale, set] : t.sets_[a]) {
      TemplateVars v = SampleVars();
      v.locale = locale;
      auto r = t.Render(a == 0 ? v1::ACTION_ACTIVATION : v1::ACTION_PASSWORD_RECOVERY, v);
      if (!r.ok()) {
        problems->push_back(absl::InvalidArgumentError(absl::StrCat(
            "MAILROOM_TEMPLATE_DIR: ", kActions[a], locale.empty() ? "" : ".", locale, ": ",
            r.status().message())));
        broken.push_back(locale);
      }
    }
    for (const std::string& locale : broken) t.sets_[a].erase(locale);
  }
  return t;
}

std::string Templates::Resolve(v1::Action action, absl::string_view locale) const {
  const auto& sets = sets_[ActionIndex(action)];
  for (const std::string& tag : LocaleChain(locale)) {
    if (sets.count(tag) > 0) return tag;
  }
  return "";
}

std::vector<std::string> Templates::Locales(v1::Action action) const {
  std::vector<std::string> out;
  for (const auto& [locale, set] : sets_[ActionIndex(action)]) out.push_back(locale);
  return out;
}

absl::StatusOr<RenderedEmail> Templates::Render(v1::Action action, const TemplateVars& v) const {
  if (action != v1::ACTION_ACTIVATION && action != v1::ACTION_PASSWORD_RECOVERY) {
    return absl::InvalidArgumentError("unknown action");
  }
  const int a = ActionIndex(action);
  auto it = sets_[a].find(Resolve(action, v.locale));
  if (it == sets_[a].end()) return absl::InternalError("no default templates");
  const Set& set = it->second;
  std::string base = v.link_base_url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  kainjow::mustache::data data;
  data.set("login", v.login);
  data.set("email", v.email);
  data.set("token", v.token);
  data.set("code", v.code);
  data.set("product_name", v.product_name);
  data.set("link", absl::StrCat(base, a == 0 ? "/activate" : "/recover", "?token=", v.token));
  data.set("expires_at", FormatExpiry(v.expires_at, v.locale));
  data.set("expires_at_iso", Iso(v.expires_at));
  int64_t minutes = std::max<int64_t>(0, absl::ToInt64Minutes(v.expires_at - v.now));
  data.set("expires_in_minutes", absl::StrCat(minutes));

  RenderedEmail out;
  bool ok = true;
  out.subject = set.parsed[0]->Render(data, &ok);
  for (char& c : out.subject) {
    if (c == '\r' || c == '\n') c = ' ';
  }
  out.text = set.parsed[1]->Render(data, &ok);
  out.html = set.parsed[2]->Render(data, &ok);
  if (!ok) return absl::InternalError("template rendering failed");
  return out;
}

absl::StatusOr<Renderer> Renderer::Create(Templates templates, RendererOptions options,
                                          Clock* clock) {
  auto from = ParseMailbox(options.from);
  if (!from.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("MAILROOM_FROM: ", from.status().message()));
  }
  std::string address = from->second;
  return Renderer(std::move(templates), std::move(options), clock, std::move(address));
}

Renderer::Renderer(Templates templates, RendererOptions options, Clock* clock,
                   std::string from_address)
    : templates_(std::move(templates)), options_(std::move(options)), clock_(clock),
      from_address_(std::move(from_address)),
      id_domain_(from_address_.substr(from_address_.find('@') + 1)) {}

TemplateVars Renderer::VarsFor(const v1::Job& job) const {
  TemplateVars vars;
  vars.login = job.login();
  vars.email = job.email();
  vars.token = job.token();
  vars.code = job.code();
  vars.product_name = options_.product_name;
  vars.link_base_url = options_.link_base_url;
  vars.expires_at = absl::FromUnixSeconds(job.expires_at());
  vars.now = clock_->Now();
  vars.locale = job.locale();
  return vars;
}

absl::StatusOr<OutgoingEmail> Renderer::Render(const v1::Job& job) const {
  absl::Status st = ValidateAddress(job.email());
  if (!st.ok()) return st;
  auto rendered = templates_.Render(job.action(), VarsFor(job));
  if (!rendered.ok()) return rendered.status();
  Message m{options_.from,   job.email(), job.login(), rendered->subject, rendered->text,
            rendered->html,  NewMessageId(id_domain_), clock_->Now()};
  auto mime = BuildMime(m);
  if (!mime.ok()) return mime.status();
  OutgoingEmail email{from_address_, job.email(), *std::move(mime), m.message_id};
  email.content = {job.job_id(),
                   job.action() == v1::ACTION_PASSWORD_RECOVERY ? "password_recovery" : "activation",
                   static_cast<int>(job.failures()) + 1,
                   options_.from,
                   std::move(rendered->subject),
                   std::move(rendered->text),
                   std::move(rendered->html),
                   NormalizeLocale(job.locale()),
                   absl::FromUnixSeconds(job.expires_at())};
  return email;
}

absl::StatusOr<RenderedEmail> Renderer::Preview(v1::Action action,
                                                const std::string& locale) const {
  v1::Job job;
  job.set_action(action);
  job.set_login("jane.doe");
  job.set_email("jane.doe@example.com");
  job.set_token("SAMPLE-TOKEN");
  job.set_code("12345");
  job.set_expires_at(absl::ToUnixSeconds(clock_->Now() + absl::Hours(1)));
  job.set_locale(locale);
  return templates_.Render(action, VarsFor(job));
}

}  // namespace mailroom
