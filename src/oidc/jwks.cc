#include "jwks.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>

#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "jwt.h"

namespace idempotency::oidc::internal {
namespace {

struct BnDeleter {
  void operator()(BIGNUM* bn) const noexcept { BN_free(bn); }
};
using BnPtr = std::unique_ptr<BIGNUM, BnDeleter>;

struct ParamBldDeleter {
  void operator()(OSSL_PARAM_BLD* bld) const noexcept { OSSL_PARAM_BLD_free(bld); }
};
using ParamBldPtr = std::unique_ptr<OSSL_PARAM_BLD, ParamBldDeleter>;

struct ParamDeleter {
  void operator()(OSSL_PARAM* params) const noexcept { OSSL_PARAM_free(params); }
};
using ParamPtr = std::unique_ptr<OSSL_PARAM, ParamDeleter>;

struct PkeyCtxDeleter {
  void operator()(EVP_PKEY_CTX* ctx) const noexcept { EVP_PKEY_CTX_free(ctx); }
};
using PkeyCtxPtr = std::unique_ptr<EVP_PKEY_CTX, PkeyCtxDeleter>;

// Below 2048 bits a key is forgeable in practice; above 8192 each check gets slow enough to
// make verification a denial-of-service lever.
constexpr int kMinModulusBits = 2048;
constexpr int kMaxModulusBits = 8192;
constexpr int kMaxExponentBits = 64;
// A key set with more keys than this is not Google's; keep the cache small regardless.
constexpr std::size_t kMaxKeys = 64;

BnPtr to_bignum(std::string_view bytes) {
  return BnPtr(BN_bin2bn(reinterpret_cast<const unsigned char*>(bytes.data()),
                         static_cast<int>(bytes.size()), nullptr));
}

// The string member `name` of `object`, or nothing when absent or not a string.
std::optional<std::string> string_member(const nlohmann::json& object, const char* name) {
  const auto it = object.find(name);
  if (it == object.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

// A key is usable when it is RSA, for signatures, for RS256 (or no algorithm named), and
// comes with a kid and a modulus and exponent that build.
std::optional<std::pair<std::string, PublicKey>> parse_key(const nlohmann::json& jwk) {
  if (!jwk.is_object()) return std::nullopt;
  if (string_member(jwk, "kty") != "RSA") return std::nullopt;
  if (jwk.contains("use") && string_member(jwk, "use") != "sig") return std::nullopt;
  if (jwk.contains("alg") && string_member(jwk, "alg") != "RS256") return std::nullopt;
  std::optional<std::string> kid = string_member(jwk, "kid");
  std::optional<std::string> n = string_member(jwk, "n");
  std::optional<std::string> e = string_member(jwk, "e");
  if (!kid || kid->empty() || !n || !e) return std::nullopt;
  std::optional<std::string> modulus = base64url_decode(*n);
  std::optional<std::string> exponent = base64url_decode(*e);
  if (!modulus || !exponent) return std::nullopt;
  PublicKey key = rsa_public_key(*modulus, *exponent);
  if (!key) return std::nullopt;
  return std::make_pair(std::move(*kid), std::move(key));
}

}  // namespace

PublicKey rsa_public_key(std::string_view modulus, std::string_view exponent) {
  if (modulus.size() > kMaxModulusBits / 8 + 1 || exponent.size() > kMaxExponentBits / 8) {
    return nullptr;
  }
  BnPtr n = to_bignum(modulus);
  BnPtr e = to_bignum(exponent);
  if (!n || !e) return nullptr;
  const int bits = BN_num_bits(n.get());
  if (bits < kMinModulusBits || bits > kMaxModulusBits) return nullptr;
  if (!BN_is_odd(e.get()) || BN_is_one(e.get())) return nullptr;

  ParamBldPtr bld(OSSL_PARAM_BLD_new());
  if (!bld || OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_N, n.get()) != 1 ||
      OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_E, e.get()) != 1) {
    return nullptr;
  }
  ParamPtr params(OSSL_PARAM_BLD_to_param(bld.get()));
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_name(nullptr, "RSA", nullptr));
  if (!params || !ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1) return nullptr;
  EVP_PKEY* raw = nullptr;
  if (EVP_PKEY_fromdata(ctx.get(), &raw, EVP_PKEY_PUBLIC_KEY, params.get()) != 1) {
    return nullptr;
  }
  return PublicKey(raw, EVP_PKEY_free);
}

std::variant<KeySet, std::string> parse_jwks(std::string_view text) {
  if (text.size() > kMaxJwksBytes) return std::string("key set too large");
  const nlohmann::json document = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) return std::string("key set is not JSON");
  const auto keys = document.is_object() ? document.find("keys") : document.end();
  if (keys == document.end() || !keys->is_array()) {
    return std::string("key set has no keys array");
  }
  KeySet set;
  for (const nlohmann::json& jwk : *keys) {
    if (set.size() == kMaxKeys) break;
    if (auto key = parse_key(jwk)) set.insert(std::move(*key));
  }
  if (set.empty()) return std::string("key set has no usable RS256 key");
  return set;
}

}  // namespace idempotency::oidc::internal
