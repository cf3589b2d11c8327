// HTTP field syntax (RFC 9110 §5.1, §5.5): what may appear in a header name and value. Used to
// check what the server and the upstream client are asked to send (what the server receives is
// checked by Beast's parser and request_guard.h), and by the fast readings of the plainest
// requests (the server) and responses (the upstream client), which accept the bytes Beast's
// parser accepts and no others.
//
// Thread safety: pure functions.
#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
#include <system_error>
#include <type_traits>

#include "idempotency/detail/ascii.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace idempotency::detail {

/// alnum_and() is the byte table of ASCII letters and digits and the bytes of `extra`: how the
/// grammar's character classes below are built.
[[nodiscard]] constexpr std::array<bool, 256> alnum_and(std::string_view extra) noexcept {
  std::array<bool, 256> table{};
  for (int c = '0'; c <= '9'; ++c) table[static_cast<std::size_t>(c)] = true;
  for (int c = 'a'; c <= 'z'; ++c) table[static_cast<std::size_t>(c)] = true;
  for (int c = 'A'; c <= 'Z'; ++c) table[static_cast<std::size_t>(c)] = true;
  for (const char c : extra) table[static_cast<unsigned char>(c)] = true;
  return table;
}

/// kTokenChars[b] says whether byte `b` may appear in a token (RFC 9110 tchar): a table, since
/// headers are checked a byte at a time on every request.
inline constexpr std::array<bool, 256> kTokenChars = alnum_and("!#$%&'*+-.^_`|~");

/// kValueChars[b] says whether byte `b` may appear in a field value: HTAB, SP, VCHAR and
/// obs-text, so no control byte (no CR, LF or NUL) and no DEL.
inline constexpr std::array<bool, 256> kValueChars = [] {
  std::array<bool, 256> table{};
  for (int c = 0x20; c <= 0xff; ++c) table[static_cast<std::size_t>(c)] = c != 0x7f;
  table['\t'] = true;
  return table;
}();

/// kTargetChars[b] says whether byte `b` may appear in a request target as Beast's parser reads
/// one (basic_parser_base::is_pathchar): any byte above SP but DEL, obs-text included.
inline constexpr std::array<bool, 256> kTargetChars = [] {
  std::array<bool, 256> table{};
  for (int c = 0x21; c <= 0xff; ++c) table[static_cast<std::size_t>(c)] = c != 0x7f;
  return table;
}();

/// is_token_char() says whether `c` may appear in a token (a field name, a method).
[[nodiscard]] constexpr bool is_token_char(char c) noexcept {
  return kTokenChars[static_cast<unsigned char>(c)];
}

#if defined(__SSE2__)
/// common_token_bytes() has bit k set where byte k of `bytes` is a letter, a digit or a dash:
/// the tchars most names are made of, sixteen judged at once.
[[nodiscard]] inline unsigned common_token_bytes(__m128i bytes) noexcept {
  // Compared as signed, so a byte above 0x7f is none of these.
  const __m128i folded = _mm_or_si128(bytes, _mm_set1_epi8(0x20));  // letters in lower case
  const __m128i letter = _mm_and_si128(_mm_cmpgt_epi8(folded, _mm_set1_epi8('a' - 1)),
                                       _mm_cmpgt_epi8(_mm_set1_epi8('z' + 1), folded));
  const __m128i digit = _mm_and_si128(_mm_cmpgt_epi8(bytes, _mm_set1_epi8('0' - 1)),
                                      _mm_cmpgt_epi8(_mm_set1_epi8('9' + 1), bytes));
  const __m128i dash = _mm_cmpeq_epi8(bytes, _mm_set1_epi8('-'));
  return static_cast<unsigned>(_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(letter, digit), dash)));
}
#endif

/// skip_token() returns the first index from `i` of a byte that is not a tchar (kTokenChars),
/// or text.size(). Every field name of every request and upstream answer passes through here,
/// and a table look-up a byte cost a name ~7 instructions a byte: the letters, digits and
/// dashes most names are made of are passed sixteen at a time with SSE2 (every x86-64 has
/// it), and the table judges from the first other byte on (the colon, most often).
[[nodiscard]] inline std::size_t skip_token(std::string_view text, std::size_t i) noexcept {
#if defined(__SSE2__)
  while (i + 16 <= text.size()) {
    const unsigned common =
        common_token_bytes(_mm_loadu_si128(reinterpret_cast<const __m128i*>(text.data() + i)));
    if (common != 0xffff) {
      i += static_cast<std::size_t>(__builtin_ctz(~common));
      break;
    }
    i += 16;
  }
#endif
  while (i < text.size() && kTokenChars[static_cast<unsigned char>(text[i])]) ++i;
  return i;
}

/// is_common_short_token() says whether `name`, of 4 to 15 bytes, is all letters, digits and
/// dashes, judged in one step (as two words, or half-words, that overlap) where skip_token()
/// would judge it a byte at a time; false says only that the table must judge it. A proxy
/// checks each name it forwards alone, and most are such.
[[nodiscard]] inline bool is_common_short_token(std::string_view name) noexcept {
#if defined(__SSE2__)
  if (name.size() >= 8) {
    const auto first = static_cast<long long>(ascii_words::load(name, 0));
    const auto last = static_cast<long long>(ascii_words::load(name, name.size() - 8));
    return common_token_bytes(_mm_set_epi64x(last, first)) == 0xffff;
  }
  const auto both = static_cast<long long>(ascii_words::load_short(name));
  return (common_token_bytes(_mm_set_epi64x(0, both)) & 0xff) == 0xff;
#else
  (void)name;
  return false;
#endif
}

/// is_field_name() says whether `name` is a non-empty token.
[[nodiscard]] constexpr bool is_field_name(std::string_view name) noexcept {
  if (name.empty()) return false;
  if (!std::is_constant_evaluated()) {
    if (name.size() >= 4 && name.size() < 16 && is_common_short_token(name)) return true;
    return skip_token(name, 0) == name.size();
  }
  for (const char c : name) {
    if (!is_token_char(c)) return false;
  }
  return true;
}

/// same_field_name() says whether field name `name` is `canonical` as a server that reads '_'
/// as '-' sees it (CGI-style ones, WSGI, Rack and PHP, put `X_A` and `X-A` in one variable),
/// ASCII case aside. A field a proxy writes, strips or acts on must be matched in that spelling
/// too, or a client could pass its own past it.
[[nodiscard]] constexpr bool same_field_name(std::string_view name,
                                             std::string_view canonical) noexcept {
  if (name.size() != canonical.size()) return false;
  if (!std::is_constant_evaluated() && name.size() >= 4) {
    return ascii_words::equal(name, canonical, [](std::uint64_t n, std::uint64_t c) {
      return ascii_words::iequal(ascii_words::underscores_as_dashes(n), c);
    });
  }
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (ascii_lower(name[i] == '_' ? '-' : name[i]) != ascii_lower(canonical[i])) return false;
  }
  return true;
}

/// kRegNameChars[b] says whether byte `b` may appear in a reg-name or an IPv4 address (RFC 3986
/// §3.2.2: unreserved, pct-encoded and sub-delims bytes); kIpLiteralChars adds the colon of an
/// IPv6 address, inside the brackets of an IP literal.
inline constexpr std::array<bool, 256> kRegNameChars = alnum_and("-._~%!$&'()*+,;=");
inline constexpr std::array<bool, 256> kIpLiteralChars = alnum_and("-._~%!$&'()*+,;=:");

/// is_host() says whether `value` is `uri-host [ ":" port ]` (RFC 9110 §7.2): a reg-name or
/// IPv4 address, or an IP literal in brackets, then optionally a colon and digits. Empty too,
/// which a target without an authority is sent with. Nothing else: "@", "/", "?", a space or a
/// second colon would let one Host name two places.
[[nodiscard]] constexpr bool is_host(std::string_view value) noexcept {
  std::size_t i = 0;
  if (!value.empty() && value.front() == '[') {
    const auto close = value.find(']');
    if (close == std::string_view::npos || close == 1) return false;
    for (i = 1; i < close; ++i) {
      if (!kIpLiteralChars[static_cast<unsigned char>(value[i])]) return false;
    }
    ++i;  // past ']'
  } else {
    while (i < value.size() && kRegNameChars[static_cast<unsigned char>(value[i])]) ++i;
  }
  if (i == value.size()) return true;
  if (value[i] != ':') return false;
  for (++i; i < value.size(); ++i) {
    if (value[i] < '0' || value[i] > '9') return false;
  }
  return true;
}

/// is_request_target() says whether `target` is non-empty and holds only kTargetChars: no
/// space or control byte that could end the request line early.
[[nodiscard]] constexpr bool is_request_target(std::string_view target) noexcept {
  if (target.empty()) return false;
  for (const char c : target) {
    if (!kTargetChars[static_cast<unsigned char>(c)]) return false;
  }
  return true;
}

/// at_crlf() says whether `text` holds CR LF at index `i`.
[[nodiscard]] constexpr bool at_crlf(std::string_view text, std::size_t i) noexcept {
  return i + 1 < text.size() && text[i] == '\r' && text[i + 1] == '\n';
}

/// is_ows() says whether `c` is optional whitespace (SP or HTAB, RFC 9110 §5.6.3).
[[nodiscard]] constexpr bool is_ows(char c) noexcept { return c == ' ' || c == '\t'; }

/// trim_ows() returns `s` without the optional whitespace (SP and HTAB, RFC 9110 §5.6.3) at
/// either end, as a field value or a list element is read.
[[nodiscard]] constexpr std::string_view trim_ows(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

/// TransferCodings reads the transfer codings a message's Transfer-Encoding fields name: one
/// list across them all, in order, empty elements skipped (RFC 9110 §5.6.1), as Beast's parser
/// reads them. The server judges a request's by it, the upstream client a response's.
class TransferCodings {
 public:
  /// add() reads one Transfer-Encoding field's value.
  constexpr void add(std::string_view value) noexcept {
    for (std::size_t start = 0; start <= value.size();) {
      const std::size_t comma = std::min(value.find(',', start), value.size());
      const std::string_view coding = trim_ows(value.substr(start, comma - start));
      if (!coding.empty()) {
        last_is_chunked_ = iequals_ascii(coding, "chunked");
        chunked_ += last_is_chunked_ ? 1 : 0;
        ++codings_;
      }
      start = comma + 1;
    }
  }
  /// codings() is how many codings were named, chunked() how many of them are chunked.
  [[nodiscard]] constexpr std::size_t codings() const noexcept { return codings_; }
  [[nodiscard]] constexpr std::size_t chunked() const noexcept { return chunked_; }
  /// last_is_chunked() says whether the last coding named is chunked: the body's framing.
  [[nodiscard]] constexpr bool last_is_chunked() const noexcept { return last_is_chunked_; }

 private:
  std::size_t codings_ = 0;
  std::size_t chunked_ = 0;
  bool last_is_chunked_ = false;
};

/// skip_field_value() returns the first index from `i` of a byte that a field value cannot
/// hold (the CR ending its line, when the line is sound), or text.size(). Sixteen bytes a step
/// with SSE2 (every x86-64 has it), then eight (the rest of a header's last line, after SSE2),
/// while none is a control byte; then byte by byte, where HTAB, which a value may hold, is told
/// apart. Every header byte of every push and of every upstream answer passes through here.
[[nodiscard]] inline std::size_t skip_field_value(std::string_view text, std::size_t i) noexcept {
#if defined(__SSE2__)
  while (i + 16 <= text.size()) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(text.data() + i));
    // Below 0x20 (min(b, 0x1f) == b, unsigned) but not HTAB, or DEL.
    const __m128i control = _mm_cmpeq_epi8(_mm_min_epu8(bytes, _mm_set1_epi8(0x1f)), bytes);
    const __m128i tab = _mm_cmpeq_epi8(bytes, _mm_set1_epi8('\t'));
    const __m128i del = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(0x7f));
    const int bad = _mm_movemask_epi8(_mm_or_si128(_mm_andnot_si128(tab, control), del));
    if (bad != 0) return i + static_cast<std::size_t>(__builtin_ctz(static_cast<unsigned>(bad)));
    i += 16;
  }
#endif
  // Whether one of the 8 bytes in `w` is below 0x20 or is DEL (exact as a yes or no: the
  // classic "has a byte less than n" and "has a zero byte" tests, Hacker's Delight 6-1).
  constexpr auto may_end_value = [](std::uint64_t w) {
    constexpr std::uint64_t kOnes = 0x0101010101010101;
    constexpr std::uint64_t kHighs = 0x8080808080808080;
    const std::uint64_t below_space = (w - kOnes * 0x20) & ~w & kHighs;
    const std::uint64_t del = w ^ (kOnes * 0x7f);
    return (below_space | ((del - kOnes) & ~del & kHighs)) != 0;
  };
  while (i + sizeof(std::uint64_t) <= text.size()) {
    std::uint64_t w = 0;
    std::memcpy(&w, text.data() + i, sizeof w);
    if (may_end_value(w)) break;
    i += sizeof w;
  }
  while (i < text.size() && kValueChars[static_cast<unsigned char>(text[i])]) ++i;
  return i;
}

/// is_field_value() says whether `value` holds no control byte but HTAB (so no CR, LF or
/// NUL), which is what keeps a value from splitting into another header. A block at a time,
/// as skip_field_value(): a token's ~1 KiB `Authorization` is on every push.
[[nodiscard]] inline bool is_field_value(std::string_view value) noexcept {
  return skip_field_value(value, 0) == value.size();
}

/// The most digits plain_content_length() reads: a longer Content-Length is left to Beast's
/// parser, which checks it for overflow.
inline constexpr std::size_t kMaxPlainLengthDigits = 18;

/// plain_content_length() reads a Content-Length of digits alone, at most
/// kMaxPlainLengthDigits of them; nullopt for any other form (Beast also takes a list of equal
/// values, a sign is refused by both).
[[nodiscard]] inline std::optional<std::uint64_t> plain_content_length(
    std::string_view value) noexcept {
  if (value.empty() || value.size() > kMaxPlainLengthDigits) return std::nullopt;
  std::uint64_t length = 0;
  const char* end = value.data() + value.size();
  const auto [stop, ec] = std::from_chars(value.data(), end, length);  // digits only: no sign
  if (ec != std::errc() || stop != end) return std::nullopt;
  return length;
}

/// connection_closes() says whether a Connection value, a list of tokens with no empty element,
/// holds `close`; nullopt for any other form, or an `upgrade` (which Beast's parser acts on).
[[nodiscard]] constexpr std::optional<bool> connection_closes(std::string_view value) noexcept {
  // The two values nearly every message sends (nginx answers each with `keep-alive`), settled
  // without the list's reading: the same answer at a sixth of the cost.
  if (value.size() == 10 && iequals_ascii(value, "keep-alive")) return false;
  if (value.size() == 5 && iequals_ascii(value, "close")) return true;
  bool close = false;
  for (;;) {
    const auto comma = value.find(',');
    const std::string_view token = trim_ows(value.substr(0, comma));
    if (!is_field_name(token) || iequals_ascii(token, "upgrade")) return std::nullopt;
    close = close || iequals_ascii(token, "close");
    if (comma == std::string_view::npos) return close;
    value.remove_prefix(comma + 1);
  }
}

/// What read_plain_fields() found in the fields that frame a message.
struct PlainFraming {
  std::optional<std::uint64_t> content_length;  ///< Its one Content-Length, if any.
  bool close = false;                           ///< A Connection field lists `close`.
};

/// read_plain_fields() reads `text` from index `i` as field lines, `name ":" OWS value OWS
/// CRLF`, up to the empty line, calling `each(name, value)` (the value without its OWS) for
/// every field in order and gathering `framing`; `each` returns false to stop at once. It
/// returns the index after the empty line, or nullopt when `each` stopped it or for anything a
/// plain message does not hold, to be left to Beast's parser: an
/// obs-fold, a byte a name or value cannot hold, no end within `text`, two Content-Lengths or
/// one that is not plain digits, a Connection value that is not a plain list or lists
/// `upgrade`, and the fields whose meaning Beast's parser or the server acts on otherwise
/// (Transfer-Encoding, Upgrade, Proxy-Connection, Expect). What it accepts, Beast's parser
/// reads as the same fields and the same framing.
template <class Each>
[[nodiscard]] std::optional<std::size_t> read_plain_fields(std::string_view text, std::size_t i,
                                                           PlainFraming& framing, Each&& each) {
  // A line starting with SP or HTAB (an obs-fold) has no name, and is refused like any other
  // odd byte.
  while (!at_crlf(text, i)) {
    const std::size_t name_start = i;
    i = skip_token(text, i);
    if (i == name_start || i == text.size() || text[i] != ':') return std::nullopt;
    const std::string_view name(text.data() + name_start, i - name_start);
    // The value's leading OWS passed over before it is scanned, and its trailing OWS after:
    // cheaper than trim_ows() over the value's view, the same value.
    std::size_t value_start = i + 1;
    while (value_start < text.size() && is_ows(text[value_start])) ++value_start;
    i = skip_field_value(text, value_start);
    if (!at_crlf(text, i)) return std::nullopt;
    std::size_t value_end = i;
    while (value_end > value_start && is_ows(text[value_end - 1])) --value_end;
    const std::string_view value(text.data() + value_start, value_end - value_start);
    i += 2;
    // Told apart by length first: most fields are none of these, and cost one switch. Then by
    // the first letter, folded: a name of the same length (Server and Expect) costs no call.
    const auto initial = [&name] { return ascii_lower(name.front()); };
    switch (name.size()) {
      case 6:
        if (initial() == 'e' && iequals_ascii(name, "Expect")) return std::nullopt;
        break;
      case 7:
        if (initial() == 'u' && iequals_ascii(name, "Upgrade")) return std::nullopt;
        break;
      case 10:
        if (initial() == 'c' && iequals_ascii(name, "Connection")) {
          const std::optional<bool> close = connection_closes(value);
          if (!close) return std::nullopt;
          framing.close = framing.close || *close;
        }
        break;
      case 14:
        if (initial() == 'c' && iequals_ascii(name, "Content-Length")) {
          if (framing.content_length) return std::nullopt;
          framing.content_length = plain_content_length(value);
          if (!framing.content_length) return std::nullopt;
        }
        break;
      case 16:
        if (initial() == 'p' && iequals_ascii(name, "Proxy-Connection")) return std::nullopt;
        break;
      case 17:
        if (initial() == 't' && iequals_ascii(name, "Transfer-Encoding")) return std::nullopt;
        break;
      default:
        break;
    }
    if (!each(name, value)) return std::nullopt;
  }
  return i + 2;
}
}  // namespace idempotency::detail
