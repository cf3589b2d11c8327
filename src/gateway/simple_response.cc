#include "simple_response.h"

#include <charconv>
#include <cstring>
#include <system_error>

#include "idempotency/detail/ascii.h"
#include "idempotency/detail/field_syntax.h"

namespace idempotency::gateway::upstream_detail {

namespace {

using idempotency::detail::iequals_ascii;
using idempotency::detail::is_field_name;
using idempotency::detail::kTokenChars;
using idempotency::detail::kValueChars;
using idempotency::detail::trim_ows;

constexpr std::string_view kStatusLineStart = "HTTP/1.1 ";
// A longer Content-Length goes to Beast, which checks it for overflow.
constexpr std::size_t kMaxLengthDigits = 18;

bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::size_t byte(char c) { return static_cast<unsigned char>(c); }

bool at_crlf(std::string_view text, std::size_t i) {
  return i + 1 < text.size() && text[i] == '\r' && text[i + 1] == '\n';
}

// Whether one of the 8 bytes in `w` is below 0x20 or is DEL (exact as a yes or no: the
// classic "has a byte less than n" and "has a zero byte" tests, Hacker's Delight 6-1).
bool may_end_value(std::uint64_t w) {
  constexpr std::uint64_t kOnes = 0x0101010101010101;
  constexpr std::uint64_t kHighs = 0x8080808080808080;
  const std::uint64_t below_space = (w - kOnes * 0x20) & ~w & kHighs;
  const std::uint64_t del = w ^ (kOnes * 0x7f);
  return (below_space | ((del - kOnes) & ~del & kHighs)) != 0;
}

// The first index from `i` of a byte that a field value cannot hold (the CR ending its line,
// when the line is sound), or text.size(). Eight bytes a step while none is a control byte;
// then byte by byte, where HTAB, which a value may hold, is told apart.
std::size_t skip_value(std::string_view text, std::size_t i) {
  while (i + sizeof(std::uint64_t) <= text.size()) {
    std::uint64_t w = 0;
    std::memcpy(&w, text.data() + i, sizeof w);
    if (may_end_value(w)) break;
    i += sizeof w;
  }
  while (i < text.size() && kValueChars[byte(text[i])]) ++i;
  return i;
}

// A Content-Length of digits alone (Beast also takes a list of equal values: not here).
std::optional<std::uint64_t> read_length(std::string_view value) {
  if (value.empty() || value.size() > kMaxLengthDigits) return std::nullopt;
  std::uint64_t length = 0;
  const char* end = value.data() + value.size();
  const auto [stop, ec] = std::from_chars(value.data(), end, length);  // digits only: no sign
  if (ec != std::errc() || stop != end) return std::nullopt;
  return length;
}

// Whether a Connection value, a list of tokens with no empty element, holds `close`; nullopt
// for any other form, or an `upgrade` (Beast marks the message an upgrade).
std::optional<bool> lists_close(std::string_view value) {
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

// The fields whose meaning Beast's parser acts on (basic_parser::do_field); the rest only
// need to be well formed.
enum class Field { kOther, kContentLength, kConnection, kUnhandled };

Field field_of(std::string_view name) {
  switch (name.size()) {
    case 7:
      return iequals_ascii(name, "Upgrade") ? Field::kUnhandled : Field::kOther;
    case 10:
      return iequals_ascii(name, "Connection") ? Field::kConnection : Field::kOther;
    case 14:
      return iequals_ascii(name, "Content-Length") ? Field::kContentLength : Field::kOther;
    case 16:
      return iequals_ascii(name, "Proxy-Connection") ? Field::kUnhandled : Field::kOther;
    case 17:
      return iequals_ascii(name, "Transfer-Encoding") ? Field::kUnhandled : Field::kOther;
    default:
      return Field::kOther;
  }
}

}  // namespace

std::optional<SimpleResponse> simple_response(std::string_view bytes,
                                              std::uint64_t body_limit) noexcept {
  // One pass over the header, which must end within kSimpleHeaderLimit bytes.
  const std::string_view text = bytes.substr(0, kSimpleHeaderLimit);

  // `HTTP/1.1 DDD reason`: a final status with a body by length (Beast reads no body after a
  // 1xx, 204 or 304, whatever the fields say).
  std::size_t i = kStatusLineStart.size();
  if (!text.starts_with(kStatusLineStart) || text.size() < i + 4 || !is_digit(text[i]) ||
      !is_digit(text[i + 1]) || !is_digit(text[i + 2]) || text[i + 3] != ' ') {
    return std::nullopt;
  }
  SimpleResponse out;
  out.status = (text[i] - '0') * 100 + (text[i + 1] - '0') * 10 + (text[i + 2] - '0');
  if (out.status < 200 || out.status > 599 || out.status == 204 || out.status == 304) {
    return std::nullopt;
  }
  i = skip_value(text, i + 4);  // the reason phrase
  if (!at_crlf(text, i)) return std::nullopt;
  i += 2;

  // Fields, `name ":" OWS value OWS CRLF`, up to the empty line. A line starting with SP or
  // HTAB (an obs-fold) has no name, and goes to Beast like any other odd byte.
  std::optional<std::uint64_t> length;
  while (!at_crlf(text, i)) {
    const std::size_t name_start = i;
    while (i < text.size() && kTokenChars[byte(text[i])]) ++i;
    if (i == name_start || i == text.size() || text[i] != ':') return std::nullopt;
    const std::string_view name = text.substr(name_start, i - name_start);
    const std::size_t value_start = i + 1;
    i = skip_value(text, value_start);
    if (!at_crlf(text, i)) return std::nullopt;
    const std::string_view value = trim_ows(text.substr(value_start, i - value_start));
    i += 2;
    switch (field_of(name)) {
      case Field::kOther:
        break;
      case Field::kContentLength:
        if (length) return std::nullopt;
        length = read_length(value);
        if (!length) return std::nullopt;
        break;
      case Field::kConnection: {
        const std::optional<bool> close = lists_close(value);
        if (!close) return std::nullopt;
        out.keep_alive = out.keep_alive && !*close;
        break;
      }
      case Field::kUnhandled:
        return std::nullopt;
    }
  }
  const std::size_t header_size = i + 2;
  if (!length || *length > body_limit || bytes.size() - header_size != *length) {
    return std::nullopt;
  }
  out.size = bytes.size();
  return out;
}

}  // namespace idempotency::gateway::upstream_detail
