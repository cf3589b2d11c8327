// The upstream client's fast reading of the plainest complete response, for the status-only
// (pubsub) mode: `HTTP/1.1`, a final status with a body by Content-Length, and ordinary fields,
// all of it already read. Most apps answer a push exactly so, and Beast's parser spends ~3,000
// instructions on such a response's ~150 bytes, a tenth of the gateway's work per push.
//
// It accepts only bytes that Beast's parser (Boost 1.74, basic_parser.ipp) accepts as one whole
// response and reads the same way: anything else, from an HTTP/1.0 status line, a 1xx, 204 or
// 304, Transfer-Encoding, two Content-Lengths or a list in one, an obs-fold, an Upgrade, to a
// byte it would refuse or a response not wholly here yet, is left to Beast's parser, which then
// answers or refuses it as before. A differential test holds the two to agreement.
//
// Thread safety: a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace idempotency::gateway::upstream_detail {

/// The most header bytes simple_response() reads; a larger header goes to Beast's parser, whose
/// own limit is far above it.
inline constexpr std::size_t kSimpleHeaderLimit = std::size_t{8} * 1024;

/// What simple_response() read.
struct SimpleResponse {
  int status = 0;          ///< The final status, 200 to 599 (neither 204 nor 304).
  std::size_t size = 0;    ///< The whole response's bytes, header and body: all of `bytes`.
  bool keep_alive = true;  ///< No `Connection: close`.
};

/// simple_response() reads `bytes` as exactly one whole response of the plainest form, with a
/// Content-Length of at most `body_limit`, or returns nullopt for Beast's parser to read.
[[nodiscard]] std::optional<SimpleResponse> simple_response(std::string_view bytes,
                                                            std::uint64_t body_limit) noexcept;

}  // namespace idempotency::gateway::upstream_detail
