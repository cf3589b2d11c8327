// The URL-safe encoder, a table of our own, against OpenSSL's standard one made URL-safe (what it
// was until the table replaced it) and against RFC 4648's vectors.
#include "idempotency/detail/base64.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <string>

namespace idempotency::detail {
namespace {

TEST(Base64Url, EveryLengthAndByteAsOpenSslsEncoderMadeUrlSafe) {
  for (std::size_t size = 0; size <= 70; ++size) {
    std::string bytes(size, '\0');
    for (std::size_t i = 0; i < size; ++i)
      bytes[i] = static_cast<char>((i * 37 + size * 11) & 0xff);
    std::string expected = base64_encode(bytes);
    expected.erase(expected.find_last_not_of('=') + 1);
    std::replace(expected.begin(), expected.end(), '+', '-');
    std::replace(expected.begin(), expected.end(), '/', '_');
    std::string out(base64_buffer_size(size), 'x');
    const std::size_t n = base64url_encode_into(out.data(), bytes);
    EXPECT_EQ(out.substr(0, n), expected) << size << " bytes";
    EXPECT_EQ(out[n], '\0') << size << " bytes";
    EXPECT_EQ(base64url_encode(bytes), expected) << size << " bytes";
  }
}

TEST(Base64Url, Rfc4648VectorsWithoutPadding) {
  EXPECT_EQ(base64url_encode(""), "");
  EXPECT_EQ(base64url_encode("f"), "Zg");
  EXPECT_EQ(base64url_encode("fo"), "Zm8");
  EXPECT_EQ(base64url_encode("foo"), "Zm9v");
  EXPECT_EQ(base64url_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64url_encode("\xfb\xff"), "-_8");
}

}  // namespace
}  // namespace idempotency::detail
