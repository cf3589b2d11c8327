// Base64 encoding: the standard alphabet with padding (Pub/Sub's `message.data`, HTTP Basic), by
// OpenSSL's encoder, and the unpadded URL-safe one (JWTs, JWKs, claim tokens), by a table. One
// copy for the library, its tools and its tests; decoding, which must refuse bad input its own
// way, stays with each reader.
//
// Thread safety: pure functions.
#pragma once

#include <openssl/evp.h>

#include <cstddef>
#include <cstdint>
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
/// padding to `out`, which must hold base64_buffer_size(bytes.size()) bytes (the text and a
/// NUL), and returns how many characters it wrote. It allocates nothing, for callers on a hot
/// path (a claim token a claim): by a table, since OpenSSL's encoder writes the standard
/// alphabet, padded, and making that URL-safe took two more passes over it (three times the
/// cost of a token).
inline std::size_t base64url_encode_into(char* out, std::string_view bytes) noexcept {
  static constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  const auto* in = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t size = bytes.size();
  char* at = out;
  std::size_t i = 0;
  for (; i + 3 <= size; i += 3) {
    const std::uint32_t bits =
        std::uint32_t{in[i]} << 16 | std::uint32_t{in[i + 1]} << 8 | std::uint32_t{in[i + 2]};
    *at++ = kAlphabet[bits >> 18];
    *at++ = kAlphabet[(bits >> 12) & 0x3f];
    *at++ = kAlphabet[(bits >> 6) & 0x3f];
    *at++ = kAlphabet[bits & 0x3f];
  }
  if (i < size) {  // one or two bytes left: two or three characters, no padding
    const bool two = i + 2 == size;
    const std::uint32_t bits =
        std::uint32_t{in[i]} << 16 | (two ? std::uint32_t{in[i + 1]} << 8 : 0);
    *at++ = kAlphabet[bits >> 18];
    *at++ = kAlphabet[(bits >> 12) & 0x3f];
    if (two) *at++ = kAlphabet[(bits >> 6) & 0x3f];
  }
  *at = '\0';
  return static_cast<std::size_t>(at - out);
}

/// base64url_encode() returns `bytes` in the URL-safe alphabet (RFC 4648 §5) without padding.
[[nodiscard]] inline std::string base64url_encode(std::string_view bytes) {
  std::string out(base64_buffer_size(bytes.size()), '\0');
  out.resize(base64url_encode_into(out.data(), bytes));
  return out;
}

}  // namespace idempotency::detail
