#include "common/names.h"

namespace mailroom {

bool ValidGroupName(absl::string_view name) {
  if (name.empty() || name.size() > 63 || name[0] < 'a' || name[0] > 'z') return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) {
      return false;
    }
  }
  return true;
}

}  // namespace mailroom
