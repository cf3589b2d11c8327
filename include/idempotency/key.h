// Keys: validation and the fingerprint that stands in for a key wherever one is shown.
//
// Keys are customer data (order, payment and user ids). The library never writes a raw
// key to a log line, an exception message or a report; it writes `key_fingerprint(key)`.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace idempotency {

/// The longest key accepted, in bytes. It fits every backend's index limits.
inline constexpr std::size_t kMaxKeyBytes = 1024;

/// The bytes a blank key consists of: ASCII whitespace (C `isspace`). Keys are bytes, not
/// text, so non-ASCII whitespace (e.g. UTF-8 U+00A0) is an ordinary key byte.
inline constexpr std::string_view kBlankKeyBytes = " \t\n\v\f\r";

/// is_blank_key() is true for an empty key or one of only `kBlankKeyBytes` (seed 2: a key
/// must be a non-blank string).
[[nodiscard]] bool is_blank_key(std::string_view key) noexcept;

/// validate_key() throws `std::invalid_argument` for an empty or blank key or one longer than
/// `kMaxKeyBytes`. The message names the problem, never the key.
void validate_key(std::string_view key);

/// key_fingerprint() returns the first 12 hex digits of the key's SHA-256: stable across
/// processes, so log lines about one key correlate, yet not the key itself.
[[nodiscard]] std::string key_fingerprint(std::string_view key);

}  // namespace idempotency
