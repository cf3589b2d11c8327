// base64() for tests that build push envelopes: the library's one encoder, standard alphabet.
#pragma once

#include <string>
#include <string_view>

#include "idempotency/detail/base64.h"

namespace idempotency::testing {

inline std::string base64(std::string_view bytes) {
  return idempotency::detail::base64_encode(bytes);
}

}  // namespace idempotency::testing
