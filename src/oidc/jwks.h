// JSON Web Key Sets: RSA signing keys parsed from JWKS text (internal to idempotency::oidc).
//
// Thread safety: pure functions; a KeySet is immutable once built and its keys may verify
// from many threads at once.
#pragma once

#include <openssl/types.h>

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

namespace idempotency::oidc::internal {

/// kMaxJwksBytes bounds a key set document; Google's is about 2 KB.
inline constexpr std::size_t kMaxJwksBytes = std::size_t{1024} * 1024;

/// A public key, shared between the cache and the verifications using it.
using PublicKey = std::shared_ptr<EVP_PKEY>;

/// Keys by `kid`.
using KeySet = std::map<std::string, PublicKey, std::less<>>;

/// rsa_public_key() builds an RSA public key from big-endian modulus and exponent bytes (the
/// decoded JWK `n` and `e`); nullptr when they make no usable key (the modulus must have
/// 2048 to 8192 bits, the exponent be odd and greater than 1).
[[nodiscard]] PublicKey rsa_public_key(std::string_view modulus, std::string_view exponent);

/// parse_jwks() reads the RSA signature keys of a JWKS document (`{"keys": [...]}`), skipping
/// keys of other types or uses, keys for another algorithm than RS256, keys without a `kid`
/// and keys it cannot build. It returns the keys, or a one-line reason naming no key content
/// when the document is not a key set or holds no usable key.
[[nodiscard]] std::variant<KeySet, std::string> parse_jwks(std::string_view text);

}  // namespace idempotency::oidc::internal
