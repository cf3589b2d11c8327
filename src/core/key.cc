#include "idempotency/key.h"

#include <openssl/evp.h>

#include <array>
#include <stdexcept>

#include "idempotency/detail/hex.h"

namespace idempotency {

bool is_blank_key(std::string_view key) noexcept {
  return key.find_first_not_of(kBlankKeyBytes) == std::string_view::npos;
}

void validate_key(std::string_view key) {
  if (key.empty()) throw std::invalid_argument("idempotency key is empty");
  if (is_blank_key(key)) throw std::invalid_argument("idempotency key is blank (only whitespace)");
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
  return detail::to_hex(digest.data(), 6);
}

}  // namespace idempotency
