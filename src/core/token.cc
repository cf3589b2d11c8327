#include "token.h"

#include <openssl/rand.h>

#include <array>
#include <cstdio>

#include "idempotency/errors.h"

namespace idempotency::detail {

std::string new_claim_token() {
  std::array<unsigned char, 16> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    throw Error("claim token: the system random generator failed");
  }
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) {
    std::array<char, 3> hex{};
    std::snprintf(hex.data(), hex.size(), "%02x", b);
    out.append(hex.data(), 2);
  }
  return out;
}

}  // namespace idempotency::detail
