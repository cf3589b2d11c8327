// HTTP field syntax (RFC 9110 §5.1, §5.5): what may appear in a header name and value. Used to
// check what the server itself is asked to send; what it receives is checked by Beast's parser
// and request_guard.h.
#pragma once

#include <algorithm>
#include <string_view>

namespace idempotency::http::detail {

/// is_token_char() says whether `c` may appear in a token (a field name, a method).
[[nodiscard]] constexpr bool is_token_char(char c) noexcept {
  if (c >= '0' && c <= '9') return true;
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

/// is_field_name() says whether `name` is a non-empty token.
[[nodiscard]] constexpr bool is_field_name(std::string_view name) noexcept {
  return !name.empty() && std::all_of(name.begin(), name.end(), is_token_char);
}

/// is_field_value() says whether `value` holds no control byte but HTAB (so no CR, LF or
/// NUL), which is what keeps a value from splitting into another header.
[[nodiscard]] constexpr bool is_field_value(std::string_view value) noexcept {
  return std::none_of(value.begin(), value.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && c != '\t') || u == 0x7f;
  });
}

}  // namespace idempotency::http::detail
