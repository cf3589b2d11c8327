// Base64 encoding by OpenSSL's encoder: the standard alphabet with padding (Pub/Sub's
// `message.data`, HTTP Basic) and the unpadded URL-safe one (JWTs, JWKs). One copy for the
// library, its tools and its tests; decoding, which must refuse bad input its own way, stays
// with each reader.
//
// Thread safety: pure functions.
#pragma once

#include <openssl/evp.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

namespace idempotency::detail {

/// base64_encode() returns `bytes` in standard base64 (RFC 4648 §4) with padding.
[[nodiscard]] inline std::string base64_encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

/// base64url_encode() returns `bytes` in the URL-safe alphabet (RFC 4648 §5) without padding.
[[nodiscard]] inline std::string base64url_encode(std::string_view bytes) {
  std::string out = base64_encode(bytes);
  while (!out.empty() && out.back() == '=') out.pop_back();
  std::replace(out.begin(), out.end(), '+', '-');
  std::replace(out.begin(), out.end(), '/', '_');
  return out;
}

}  // namespace idempotency::detail
