#include "idempotency/detail/sha256.h"

#include <openssl/evp.h>

#include <new>
#include <stdexcept>

namespace idempotency::detail {
namespace {

[[noreturn]] void failed() { throw std::runtime_error("SHA-256 failed"); }

}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr) throw std::bad_alloc();
  if (EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx_);
    failed();
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

Sha256& Sha256::update(std::string_view bytes) {
  if (EVP_DigestUpdate(ctx_, bytes.data(), bytes.size()) != 1) failed();
  return *this;
}

Sha256Digest Sha256::finish() {
  Sha256Digest digest{};
  unsigned int size = 0;
  if (EVP_DigestFinal_ex(ctx_, digest.data(), &size) != 1 || size != digest.size()) failed();
  return digest;
}

Sha256Digest sha256(std::string_view bytes) {
  Sha256Digest digest{};
  unsigned int size = 0;
  // One call, no context kept: the digest of a whole buffer needs no Sha256 object.
  if (EVP_Digest(bytes.data(), bytes.size(), digest.data(), &size, EVP_sha256(), nullptr) != 1 ||
      size != digest.size()) {
    failed();
  }
  return digest;
}

}  // namespace idempotency::detail
