// The server's fast reading of the plainest whole request: `HTTP/1.1`, a body by
// Content-Length (or none) already received whole, and ordinary fields. Nearly every push is
// exactly so, and Beast's parser spends ~3,000 instructions on such a request's header, a
// tenth of the gateway's work per push.
//
// It accepts only bytes that the server's strict reading (request_guard.h's HeaderScan, then
// Beast's request parser, Boost 1.74) accepts as one whole request and reads the same way: the
// same method, target, fields in order, body and keep-alive. Anything else, from HTTP/1.0, a
// Transfer-Encoding, two Content-Lengths, an Expect or an Upgrade, to a byte Beast would refuse,
// a header over the limit or a body not wholly here yet, is left to the strict reading, which
// then answers or refuses it as before. A differential test holds the two to agreement.
//
// Thread safety: a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "idempotency/pubsub/message.h"

namespace idempotency::http::detail {

/// What simple_request() read.
struct SimpleRequest {
  pubsub::PushRequest request;  ///< Method, target, every field in order, the body.
  std::size_t size = 0;         ///< The request's bytes, header and body: what it used.
  bool keep_alive = true;       ///< No `Connection: close`.
};

/// simple_request() reads the start of `bytes` as one whole request of the plainest form, its
/// header at most `header_limit` bytes and its Content-Length at most `body_limit`, or returns
/// nullopt for the strict reading. Bytes after the request (a pipelined next one) are left.
[[nodiscard]] std::optional<SimpleRequest> simple_request(std::string_view bytes,
                                                          std::size_t header_limit,
                                                          std::uint64_t body_limit);

}  // namespace idempotency::http::detail
