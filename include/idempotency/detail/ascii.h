// ASCII case folding for HTTP field names and tokens, which RFC 9110 makes case-insensitive in
// ASCII only. Not std::tolower: that consults the C locale on every character, and a header
// comparison runs on every field of every request.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

namespace idempotency::detail {

/// ascii_lower() lower-cases an ASCII letter and returns any other byte as it is.
[[nodiscard]] constexpr char ascii_lower(char c) noexcept {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

namespace ascii_words {

inline constexpr std::uint64_t kOnes = 0x0101010101010101;

/// load() reads 8 bytes of `s` from `at`.
[[nodiscard]] inline std::uint64_t load(std::string_view s, std::size_t at) noexcept {
  std::uint64_t word = 0;
  std::memcpy(&word, s.data() + at, sizeof word);
  return word;
}

/// load_short() reads a text of 4 to 7 bytes as its first 4 and last 4 (overlapping): every
/// byte is in the word, which is all a bytewise test needs.
[[nodiscard]] inline std::uint64_t load_short(std::string_view s) noexcept {
  std::uint32_t first = 0;
  std::uint32_t last = 0;
  std::memcpy(&first, s.data(), sizeof first);
  std::memcpy(&last, s.data() + s.size() - sizeof last, sizeof last);
  return first | (std::uint64_t{last} << 32);
}

/// case_only() says whether words `x` and `y`, which differ by `diff` (x ^ y), hold the same
/// bytes ignoring ASCII case, exactly as a byte at a time: they differ only by the case bit
/// (0x20), and only where `x` holds a letter (its byte with that bit set is 'a' to 'z'; a byte
/// above 0x7f is none). Out of line: most words compared are equal, and their path stays short.
[[nodiscard]] [[gnu::noinline]] inline bool case_only(std::uint64_t x,
                                                      std::uint64_t diff) noexcept {
  if ((diff & ~(kOnes * 0x20)) != 0) return false;
  // Seven bits a byte, so no sum carries into the next byte: a byte's high bit then says
  // whether it is at least 'a', and whether it is above 'z'.
  const std::uint64_t lower = x | (kOnes * 0x20);
  const std::uint64_t low7 = lower & (kOnes * 0x7f);
  const std::uint64_t from_a = low7 + kOnes * (0x80 - 'a');
  const std::uint64_t past_z = low7 + kOnes * (0x80 - 'z' - 1);
  const std::uint64_t letter = from_a & ~past_z & ~lower & (kOnes * 0x80);
  return ((diff << 2) & ~letter) == 0;  // each differing case bit moved to its byte's top
}

/// iequal() says whether words `x` and `y` hold the same bytes ignoring ASCII case.
[[nodiscard]] inline bool iequal(std::uint64_t x, std::uint64_t y) noexcept {
  return x == y || case_only(x, x ^ y);
}

/// underscores_as_dashes() returns `x` with each '_' byte made '-'.
[[nodiscard]] inline std::uint64_t underscores_as_dashes(std::uint64_t x) noexcept {
  const std::uint64_t t = x ^ (kOnes * '_');  // a zero byte where x holds '_'
  // The exact zero-byte test (Hacker's Delight 6-1): no carry crosses a byte.
  const std::uint64_t zero = ~(((t & (kOnes * 0x7f)) + kOnes * 0x7f) | t) & (kOnes * 0x80);
  return x ^ ((zero >> 7) * ('_' ^ '-'));
}

/// equal() compares `a` and `b`, of one size of at least 4 bytes, a word at a time (the last
/// word overlapping the one before it), each pair of words by `same(word of a, word of b)`.
template <class Same>
[[nodiscard]] bool equal(std::string_view a, std::string_view b, Same same) noexcept {
  const std::size_t size = a.size();
  if (size < 8) return same(load_short(a), load_short(b));
  for (std::size_t at = 0; at + 8 < size; at += 8) {
    if (!same(load(a, at), load(b, at))) return false;
  }
  return same(load(a, size - 8), load(b, size - 8));
}

}  // namespace ascii_words

/// iequals_ascii() says whether `a` and `b` are equal ignoring ASCII case.
[[nodiscard]] constexpr bool iequals_ascii(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  // Eight bytes a step: every field name of every request is compared with a few names.
  if (!std::is_constant_evaluated() && a.size() >= 4) {
    return ascii_words::equal(
        a, b, [](std::uint64_t x, std::uint64_t y) { return ascii_words::iequal(x, y); });
  }
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
