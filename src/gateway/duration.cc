#include "duration.h"

#include <cctype>
#include <cstdint>
#include <limits>
#include <string>

namespace idempotency::gateway {
namespace {

// Reads the decimal digits at `pos`, advancing it; nothing when there are none or too many.
std::optional<std::uint64_t> read_number(std::string_view text, std::size_t& pos) {
  const std::size_t start = pos;
  std::uint64_t value = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])) != 0) {
    const auto digit = static_cast<std::uint64_t>(text[pos] - '0');
    if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
    ++pos;
  }
  if (pos == start) return std::nullopt;
  return value;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  // Bounded well below int64 milliseconds so sums cannot overflow.
  constexpr std::uint64_t kLimitMs = std::uint64_t{1} << 52;
  if (text.empty()) return std::nullopt;
  if (text == "0") return std::chrono::milliseconds(0);  // zero needs no unit
  std::uint64_t total = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto number = read_number(text, pos);
    if (!number) return std::nullopt;
    const std::size_t unit_start = pos;
    while (pos < text.size() && std::isalpha(static_cast<unsigned char>(text[pos])) != 0) ++pos;
    const std::string_view unit = text.substr(unit_start, pos - unit_start);
    std::uint64_t scale = 0;
    if (unit == "ms") {
      scale = 1;
    } else if (unit == "s") {
      scale = 1000;
    } else if (unit == "m") {
      scale = 60'000;
    } else if (unit == "h") {
      scale = 3'600'000;
    } else {
      return std::nullopt;
    }
    if (*number > kLimitMs / scale) return std::nullopt;
    total += *number * scale;
    if (total > kLimitMs) return std::nullopt;
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(total));
}

std::optional<std::size_t> parse_size(std::string_view text) {
  std::size_t pos = 0;
  auto number = read_number(text, pos);
  if (!number) return std::nullopt;
  const std::string unit = lower(text.substr(pos));
  std::uint64_t scale = 0;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (unit == "k" || unit == "kib" || unit == "kb") {
    scale = std::uint64_t{1} << 10;
  } else if (unit == "m" || unit == "mib" || unit == "mb") {
    scale = std::uint64_t{1} << 20;
  } else if (unit == "g" || unit == "gib" || unit == "gb") {
    scale = std::uint64_t{1} << 30;
  } else {
    return std::nullopt;
  }
  if (*number > std::numeric_limits<std::size_t>::max() / scale) return std::nullopt;
  return static_cast<std::size_t>(*number * scale);
}

}  // namespace idempotency::gateway
