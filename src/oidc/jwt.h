// JWT compact serialization: base64url decoding, splitting and RS256 signature checks
// (internal to idempotency::oidc). Claims are judged by the verifier, not here.
//
// Thread safety: pure functions; verify_rs256() only reads the key, which OpenSSL allows from
// many threads at once.
#pragma once

#include <openssl/types.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace idempotency::oidc::internal {

/// kMaxTokenBytes bounds the token text before any decoding; Google's tokens are about 1 KB.
inline constexpr std::size_t kMaxTokenBytes = std::size_t{16} * 1024;

/// base64url_decode() decodes unpadded base64url (RFC 4648 §5, as JWS writes it) by OpenSSL's
/// EVP_DecodeBlock; nothing when `text` holds padding, whitespace, the standard alphabet's
/// `+` `/`, or a length no encoding produces.
[[nodiscard]] std::optional<std::string> base64url_decode(std::string_view text);

/// A JWT split into its parts and decoded; the signature is not checked yet.
struct Jwt {
  /// `header.payload` exactly as received: the bytes the signature covers.
  std::string_view signing_input;
  nlohmann::json header;  ///< A JSON object.
  nlohmann::json claims;  ///< A JSON object.
  std::string signature;  ///< The raw signature bytes.
};

/// parse_jwt() splits a compact JWS into three base64url segments and decodes a JSON object
/// header and claims set; nothing when the token is malformed in any way. The result views
/// `token`, which must outlive it.
[[nodiscard]] std::optional<Jwt> parse_jwt(std::string_view token);

/// verify_rs256() checks an RSASSA-PKCS1-v1_5 SHA-256 signature of `signing_input` by `key`.
[[nodiscard]] bool verify_rs256(EVP_PKEY* key, std::string_view signing_input,
                                std::string_view signature);

}  // namespace idempotency::oidc::internal
