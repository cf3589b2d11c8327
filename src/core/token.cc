#include "token.h"

#include <openssl/rand.h>

#include <array>

#include "idempotency/detail/hex.h"
#include "idempotency/errors.h"

namespace idempotency::detail {

std::string new_claim_token() {
  std::array<unsigned char, 16> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    throw Error("claim token: the system random generator failed");
  }
  return to_hex(bytes.data(), bytes.size());
}

}  // namespace idempotency::detail
