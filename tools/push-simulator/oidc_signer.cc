#include "oidc_signer.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/rsa.h>

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "codec.h"

namespace idempotency::push_sim {
namespace {

constexpr const char* kKeyId = "pubsub-push-sim";

std::string bignum_param(EVP_PKEY* key, const char* name) {
  BIGNUM* bn = nullptr;
  if (EVP_PKEY_get_bn_param(key, name, &bn) != 1) {
    throw std::runtime_error("OIDC key: cannot read the public key");
  }
  std::string bytes(static_cast<std::size_t>(BN_num_bytes(bn)), '\0');
  BN_bn2bin(bn, reinterpret_cast<unsigned char*>(bytes.data()));
  BN_free(bn);
  return bytes;
}

std::string sign(EVP_PKEY* key, const std::string& input) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  std::size_t size = 0;
  const auto* data = reinterpret_cast<const unsigned char*>(input.data());
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &size, data, input.size()) != 1) {
    throw std::runtime_error("OIDC token: RS256 signing failed");
  }
  std::string signature(size, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(signature.data()), &size, data,
                     input.size()) != 1) {
    throw std::runtime_error("OIDC token: RS256 signing failed");
  }
  signature.resize(size);
  return signature;
}

}  // namespace

OidcSigner::OidcSigner(std::string audience, std::string email)
    : key_(EVP_RSA_gen(2048), EVP_PKEY_free),
      audience_(std::move(audience)),
      email_(std::move(email)) {
  if (!key_) throw std::runtime_error("OIDC key: RSA key generation failed");
}

std::string OidcSigner::jwks() const {
  const nlohmann::json key{{"kty", "RSA"},
                           {"alg", "RS256"},
                           {"use", "sig"},
                           {"kid", kKeyId},
                           {"n", base64url(bignum_param(key_.get(), OSSL_PKEY_PARAM_RSA_N))},
                           {"e", base64url(bignum_param(key_.get(), OSSL_PKEY_PARAM_RSA_E))}};
  return nlohmann::json{{"keys", nlohmann::json::array({key})}}.dump();
}

const std::string& OidcSigner::token(std::chrono::system_clock::time_point now) {
  if (!token_.empty() && now - minted_ < std::chrono::minutes(30)) return token_;
  const auto iat = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  const nlohmann::json header{{"alg", "RS256"}, {"kid", kKeyId}, {"typ", "JWT"}};
  const nlohmann::json claims{{"iss", "https://accounts.google.com"},
                              {"aud", audience_},
                              {"azp", "pubsub-push-sim"},
                              {"sub", "pubsub-push-sim"},
                              {"email", email_},
                              {"email_verified", true},
                              {"iat", iat},
                              {"exp", iat + 3600}};
  const std::string input = base64url(header.dump()) + "." + base64url(claims.dump());
  token_ = input + "." + base64url(sign(key_.get(), input));
  minted_ = now;
  return token_;
}

}  // namespace idempotency::push_sim
