// HTTP field syntax (RFC 9110 §5.1, §5.5): what may appear in a header name and value. Used to
// check what the server and the upstream client are asked to send (what the server receives is
// checked by Beast's parser and request_guard.h), and by the upstream client's reading of the
// plainest responses, which accepts the bytes Beast's parser accepts and no others.
//
// Thread safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace idempotency::detail {

/// kTokenChars[b] says whether byte `b` may appear in a token (RFC 9110 tchar): a table, since
/// headers are checked a byte at a time on every request.
inline constexpr std::array<bool, 256> kTokenChars = [] {
  std::array<bool, 256> table{};
  for (int c = '0'; c <= '9'; ++c) table[static_cast<std::size_t>(c)] = true;
  for (int c = 'a'; c <= 'z'; ++c) table[static_cast<std::size_t>(c)] = true;
  for (int c = 'A'; c <= 'Z'; ++c) table[static_cast<std::size_t>(c)] = true;
  for (const char c : std::string_view("!#$%&'*+-.^_`|~")) {
    table[static_cast<unsigned char>(c)] = true;
  }
  return table;
}();

/// kValueChars[b] says whether byte `b` may appear in a field value: HTAB, SP, VCHAR and
/// obs-text, so no control byte (no CR, LF or NUL) and no DEL.
inline constexpr std::array<bool, 256> kValueChars = [] {
  std::array<bool, 256> table{};
  for (int c = 0x20; c <= 0xff; ++c) table[static_cast<std::size_t>(c)] = c != 0x7f;
  table['\t'] = true;
  return table;
}();

/// is_token_char() says whether `c` may appear in a token (a field name, a method).
[[nodiscard]] constexpr bool is_token_char(char c) noexcept {
  return kTokenChars[static_cast<unsigned char>(c)];
}

/// is_field_name() says whether `name` is a non-empty token.
[[nodiscard]] constexpr bool is_field_name(std::string_view name) noexcept {
  if (name.empty()) return false;
  for (const char c : name) {
    if (!is_token_char(c)) return false;
  }
  return true;
}

/// is_field_value() says whether `value` holds no control byte but HTAB (so no CR, LF or
/// NUL), which is what keeps a value from splitting into another header.
[[nodiscard]] constexpr bool is_field_value(std::string_view value) noexcept {
  for (const char c : value) {
    if (!kValueChars[static_cast<unsigned char>(c)]) return false;
  }
  return true;
}

/// trim_ows() returns `s` without the optional whitespace (SP and HTAB, RFC 9110 §5.6.3) at
/// either end, as a field value or a list element is read.
[[nodiscard]] constexpr std::string_view trim_ows(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace idempotency::detail
