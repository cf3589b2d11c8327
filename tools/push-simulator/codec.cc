#include "codec.h"

#include <openssl/evp.h>

#include <algorithm>

#include "base64.h"
#include "idempotency/detail/base64.h"

namespace idempotency::push_sim {

std::string base64(std::string_view bytes) { return idempotency::detail::base64_encode(bytes); }

std::string base64url(std::string_view bytes) {
  return idempotency::detail::base64url_encode(bytes);
}

std::optional<std::string> base64_decode(std::string_view text) {
  return pubsub::internal::base64_decode(text);
}

}  // namespace idempotency::push_sim
