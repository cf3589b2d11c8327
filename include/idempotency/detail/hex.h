// to_hex(): lowercase hexadecimal of bytes, for claim tokens, key fingerprints and request
// fingerprints. A table lookup: formatting with snprintf cost a claim microseconds.
//
// Thread safety: a pure function.
#pragma once

#include <cstddef>
#include <string>

namespace idempotency::detail {

/// to_hex() returns the lowercase hex digits of the `size` bytes at `data`.
[[nodiscard]] inline std::string to_hex(const unsigned char* data, std::size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(size * 2, '\0');
  // Through a plain pointer: a store through out[] may alias the string's own fields, so the
  // compiler would reload them after every digit.
  char* p = out.data();
  for (std::size_t i = 0; i < size; ++i) {
    p[2 * i] = kDigits[data[i] >> 4];
    p[2 * i + 1] = kDigits[data[i] & 0xf];
  }
  return out;
}

}  // namespace idempotency::detail
