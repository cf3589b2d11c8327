// Decimal text of integers: appended in place (the HTTP edge writes a status, a fence and a
// Content-Length into every message it builds, and std::to_string made a string for each), and
// recognised.
//
// Thread safety: pure functions.
#pragma once

#include <charconv>
#include <concepts>
#include <string>
#include <string_view>

namespace idempotency::detail {

/// append_decimal() appends `n` in decimal (a '-' first when negative) to `out`.
template <std::integral Int>
void append_decimal(std::string& out, Int n) {
  static_assert(sizeof(Int) <= 8, "append_decimal() writes integers of at most 64 bits");
  char digits[24];  // any 64-bit integer and its sign
  const auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;
  out.append(digits, static_cast<std::size_t>(end - digits));
}

/// is_decimal_digits() says whether `text` is a non-empty run of ASCII digits and nothing else
/// (no sign, no space): a number as HTTP's Content-Length or a libpq port writes it.
[[nodiscard]] constexpr bool is_decimal_digits(std::string_view text) noexcept {
  if (text.empty()) return false;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace idempotency::detail
