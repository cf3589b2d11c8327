#include "test_tokens.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include <algorithm>
#include <stdexcept>

#include "idempotency/detail/base64.h"

namespace idempotency::testing {
namespace {

std::string bignum_param(EVP_PKEY* key, const char* name) {
  BIGNUM* bn = nullptr;
  if (EVP_PKEY_get_bn_param(key, name, &bn) != 1) throw std::runtime_error("get_bn_param");
  std::string bytes(static_cast<std::size_t>(BN_num_bytes(bn)), '\0');
  BN_bn2bin(bn, reinterpret_cast<unsigned char*>(bytes.data()));
  BN_free(bn);
  return bytes;
}

std::string signing_input(const nlohmann::json& header, const nlohmann::json& claims) {
  return base64url(header.dump()) + "." + base64url(claims.dump());
}

}  // namespace

std::string base64url(std::string_view bytes) {
  return idempotency::detail::base64url_encode(bytes);
}

TestKey::TestKey(unsigned bits) : key_(EVP_RSA_gen(bits), EVP_PKEY_free) {
  if (!key_) throw std::runtime_error("EVP_RSA_gen");
}

nlohmann::json TestKey::jwk(const std::string& kid) const {
  return {{"kty", "RSA"},
          {"alg", "RS256"},
          {"use", "sig"},
          {"kid", kid},
          {"n", base64url(bignum_param(key_.get(), OSSL_PKEY_PARAM_RSA_N))},
          {"e", base64url(bignum_param(key_.get(), OSSL_PKEY_PARAM_RSA_E))}};
}

std::string TestKey::sign(std::string_view input, const EVP_MD* md) const {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  std::size_t size = 0;
  if (EVP_DigestSignInit(ctx.get(), nullptr, md, nullptr, key_.get()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &size,
                     reinterpret_cast<const unsigned char*>(input.data()), input.size()) != 1) {
    throw std::runtime_error("EVP_DigestSign");
  }
  std::string signature(size, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(signature.data()), &size,
                     reinterpret_cast<const unsigned char*>(input.data()), input.size()) != 1) {
    throw std::runtime_error("EVP_DigestSign");
  }
  signature.resize(size);
  return signature;
}

std::string TestKey::public_pem() const {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  if (PEM_write_bio_PUBKEY(bio.get(), key_.get()) != 1) throw std::runtime_error("PEM");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return {data, static_cast<std::size_t>(size)};
}

std::string jwks(const std::vector<std::pair<std::string, const TestKey*>>& keys) {
  nlohmann::json set = nlohmann::json::array();
  for (const auto& [kid, key] : keys) set.push_back(key->jwk(kid));
  return nlohmann::json{{"keys", set}}.dump();
}

std::string mint(const TestKey& key, const nlohmann::json& header, const nlohmann::json& claims,
                 const EVP_MD* md) {
  const std::string input = signing_input(header, claims);
  return input + "." + base64url(key.sign(input, md != nullptr ? md : EVP_sha256()));
}

std::string mint_hs256(std::string_view secret, const nlohmann::json& header,
                       const nlohmann::json& claims) {
  const std::string input = signing_input(header, claims);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac, &size);
  return input + "." + base64url(std::string_view(reinterpret_cast<const char*>(mac), size));
}

std::string mint_unsigned(const nlohmann::json& header, const nlohmann::json& claims) {
  return signing_input(header, claims) + ".";
}

pubsub::PushRequest bearer_request(const std::string& token) {
  pubsub::PushRequest request;
  request.headers.push_back({"Content-Type", "application/json"});
  request.headers.push_back({"Authorization", "Bearer " + token});
  request.body = R"({"message":{"data":"","messageId":"1"},"subscription":"s"})";
  return request;
}

}  // namespace idempotency::testing
