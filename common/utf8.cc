#include "common/utf8.h"

#include <algorithm>

namespace mailroom {

size_t DecodeUtf8(absl::string_view s, uint32_t* code_point) {
  if (s.empty()) return 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned char c = p[0];
  size_t len;
  uint32_t cp;
  if (c < 0x80) {
    len = 1;
    cp = c;
  } else if ((c & 0xE0) == 0xC0) {
    len = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((p[k] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (p[k] & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  if (code_point != nullptr) *code_point = cp;
  return len;
}

bool IsValidUtf8(absl::string_view s) {
  while (!s.empty()) {
    size_t n = DecodeUtf8(s, nullptr);
    if (n == 0) return false;
    s.remove_prefix(n);
  }
  return true;
}

absl::string_view Utf8Prefix(absl::string_view s, size_t max_bytes) {
  size_t keep = 0;
  while (keep < s.size()) {
    size_t n = DecodeUtf8(s.substr(keep), nullptr);
    if (n == 0 || keep + n > max_bytes) break;
    keep += n;
  }
  return s.substr(0, keep);
}

std::string SanitizeUtf8(absl::string_view s, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes));
  while (!s.empty()) {
    uint32_t cp = 0;
    size_t n = DecodeUtf8(s, &cp);
    absl::string_view piece;
    if (n == 0) {
      piece = "\xEF\xBF\xBD";
      n = 1;
    } else if (cp < 0x20 && cp != '\t') {
      piece = " ";
    } else {
      piece = s.substr(0, n);
    }
    if (out.size() + piece.size() > max_bytes) break;
    out.append(piece.data(), piece.size());
    s.remove_prefix(n);
  }
  return out;
}

}  // namespace mailroom
