#include "sender/render/renderer.h"

#include <dirent.h>
#include <sys/stat.h>

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
#include "sender/render/message.h"
#include "sender/render/template_pool.h"

namespace mailroom {
namespace {

constexpr const char* kParts[3] = {"subject", "txt", "html"};

constexpr char kCodeInSubject[] =
    "a subject may not use the code ({{code}}): subjects show on lock screens, in notification "
    "previews and in providers' logs; put the code in the txt and html parts only";

// Date and time formats (absl::FormatTime, UTC) by language, and by language-REGION where
// the region writes them differently. Numeric forms only: no month names to translate.
struct DateFormat {
  const char* tag;
  const char* format;
};
constexpr DateFormat kDateFormats[] = {
    {"en-US", "%m/%d/%Y, %I:%M %p UTC"}, {"en-CA", "%Y-%m-%d, %H:%M UTC"},
    {"en", "%d/%m/%Y, %H:%M UTC"},  // en-GB, en-IE, en-AU, en-NZ, en-IN, ...
    {"de", "%d.%m.%Y, %H:%M UTC"},       {"fr-CA", "%Y-%m-%d %H:%M UTC"},
    {"fr", "%d/%m/%Y %H:%M UTC"},        {"es", "%d/%m/%Y, %H:%M UTC"},
    {"it", "%d/%m/%Y, %H:%M UTC"},       {"pt", "%d/%m/%Y, %H:%M UTC"},
    {"nl", "%d-%m-%Y %H:%M UTC"},        {"sv", "%Y-%m-%d %H:%M UTC"},
    {"da", "%d.%m.%Y %H.%M UTC"},        {"nb", "%d.%m.%Y, %H:%M UTC"},
    {"no", "%d.%m.%Y, %H:%M UTC"},       {"fi", "%d.%m.%Y klo %H.%M UTC"},
    {"pl", "%d.%m.%Y, %H:%M UTC"},       {"cs", "%d. %m. %Y %H:%M UTC"},
    {"ru", "%d.%m.%Y, %H:%M UTC"},       {"uk", "%d.%m.%Y, %H:%M UTC"},
    {"tr", "%d.%m.%Y %H:%M UTC"},        {"ja", "%Y/%m/%d %H:%M UTC"},
    {"zh", "%Y/%m/%d %H:%M UTC"},        {"ko", "%Y. %m. %d. %H:%M UTC"},
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
  std::string action;
  int part = -1;
  std::string locale;
};

// nullopt for a file that is not a template (left alone); an error for a template file whose
// locale is malformed or that has the old `.mustache` suffix.
absl::StatusOr<std::optional<TemplateName>> ParseName(const std::string& file) {
  std::vector<std::string> pieces = absl::StrSplit(file, '.');
  if (pieces.size() < 2) return std::nullopt;
  TemplateName n;
  if (!ValidActionName(pieces[0])) return std::nullopt;  // README.md, .backup, ...
  n.action = pieces[0];
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
      return absl::InvalidArgumentError(
          absl::StrCat("MAILROOM_TEMPLATE_DIR: ", file, ": \"", pieces[1],
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

std::string ActionLink(absl::string_view base_url, absl::string_view action,
                       absl::string_view token) {
  if (token.empty()) return "";
  absl::string_view base = base_url;
  while (!base.empty() && base.back() == '/') base.remove_suffix(1);
  const std::string path = action == "activation"          ? "/activate"
                           : action == "password_recovery" ? "/recover"
                                                           : absl::StrCat("/action/", action);
  return absl::StrCat(base, path, "?token=", token);
}

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
    if (i > 0 && s.size() == 2) absl::AsciiStrToUpper(&s);  // region: AT
    if (i > 0 && s.size() == 4 && absl::ascii_isalpha(s[0]))
      s[0] = absl::ascii_toupper(s[0]);  // script: Latn
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
  t.CheckSets(dir, problems);
  return t;
}

// Every set complete and every template valid, checked by rendering it with sample data. A set
// with a problem is dropped, so what remains renders; so is an action left without a
// default-language set.
void Templates::CheckSets(const std::string& dir, std::vector<absl::Status>* problems) {
  const std::string where = dir.empty() ? "" : absl::StrCat(dir, "/");
  // Actions given a default-language set (complete or not): one dropped for a problem of its
  // own is reported once, as that problem.
  std::set<std::string> with_default;
  for (const auto& [action, sets] : sets_) {
    if (sets.count("") > 0) with_default.insert(action);
  }
  for (auto& [action, sets] : sets_) {
    for (auto it = sets.begin(); it != sets.end();) {
      const std::string& locale = it->first;
      Set& set = it->second;
      bool complete = true;
      for (int p = 0; p < 3; ++p) {
        const std::string file = locale.empty() ? absl::StrCat(action, ".", kParts[p])
                                                : absl::StrCat(action, ".", locale, ".", kParts[p]);
        if (set.origin[p].empty()) {
          problems->push_back(
              absl::InvalidArgumentError(absl::StrCat("MAILROOM_TEMPLATE_DIR: ", where, file,
                                                      " is missing (a locale's templates must "
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
        // A subject is shown where the body is not: on lock screens, in notification
        // previews, in providers' activity logs. The code is a credential: it stays in the
        // body. Checked on the parse, so no spelling of the tag ({{{code}}}, {{& code}},
        // {{#code}}{{.}}{{/code}}, {{>code}}, other delimiters) slips through.
        if (p == 0 && parsed->Uses("code")) {
          problems->push_back(absl::InvalidArgumentError(
              absl::StrCat("MAILROOM_TEMPLATE_DIR: ", set.origin[p], ": ", kCodeInSubject)));
          complete = false;
          continue;
        }
        set.parsed[p] = std::move(parsed);
      }
      it = complete ? std::next(it) : sets.erase(it);
    }
  }
  for (auto& [action, sets] : sets_) {
    if (sets.empty()) continue;  // reported above
    if (sets.count("") == 0) {
      if (with_default.count(action) == 0) {
        problems->push_back(absl::InvalidArgumentError(absl::StrCat(
            "MAILROOM_TEMPLATE_DIR: ", where, action, ".subject, ", action, ".txt and ", action,
            ".html are missing (every action needs templates in the default language)")));
        sets.clear();
      }
      // Otherwise the default set had a problem, reported above: Load fails with it, and
      // LoadAll keeps the other locales for `sender doctor` to render.
      if (sets.empty()) continue;
    }
    std::vector<std::string> broken;
    for (const auto& [locale, set] : sets) {
      TemplateVars v = SampleVars();
      v.locale = locale;
      auto r = Render(action, v);
      if (!r.ok()) {
        problems->push_back(absl::InvalidArgumentError(
            absl::StrCat("MAILROOM_TEMPLATE_DIR: ", action, locale.empty() ? "" : ".", locale, ": ",
                         r.status().message())));
        broken.push_back(locale);
      }
    }
    for (const std::string& locale : broken) sets.erase(locale);
  }
  for (auto it = sets_.begin(); it != sets_.end();) {
    it = it->second.empty() ? sets_.erase(it) : std::next(it);
  }
}

const Templates::Sets* Templates::Find(absl::string_view action) const {
  auto it = sets_.find(action);
  return it == sets_.end() ? nullptr : &it->second;
}

bool Templates::Has(absl::string_view action) const { return Find(action) != nullptr; }

std::string Templates::Resolve(absl::string_view action, absl::string_view locale) const {
  const Sets* sets = Find(action);
  if (sets == nullptr) return "";
  for (const std::string& tag : LocaleChain(locale)) {
    if (sets->count(tag) > 0) return tag;
  }
  return "";
}

std::vector<std::string> Templates::Locales(absl::string_view action) const {
  std::vector<std::string> out;
  if (const Sets* sets = Find(action)) {
    for (const auto& [locale, set] : *sets) out.push_back(locale);
  }
  return out;
}

std::vector<std::string> Templates::Actions() const {
  std::vector<std::string> out;
  for (const auto& [action, sets] : sets_) out.push_back(action);
  return out;
}

absl::StatusOr<RenderedEmail> Templates::Render(absl::string_view action,
                                                const TemplateVars& v) const {
  const Sets* sets = Find(action);
  if (sets == nullptr) {
    return absl::NotFoundError(absl::StrCat("no templates for action \"", action, "\""));
  }
  auto it = sets->find(Resolve(action, v.locale));
  if (it == sets->end()) return absl::InternalError("no default templates");
  const Set& set = it->second;
  kainjow::mustache::data data;
  data.set("login", v.login);
  data.set("email", v.email);
  data.set("action", std::string(action));
  data.set("token", v.token);
  data.set("code", v.code);
  data.set("product_name", v.product_name);
  data.set("link", ActionLink(v.link_base_url, action, v.token));
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
    : live_(std::make_shared<Live>()), options_(std::move(options)), clock_(clock),
      from_address_(std::move(from_address)),
      id_domain_(from_address_.substr(from_address_.find('@') + 1)) {
  absl::MutexLock lock(&live_->mu);
  live_->templates = std::make_shared<const Templates>(std::move(templates));
}

std::shared_ptr<const Templates> Renderer::templates() const {
  absl::MutexLock lock(&live_->mu);
  return live_->templates;
}

namespace {

// The directory's modification time in nanoseconds (changed by a file added, removed or
// renamed in it), -1 when it cannot be read.
int64_t DirMtimeNs(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace

absl::Status Renderer::ReloadLocked() const {
  // Read before the files: a file added while they are read changes it again.
  live_->dir_mtime_ns = DirMtimeNs(options_.template_dir);
  auto loaded = Templates::Load(options_.template_dir);
  if (!loaded.ok()) {
    live_->reload_error = std::string(loaded.status().message());
    return loaded.status();
  }
  live_->reload_error.clear();
  auto fresh = std::make_shared<const Templates>(*std::move(loaded));
  absl::MutexLock lock(&live_->mu);
  live_->templates = std::move(fresh);
  return absl::OkStatus();
}

absl::Status Renderer::Reload() const {
  absl::MutexLock lock(&live_->reload_mu);
  return ReloadLocked();
}

absl::StatusOr<std::shared_ptr<const Templates>> Renderer::For(const std::string& action) const {
  std::shared_ptr<const Templates> t = templates();
  if (t->Has(action)) return t;
  std::string why;
  if (!options_.template_dir.empty()) {
    absl::MutexLock lock(&live_->reload_mu);
    // Another job may have reloaded meanwhile; otherwise read the directory again only when
    // it changed, so a stream of jobs for an action without templates costs a stat each.
    t = templates();
    if (t->Has(action)) return t;
    if (DirMtimeNs(options_.template_dir) != live_->dir_mtime_ns) {
      (void)ReloadLocked();
      t = templates();
      if (t->Has(action)) return t;
    }
    why = live_->reload_error;
  }
  return absl::NotFoundError(absl::StrCat("no templates for action \"", action, "\" (add ", action,
                                          ".subject, ", action, ".txt and ", action,
                                          ".html to MAILROOM_TEMPLATE_DIR)",
                                          why.empty() ? "" : ": ", why));
}

TemplateVars Renderer::VarsFor(const v1::Job& job) const {
  TemplateVars vars;
  vars.login = job.login();
  vars.email = job.email();
  vars.token = job.token();
  vars.code = job.code();
  vars.product_name = options_.product_name;
  vars.link_base_url = options_.link_base_url;
  vars.expires_at = absl::FromUnixSeconds(job.expires_at());
  vars.now = ComposedAt(job);
  vars.locale = job.locale();
  return vars;
}

std::string Renderer::MessageIdFor(const v1::Job& job, const std::string& action) const {
  // A job with a secret (its signed token) and a request time keeps one Message-ID; a notice
  // (no secret) or a sample gets a new one each time.
  if (job.created_at() <= 0 || job.token().empty()) return NewMessageId(id_domain_);
  return DerivedMessageId(job.token(),
                          absl::StrCat("mailroom/", job.job_id(), "/", job.created_at(), "/",
                                       action, "/", job.email()),
                          id_domain_);
}

absl::Time Renderer::ComposedAt(const v1::Job& job) const {
  return job.created_at() > 0 ? absl::FromUnixSeconds(job.created_at()) : clock_->Now();
}

absl::StatusOr<OutgoingEmail> Renderer::Render(const v1::Job& job) const {
  absl::Status st = ValidateAddress(job.email());
  if (!st.ok()) return st;
  const std::string action = JobActionName(job);
  if (action.empty()) {
    return absl::InvalidArgumentError("the job names no action (ACTION_OTHER without action_name)");
  }
  if (!ValidActionName(action)) {
    return absl::InvalidArgumentError(
        "the job's action_name is not an action name ([a-z][a-z0-9_]{0,62})");
  }
  auto templates = For(action);
  if (!templates.ok()) return templates.status();
  auto rendered = (*templates)->Render(action, VarsFor(job));
  if (!rendered.ok()) return rendered.status();
  Message m{options_.from,
            job.email(),
            job.login(),
            rendered->subject,
            rendered->text,
            rendered->html,
            MessageIdFor(job, action),
            clock_->Now()};
  auto mime = BuildMime(m);
  if (!mime.ok()) return mime.status();
  OutgoingEmail email{from_address_, job.email(), *std::move(mime), m.message_id};
  email.content = {job.job_id(),
                   action,
                   static_cast<int>(job.failures()) + 1,
                   options_.from,
                   std::move(rendered->subject),
                   std::move(rendered->text),
                   std::move(rendered->html),
                   NormalizeLocale(job.locale()),
                   absl::FromUnixSeconds(job.expires_at())};
  return email;
}

v1::Job Renderer::SampleJob(const std::string& action, const std::string& locale,
                            const ActionRules& rules) const {
  v1::Job job;
  job.set_job_id(1);
  job.set_action(v1::ACTION_OTHER);
  job.set_action_name(action);
  job.set_login("jane.doe");
  job.set_email("jane.doe@example.com");
  if (!IsBuiltinNotice(action)) {
    job.set_token("SAMPLE-TOKEN");
    job.set_code(SampleCode(rules.code_length));
  }
  job.set_expires_at(absl::ToUnixSeconds(clock_->Now() + rules.expiry));
  job.set_locale(locale);
  return job;
}

absl::StatusOr<RenderedEmail> Renderer::Preview(const std::string& action,
                                                const std::string& locale) const {
  return Preview(action, locale, DefaultActionRules(action));
}

absl::StatusOr<RenderedEmail> Renderer::Preview(const std::string& action,
                                                const std::string& locale,
                                                const ActionRules& rules) const {
  auto templates = For(action);
  if (!templates.ok()) return templates.status();
  return (*templates)->Render(action, VarsFor(SampleJob(action, locale, rules)));
}

}  // namespace mailroom
