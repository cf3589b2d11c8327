#include "idempotency/key.h"

#include <openssl/evp.h>

#include <array>
#include <cstdio>
#include <stdexcept>

namespace idempotency {

void validate_key(std::string_view key) {
  if (key.empty()) throw std::invalid_argument("idempotency key is empty");
  if (key.size() > kMaxKeyBytes) {
    throw std::invalid_argument("idempotency key is " + std::to_string(key.size()) +
                                " bytes; the limit is " + std::to_string(kMaxKeyBytes));
  }
}

std::string key_fingerprint(std::string_view key) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  if (EVP_Digest(key.data(), key.size(), digest.data(), &length, EVP_sha256(), nullptr) != 1) {
    return "unhashable";  // never fall back to the key itself
  }
  std::string out;
  for (unsigned int i = 0; i < 6; ++i) {
    std::array<char, 3> hex{};
    std::snprintf(hex.data(), hex.size(), "%02x", digest[i]);
    out.append(hex.data(), 2);
  }
  return out;
}

}  // namespace idempotency
