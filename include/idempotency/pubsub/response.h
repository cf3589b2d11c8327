// PushResponse: what a push handler answers, independent of any HTTP library.
//
// Pub/Sub acks 102, 200, 201, 202 and 204 and nacks every other status.
//
// Thread safety: a plain value type.
#pragma once

#include <string>
#include <vector>

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
