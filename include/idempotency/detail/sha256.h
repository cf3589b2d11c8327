// SHA-256 through libcrypto, computed in this one place: key fingerprints, Datastore's hashed
// key names and the gateway's request fingerprints all digest through it.
//
// Thread safety: sha256() is a pure function; a Sha256 belongs to one thread at a time.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX, so this header needs no OpenSSL header

namespace idempotency::detail {

/// The size of a SHA-256 digest in bytes.
inline constexpr std::size_t kSha256Bytes = 32;
using Sha256Digest = std::array<unsigned char, kSha256Bytes>;

/// Sha256 digests bytes fed in pieces, owning libcrypto's digest context.
class Sha256 {
 public:
  /// Sha256() starts a digest. Throws `std::bad_alloc` when libcrypto cannot allocate one.
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  /// update() feeds `bytes` to the digest. Throws `std::runtime_error` if libcrypto fails.
  Sha256& update(std::string_view bytes);

  /// finish() returns the digest of everything fed; call it once. Throws
  /// `std::runtime_error` if libcrypto fails.
  [[nodiscard]] Sha256Digest finish();

 private:
  evp_md_ctx_st* ctx_;
};

/// sha256() returns the SHA-256 digest of `bytes`. Throws like `Sha256`.
[[nodiscard]] Sha256Digest sha256(std::string_view bytes);

}  // namespace idempotency::detail
