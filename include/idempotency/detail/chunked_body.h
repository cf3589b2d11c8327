// What the server and the upstream client must not hand Beast's parser of a chunked body.
//
// Thread safety: constants and pure functions.
#pragma once

#include <cstddef>

namespace idempotency::detail {

/// least_bytes_to_parse() is how many buffered bytes a body parser is handed at the least:
/// 5 once a chunked body has begun, else 1. Beast 1.74 asserts that a final chunk, once begun,
/// is parsed again with at least 5 bytes (boostorg/beast#2861, fixed in Boost 1.86), so a peer
/// sending "0\r\n" and then one byte would abort a build with assertions. No legitimate rest of
/// an unfinished chunked body is shorter ("0\r\n\r\n"), so fewer bytes are read on, not parsed.
[[nodiscard]] constexpr std::size_t least_bytes_to_parse(bool chunked_body) noexcept {
  return chunked_body ? 5 : 1;
}

}  // namespace idempotency::detail
