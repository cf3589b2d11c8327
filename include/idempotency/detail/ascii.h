// ASCII case folding for HTTP field names and tokens, which RFC 9110 makes case-insensitive in
// ASCII only. Not std::tolower: that consults the C locale on every character, and a header
// comparison runs on every field of every request.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace idempotency::detail {

/// ascii_lower() lower-cases an ASCII letter and returns any other byte as it is.
[[nodiscard]] constexpr char ascii_lower(char c) noexcept {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

/// iequals_ascii() says whether `a` and `b` are equal ignoring ASCII case.
[[nodiscard]] constexpr bool iequals_ascii(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    // Names are mostly spelled alike: one comparison a byte then, and case is folded only
    // where the bytes differ by the case bit alone.
    if (a[i] == b[i]) continue;
    if ((a[i] ^ b[i]) != 0x20) return false;
    const char lower = static_cast<char>(a[i] | 0x20);
    if (lower < 'a' || lower > 'z') return false;
  }
  return true;
}

/// ascii_lowered() returns a copy of `s` with its ASCII letters lower-cased.
[[nodiscard]] inline std::string ascii_lowered(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ascii_lower(c);
  return out;
}

}  // namespace idempotency::detail
