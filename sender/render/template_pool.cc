#include "sender/render/template_pool.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace mailroom {
namespace {

namespace mustache = kainjow::mustache;

// The names `text`'s tags look up. kainjow keeps the parse tree of a mustache private, so the
// text is parsed a second time by the parser its constructor runs, the same way (default
// delimiters, a fresh context): what the check sees is what rendering walks.
std::set<std::string> TagNames(const std::string& text) {
  mustache::context<std::string> ctx;
  mustache::context_internal<std::string> internal{ctx};
  mustache::component<std::string> root;
  std::string error;
  mustache::parser<std::string> parse{text, internal, root, error};
  std::set<std::string> names;
  if (!error.empty()) return names;
  using Component = mustache::component<std::string>;
  root.walk_children([&names](Component& c) {
    switch (c.tag.type) {
      case mustache::tag_type::variable:
      case mustache::tag_type::unescaped_variable:
      case mustache::tag_type::section_begin:
      case mustache::tag_type::section_begin_inverted:
      case mustache::tag_type::partial: names.insert(c.tag.name); break;
      default: break;
    }
    return Component::walk_control::walk;  // into sections too
  });
  return names;
}

}  // namespace

TemplatePool::TemplatePool(const std::string& text, bool escape)
    : parsed_(text), names_(TagNames(text)) {
  if (!escape) parsed_.set_custom_escape([](const std::string& s) { return s; });
}

bool TemplatePool::Uses(absl::string_view name) const {
  const std::string dotted = absl::StrCat(name, ".");  // {{code.x}} looks up code first
  for (const std::string& n : names_) {
    if (n == name || absl::StartsWith(n, dotted)) return true;
  }
  return false;
}

std::unique_ptr<TemplatePool::Mustache> TemplatePool::Take() const {
  {
    absl::MutexLock lock(&mu_);
    if (!idle_.empty()) {
      std::unique_ptr<Mustache> m = std::move(idle_.back());
      idle_.pop_back();
      return m;
    }
  }
  return std::make_unique<Mustache>(parsed_);  // the copy keeps the escape handler
}

std::string TemplatePool::Render(const kainjow::mustache::data& data, bool* ok) const {
  std::unique_ptr<Mustache> m = Take();
  std::string out;
  // Straight into the string: render(data) would go through an ostringstream.
  m->render(data, [&out](const std::string& s) { out.append(s); });
  if (!m->is_valid()) {
    *ok = false;
    return "";
  }
  absl::MutexLock lock(&mu_);
  idle_.push_back(std::move(m));
  return out;
}

size_t TemplatePool::idle() const {
  absl::MutexLock lock(&mu_);
  return idle_.size();
}

}  // namespace mailroom
