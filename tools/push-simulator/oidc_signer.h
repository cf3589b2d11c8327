// OidcSigner: Pub/Sub's push authentication with a key of the run's own: RS256 tokens with
// Google's issuer, the configured audience and service-account email, and the JWKS a verifier
// needs to accept them.
//
// Thread safety: not thread-safe (the simulator uses it from its one event loop).
#pragma once

#include <openssl/evp.h>

#include <chrono>
#include <memory>
#include <string>

namespace idempotency::push_sim {

/// OidcSigner holds a fresh RSA-2048 key and mints tokens with it.
class OidcSigner {
 public:
  /// OidcSigner() makes the key. Throws std::runtime_error if OpenSSL cannot.
  OidcSigner(std::string audience, std::string email);

  /// jwks() is the JSON Web Key Set with the public key (kid "pubsub-push-sim").
  [[nodiscard]] std::string jwks() const;

  /// token() is a token valid for an hour from when it was minted; it is minted again once
  /// half of that has passed, as Pub/Sub reuses a token for a while.
  [[nodiscard]] const std::string& token(std::chrono::system_clock::time_point now);

 private:
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key_;
  std::string audience_;
  std::string email_;
  std::string token_;
  std::chrono::system_clock::time_point minted_{};
};

}  // namespace idempotency::push_sim
