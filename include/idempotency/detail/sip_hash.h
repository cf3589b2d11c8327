// sip_hash(): SipHash-c-d (Aumasson and Bernstein), a keyed 64-bit hash of a byte string, for
// the memory backend's tables and the DONE cache. Keyed with random bits per store, so that
// idempotency keys chosen by callers (message ids, HTTP headers) cannot be crafted to collide and
// turn every lookup into a scan; SipHash-1-3 is the variant Rust's HashMap and CPython use for the
// same reason.
//
// Thread safety: safe from any thread; sip_hash() is a pure function.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace idempotency::detail {

/// The 128-bit SipHash key, as two little-endian 64-bit words.
struct SipKey {
  std::uint64_t k0 = 0;
  std::uint64_t k1 = 0;
};

namespace sip_detail {

inline std::uint64_t load_le64(const char* p) noexcept {
  std::uint64_t v = 0;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

struct SipState {
  std::uint64_t v0, v1, v2, v3;
  void round() noexcept {
    v0 += v1;
    v1 = std::rotl(v1, 13);
    v1 ^= v0;
    v0 = std::rotl(v0, 32);
    v2 += v3;
    v3 = std::rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = std::rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = std::rotl(v1, 17);
    v1 ^= v2;
    v2 = std::rotl(v2, 32);
  }
  template <int kRounds>
  void absorb(std::uint64_t m) noexcept {
    v3 ^= m;
    for (int i = 0; i < kRounds; ++i) round();
    v0 ^= m;
  }
};

}  // namespace sip_detail

/// sip_hash() returns SipHash-`kCompression`-`kFinalization` of `bytes` under `key`.
template <int kCompression, int kFinalization>
[[nodiscard]] std::uint64_t sip_hash(const SipKey& key, std::string_view bytes) noexcept {
  sip_detail::SipState s{key.k0 ^ 0x736f6d6570736575ULL, key.k1 ^ 0x646f72616e646f6dULL,
                         key.k0 ^ 0x6c7967656e657261ULL, key.k1 ^ 0x7465646279746573ULL};
  const char* p = bytes.data();
  const std::size_t n = bytes.size();
  const char* const end = p + (n & ~std::size_t{7});
  for (; p != end; p += 8) s.absorb<kCompression>(sip_detail::load_le64(p));
  // The last block: the remaining 0-7 bytes, and the length's low byte on top. With 8 bytes
  // or more in all, one load of the last eight, shifted, reads the remainder.
  std::uint64_t last = static_cast<std::uint64_t>(n) << 56;
  const std::size_t rest = n & 7;
  if (rest != 0 && n >= 8) {
    last |= sip_detail::load_le64(p + rest - 8) >> (64 - 8 * rest);
  } else {
    for (std::size_t i = 0; i < rest; ++i) {
      last |= static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
    }
  }
  s.absorb<kCompression>(last);
  s.v2 ^= 0xff;
  for (int i = 0; i < kFinalization; ++i) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

/// random_sip_key() returns a key of 128 bits from OpenSSL's generator, for one table. Throws
/// `idempotency::Error` when the generator fails.
[[nodiscard]] SipKey random_sip_key();

/// sip_hash13() is SipHash-1-3, the memory backend's key hash.
[[nodiscard]] inline std::uint64_t sip_hash13(const SipKey& key, std::string_view bytes) noexcept {
  return sip_hash<1, 3>(key, bytes);
}

}  // namespace idempotency::detail
