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

/// base64_buffer_size() is how many bytes OpenSSL's encoder writes for `size` bytes: the padded
/// text and a terminating NUL.
[[nodiscard]] constexpr std::size_t base64_buffer_size(std::size_t size) {
  return 4 * ((size + 2) / 3) + 1;
}

/// base64_encode() returns `bytes` in standard base64 (RFC 4648 §4) with padding.
[[nodiscard]] inline std::string base64_encode(std::string_view bytes) {
  std::string out(base64_buffer_size(bytes.size()), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

/// base64url_encode_into() writes `bytes` in the URL-safe alphabet (RFC 4648 §5) without
/// padding to `out`, which must hold base64_buffer_size(bytes.size()) bytes, and returns how
/// many characters it wrote. It allocates nothing, for callers on a hot path.
inline std::size_t base64url_encode_into(char* out, std::string_view bytes) {
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  char* end = out + n;
  while (end != out && end[-1] == '=') --end;
  std::replace(out, end, '+', '-');
  std::replace(out, end, '/', '_');
  return static_cast<std::size_t>(end - out);
}

/// base64url_encode() returns `bytes` in the URL-safe alphabet (RFC 4648 §5) without padding.
[[nodiscard]] inline std::string base64url_encode(std::string_view bytes) {
  std::string out(base64_buffer_size(bytes.size()), '\0');
  out.resize(base64url_encode_into(out.data(), bytes));
  return out;
}

}  // namespace idempotency::detail
