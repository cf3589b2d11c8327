// detail::Sha256 / sha256(): the one SHA-256 of the library matches the standard's vectors,
// fed whole or in pieces.
#include "idempotency/detail/sha256.h"

#include <gtest/gtest.h>

#include <string>

#include "idempotency/detail/hex.h"
#include "idempotency/key.h"

namespace idempotency::testing {
namespace {

std::string hex(const detail::Sha256Digest& digest) {
  return detail::to_hex(digest.data(), digest.size());
}

TEST(Sha256, MatchesTheStandardVectors) {
  EXPECT_EQ(hex(detail::sha256("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(detail::sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, PiecesDigestLikeTheWhole) {
  detail::Sha256 digest;
  digest.update("a").update("").update("bc");
  EXPECT_EQ(digest.finish(), detail::sha256("abc"));
}

TEST(Sha256, KeyFingerprintIsThePrefixOfTheKeysDigest) {
  EXPECT_EQ(key_fingerprint("abc"), "ba7816bf8f01");
}

}  // namespace
}  // namespace idempotency::testing
