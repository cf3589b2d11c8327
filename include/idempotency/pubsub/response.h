// PushResponse: what a push handler answers, independent of any HTTP library.
//
// Pub/Sub acks 102, 200, 201, 202 and 204 and nacks every other status.
//
// Thread safety: a plain value type.
#pragma once

#include <string>
#include <vector>

#include "idempotency/codec.h"
#include "idempotency/pubsub/message.h"

namespace idempotency::pubsub {

/// An HTTP response: status, headers and body.
struct PushResponse {
  int status = 200;
  std::vector<Header> headers;
  std::string body;
};

/// is_ack() says whether Pub/Sub treats `status` as an acknowledgement.
[[nodiscard]] constexpr bool is_ack(int status) noexcept {
  return status == 102 || status == 200 || status == 201 || status == 202 || status == 204;
}

}  // namespace idempotency::pubsub

namespace idempotency {

/// Codec<PushResponse> stores a whole response (status, headers, body bytes) as CBOR, so a
/// duplicate can be answered with the original response byte for byte.
template <>
struct Codec<pubsub::PushResponse> {
  /// encode() returns the CBOR bytes of `response`; any status and any header or body bytes
  /// survive, binary included.
  static std::string encode(const pubsub::PushResponse& response);
  /// decode() throws `StoreError` for bytes that are not a stored response.
  static pubsub::PushResponse decode(std::string_view bytes);
};

}  // namespace idempotency
