// Test-only token minting: RSA keys, JWKS documents and signed JWTs, by OpenSSL directly.
#pragma once

#include <openssl/types.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "idempotency/pubsub/message.h"

namespace idempotency::testing {

/// base64url() encodes without padding, as JWS does.
std::string base64url(std::string_view bytes);

/// An RSA key pair that signs test tokens.
class TestKey {
 public:
  /// TestKey() generates a fresh RSA key of `bits` bits.
  explicit TestKey(unsigned bits = 2048);

  /// jwk() returns the public JWK (`kty`, `alg`, `use`, `kid`, `n`, `e`).
  [[nodiscard]] nlohmann::json jwk(const std::string& kid) const;
  /// sign() returns the PKCS#1 v1.5 signature of `input` with digest `md`.
  [[nodiscard]] std::string sign(std::string_view input, const EVP_MD* md) const;
  /// public_pem() returns the SubjectPublicKeyInfo PEM of the public key.
  [[nodiscard]] std::string public_pem() const;

 private:
  std::shared_ptr<EVP_PKEY> key_;
};

/// jwks() builds a JWKS document holding `keys` (kid, key).
std::string jwks(const std::vector<std::pair<std::string, const TestKey*>>& keys);

/// mint() encodes `header` and `claims` and signs them with `key` and `md` (RS256 by default).
std::string mint(const TestKey& key, const nlohmann::json& header, const nlohmann::json& claims,
                 const EVP_MD* md = nullptr);

/// mint_hs256() encodes `header` and `claims` and MACs them with HMAC-SHA256 under `secret`.
std::string mint_hs256(std::string_view secret, const nlohmann::json& header,
                       const nlohmann::json& claims);

/// mint_unsigned() encodes `header` and `claims` with an empty signature (`alg: none`).
std::string mint_unsigned(const nlohmann::json& header, const nlohmann::json& claims);

/// bearer_request() returns a push request carrying `Authorization: Bearer <token>`.
pubsub::PushRequest bearer_request(const std::string& token);

}  // namespace idempotency::testing
