#include "idempotency/key.h"

#include <exception>
#include <stdexcept>

#include "idempotency/detail/hex.h"
#include "idempotency/detail/sha256.h"

namespace idempotency {

bool is_blank_key(std::string_view key) noexcept {
  // kBlankKeyBytes by their values (SP, and HTAB to CR): a key is judged three times a push,
  // and find_first_not_of() costs a memchr over the set for each byte.
  static_assert(kBlankKeyBytes == " \t\n\v\f\r");
  for (const char c : key) {
    if (c != ' ' && (c < '\t' || c > '\r')) return false;
  }
  return true;
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
  try {
    const detail::Sha256Digest digest = detail::sha256(key);
    return detail::to_hex(digest.data(), 6);
  } catch (const std::runtime_error&) {
    return "unhashable";  // never fall back to the key itself
  }
}

}  // namespace idempotency
