#pragma once

// UTF-8 checks shared by both services: the collector rejects reasons that are not valid
// UTF-8, the sender repairs server replies before it reports them (a proto3 string must be
// valid UTF-8, or protobuf rejects the whole message).

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace mailroom {

// Length in bytes of the well-formed UTF-8 sequence at the start of `s` (RFC 3629: no
// overlongs, no surrogates, at most U+10FFFF), with its code point; 0 when there is none.
size_t DecodeUtf8(absl::string_view s, uint32_t* code_point);

// True when all of `s` is well-formed UTF-8.
bool IsValidUtf8(absl::string_view s);

// The longest prefix of valid UTF-8 `s` of at most `max_bytes` that ends on a character
// boundary.
absl::string_view Utf8Prefix(absl::string_view s, size_t max_bytes);

// `s` made safe to report: each byte that does not start a well-formed sequence becomes
// U+FFFD, control characters (but tab) become a space, cut at a character boundary to at most
// `max_bytes`.
std::string SanitizeUtf8(absl::string_view s, size_t max_bytes);

}  // namespace mailroom
