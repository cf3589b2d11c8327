// Parsing the gateway's human-written quantities: durations ("500ms", "30s", "15m", "1h",
// "1h30m") and byte sizes ("10485760", "512KiB", "10MiB").
//
// Thread safety: pure functions.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string_view>

namespace idempotency::gateway {

/// parse_duration() reads one or more `<digits><unit>` parts (units ms, s, m, h) and returns
/// their sum (a bare "0" is zero), or nothing when the text is not of that form or overflows.
[[nodiscard]] std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);

/// parse_size() reads a byte count with an optional binary suffix (K/KiB, M/MiB, G/GiB, any
/// case), or nothing when the text is not of that form or overflows.
[[nodiscard]] std::optional<std::size_t> parse_size(std::string_view text);

}  // namespace idempotency::gateway
