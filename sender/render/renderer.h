#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/mailroom/v1/mailroom.pb.h"
#include "sender/delivery/actions.h"
#include "sender/transport/transport.h"

namespace mailroom {
class TemplatePool;
}  // namespace mailroom

namespace mailroom {

// Subject, text and HTML of one email.
struct RenderedEmail {
  std::string subject, text, html;
};

// What templates can use.
struct TemplateVars {
  std::string login, email, token, code, product_name, link_base_url;
  absl::Time expires_at;
  absl::Time now;        // for expires_in_minutes: the time the email is composed at
  std::string locale{};  // the job's locale (BCP 47 tag such as "de-AT"), "" for none
};

// "de_at", "DE-at" -> "de-AT": language lower case, region upper case, script title case,
// '_' read as '-'. "" for an empty or malformed tag (2-3 letter language, then subtags of 2-8
// letters or digits).
std::string NormalizeLocale(absl::string_view tag);

// The locales a template is looked up in, most specific first, ending with "" (the default):
// "de-AT" -> {"de-AT", "de", ""}. A malformed tag gives {""}.
std::vector<std::string> LocaleChain(absl::string_view locale);

// `t` in UTC, written the way the locale's language (and region) writes dates and times, with
// " UTC" at the end: de "23.11.2026, 10:15 UTC", en-US "11/23/2026, 10:15 AM UTC", fr
// "23/11/2026 10:15 UTC", ja "2026/11/23 10:15 UTC". Built-in table of common languages;
// without a locale, or for a language not in the table, RFC 3339 ("2026-11-23T10:15:00Z").
std::string FormatExpiry(absl::Time t, absl::string_view locale);

// The template files built into the binary (sender/render/templates/, embedded at build time): name
// (README's naming, e.g. "password_recovery.de.html") and content.
const std::vector<std::pair<std::string, std::string>>& BuiltinTemplateFiles();

// The link a job's email carries: BASE/activate?token=..., BASE/recover?token=..., and
// BASE/action/<action>?token=... for every other action. "" without a token (notices).
std::string ActionLink(absl::string_view base_url, absl::string_view action,
                       absl::string_view token);

// Per-action, per-locale Mustache templates (kainjow::mustache): subject, text and HTML of every
// action, built in or the application's own. Files are named `<action>.<part>` (the default
// language) or `<action>.<locale>.<part>`, with action a name matching [a-z][a-z0-9_]{0,62},
// part `subject`, `txt` or `html`, locale a BCP 47 tag (`de`, `de-AT`). The built-in set
// (sender/render/templates/: every built-in action in English and German) is loaded first; a
// directory may override any file or add actions and locales. A locale's set must be complete for
// an action (all three parts, from the directory or built in), so an email is never half in one
// language, and every action needs a default-language set.
//
// Variables: login, email, action, link (ActionLink; "" without a token), token, code ("" for
// an action without one), expires_at (formatted for the locale, UTC: FormatExpiry),
// expires_at_iso (RFC 3339 UTC), expires_in_minutes, product_name. A subject may not use
// code (a subject shows on lock screens, in notification previews and in providers' logs): the
// code is in the text and HTML only. HTML escapes every variable; text and subject do not, and
// the subject loses CR/LF. Immutable after Load (the reusable render instances aside, which
// TemplatePool guards): thread-safe.
class Templates {
 public:
  // Loads the built-in set, then `dir` when non-empty. Every template is parsed and rendered
  // once with sample data; a template that does not parse, a file that cannot be read, an
  // incomplete locale set, an action without a default-language set, a malformed locale in a
  // file name, a file with the old `.mustache` suffix and a subject that uses the code (any tag
  // naming `code`: TemplatePool::Uses) are InvalidArgument errors that name the file.
  static absl::StatusOr<Templates> Load(const std::string& dir);
  // Load that does not stop at the first problem (for `sender doctor`): every problem is
  // appended to `*problems`, in the order Load meets them (Load's error is the first), and the
  // templates returned hold only the locale sets that are complete and render.
  static Templates LoadAll(const std::string& dir, std::vector<absl::Status>* problems);

  // True when `action` has templates.
  bool Has(absl::string_view action) const;
  // Renders with the most specific locale of LocaleChain(vars.locale) that has templates.
  // NotFound for an action without templates.
  absl::StatusOr<RenderedEmail> Render(absl::string_view action, const TemplateVars& vars) const;
  // The locale Render would use for `locale` ("" = the default set).
  std::string Resolve(absl::string_view action, absl::string_view locale) const;
  // Locales with templates for `action` ("" included), sorted.
  std::vector<std::string> Locales(absl::string_view action) const;
  // Actions with templates, sorted.
  std::vector<std::string> Actions() const;

 private:
  struct Set {
    std::string part[3];    // subject, txt, html
    std::string origin[3];  // where each came from: a path, or "built-in <name>"
    // Each part parsed once by Load; Render reuses the pool's instances instead of parsing
    // (or copying the parse) per email. Shared by copies of the Templates.
    std::shared_ptr<const TemplatePool> parsed[3];
  };
  using Sets = std::map<std::string, Set>;  // by locale
  void CheckSets(const std::string& dir, std::vector<absl::Status>* problems);
  const Sets* Find(absl::string_view action) const;
  std::map<std::string, Sets, std::less<>> sets_;  // by action
};

// Everything besides the templates that goes into a message.
struct RendererOptions {
  std::string from;           // MAILROOM_FROM: "Name <addr>" or "addr"
  std::string product_name;   // {{product_name}}
  std::string link_base_url;  // links: ActionLink
  // MAILROOM_TEMPLATE_DIR, read again by Reload and when a job's action has no templates.
  std::string template_dir{};
};

// Turns a job into a message ready for a transport: validates the recipient, renders the
// templates of the job's action and locale, builds the MIME message with a fresh Message-ID.
// Time comes from `clock` (expires_in_minutes, the Date header).
//
// Templates are picked up without a restart: a job whose action has no templates makes the
// renderer read the template directory again when the directory changed since it was last
// read (a file added, removed or renamed in it), and Reload reads it again in any case (the
// sender calls it on SIGHUP). A reload that fails keeps the templates in use. Thread-safe;
// `clock` must outlive it.
class Renderer {
 public:
  // InvalidArgument ("MAILROOM_FROM: ...") when the sender address is not usable.
  static absl::StatusOr<Renderer> Create(Templates templates, RendererOptions options,
                                         Clock* clock);

  // InvalidArgument for an address or login that cannot be sent to and for a job whose action
  // is unnamed or misnamed; NotFound for an action without templates (after a reload, when
  // the directory changed), naming the files to add. The job fails unpaid in each case.
  // Every try of one job is the same message, whichever sender renders it and when: its text
  // is composed at the job's created_at (`expires_in_minutes` counted from it: the token's
  // lifetime), and a job with a token keeps one Message-ID, derived from the job under its
  // token (DerivedMessageId); only the Date header is the time of the try. A notice (no token)
  // gets a new random Message-ID each try; a job without a created_at (a sample) is composed
  // now.
  absl::StatusOr<OutgoingEmail> Render(const v1::Job& job) const;

  // The email a job for `action` and `locale` would get, with sample data (login "jane.doe",
  // a code of the rules' length unless the action is a built-in notice, expiry the rules' from
  // now): for `sender render` and `sender doctor`. The rules default to the action's
  // DefaultActionRules.
  absl::StatusOr<RenderedEmail> Preview(const std::string& action, const std::string& locale) const;
  absl::StatusOr<RenderedEmail> Preview(const std::string& action, const std::string& locale,
                                        const ActionRules& rules) const;

  // The job Preview renders (job id 1): for checks that render it as a real job.
  v1::Job SampleJob(const std::string& action, const std::string& locale,
                    const ActionRules& rules) const;

  // Reads the built-in set and the template directory again (Templates::Load). On an error the
  // templates in use stay, and the error (naming the file) is returned.
  absl::Status Reload() const;

  // The templates in use.
  std::shared_ptr<const Templates> templates() const;

 private:
  // What copies of a Renderer share: the templates in use and what the last reload saw.
  struct Live {
    absl::Mutex reload_mu;  // one reload at a time; held across the directory read
    mutable absl::Mutex mu;
    std::shared_ptr<const Templates> templates ABSL_GUARDED_BY(mu);
    // The directory's modification time when it was last read (-1: never read by a reload).
    int64_t dir_mtime_ns ABSL_GUARDED_BY(reload_mu) = -1;
    std::string reload_error ABSL_GUARDED_BY(reload_mu);  // of the last reload, "" if none
  };
  Renderer(Templates templates, RendererOptions options, Clock* clock, std::string from_address);
  TemplateVars VarsFor(const v1::Job& job) const;
  absl::Time ComposedAt(const v1::Job& job) const;
  std::string MessageIdFor(const v1::Job& job, const std::string& action) const;
  // The templates for `action`, read again from a changed directory when it has none.
  absl::StatusOr<std::shared_ptr<const Templates>> For(const std::string& action) const;
  absl::Status ReloadLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(live_->reload_mu);

  std::shared_ptr<Live> live_;  // shared by copies (a moved-from Renderer is not used)
  RendererOptions options_;
  Clock* clock_;
  std::string from_address_;  // bare address of `from`
  std::string id_domain_;     // its domain, for Message-IDs
};

}  // namespace mailroom
