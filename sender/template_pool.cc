#include "sender/template_pool.h"

namespace mailroom {

TemplatePool::TemplatePool(const std::string& text, bool escape) : parsed_(text) {
  if (!escape) parsed_.set_custom_escape([](const std::string& s) { return s; });
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
