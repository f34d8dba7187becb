#include "collector/console/form.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"

namespace mailroom {
namespace {

constexpr size_t kMaxField = 4096;
constexpr int kMaxFields = 64;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string Decode(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 &&
               HexValue(s[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

std::map<std::string, std::string> ParseForm(absl::string_view text) {
  std::map<std::string, std::string> fields;
  int n = 0;
  for (absl::string_view pair : absl::StrSplit(text, '&', absl::SkipEmpty())) {
    if (++n > kMaxFields) break;
    if (pair.size() > kMaxField) continue;
    const size_t eq = pair.find('=');
    std::string name = Decode(pair.substr(0, eq));
    std::string value = eq == absl::string_view::npos ? "" : Decode(pair.substr(eq + 1));
    fields.emplace(std::move(name), std::move(value));
  }
  return fields;
}

std::string QueryEscape(absl::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string HtmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace mailroom
