#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include <kainjow/mustache.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace mailroom {

// One parsed Mustache template, rendered by many threads at once without a copy of its parse
// tree per email. kainjow's render() is not const (it keeps an error message), so concurrent
// renders each need their own instance: the pool keeps the instances finished renders gave
// back (at most one per thread rendering at the same time) and copies the parsed template only
// when none is free. Thread-safe.
class TemplatePool {
 public:
  // Parses `text`; `escape` false renders variables as they are (subject, text part), true
  // HTML-escapes them.
  TemplatePool(const std::string& text, bool escape);

  // False when the template did not parse; error() then says why.
  bool valid() const { return parsed_.is_valid(); }
  const std::string& error() const { return parsed_.error_message(); }

  // The names the template's tags look up, read by the library's own parser (so custom
  // delimiters such as `{{=<% %>=}}` are followed and whitespace inside a tag is trimmed):
  // variables (`{{x}}`, `{{{x}}}`, `{{& x}}`), sections (`{{#x}}`, `{{^x}}`) and partials
  // (`{{>x}}`, which render a string value as a template), at any depth, dotted names as
  // written. Comments and delimiter changes are not names. Empty when the template did not
  // parse.
  const std::set<std::string>& names() const { return names_; }

  // True when a tag looks up `name`: a name of names() that is `name` or starts with
  // `name.`, whatever the tag's kind.
  bool Uses(absl::string_view name) const;

  // Renders with `data`. On a rendering error returns "" and sets *ok to false (the instance
  // that failed is dropped, not reused); *ok is never set to true.
  std::string Render(const kainjow::mustache::data& data, bool* ok) const;

  // Instances kept for reuse (for tests).
  size_t idle() const;

 private:
  using Mustache = kainjow::mustache::mustache;
  std::unique_ptr<Mustache> Take() const;

  Mustache parsed_;  // never rendered: the source of the copies
  std::set<std::string> names_;
  mutable absl::Mutex mu_;
  mutable std::vector<std::unique_ptr<Mustache>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mailroom
