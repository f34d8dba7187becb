#pragma once

#include <map>
#include <string>

#include "absl/strings/string_view.h"

namespace mailroom {

// The fields of an application/x-www-form-urlencoded body or a URL's query: `name=value` pairs
// separated by `&`, `+` as a space and `%XX` escapes decoded. A field given twice keeps its
// first value; a malformed escape is kept as it is. Fields over 4096 bytes, and any after the
// 64th, are dropped.
std::map<std::string, std::string> ParseForm(absl::string_view text);

// `text` escaped for a URL's query (every byte but A-Z a-z 0-9 - _ . ~ as %XX).
std::string QueryEscape(absl::string_view text);

// `text` escaped for HTML text and attribute values (& < > " ').
std::string HtmlEscape(absl::string_view text);

}  // namespace mailroom
