#include "idempotency/detail/sip_hash.h"

#include <openssl/rand.h>

#include <array>
#include <cstring>

#include "idempotency/errors.h"

namespace idempotency::detail {

SipKey random_sip_key() {
  std::array<unsigned char, sizeof(SipKey)> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    throw Error("hash key: the system random generator failed");
  }
  SipKey key;
  std::memcpy(&key.k0, bytes.data(), sizeof key.k0);
  std::memcpy(&key.k1, bytes.data() + sizeof key.k0, sizeof key.k1);
  return key;
}

}  // namespace idempotency::detail
