// HTTP field syntax: the word-at-a-time value checks judge every byte as the byte table does.
#include "idempotency/detail/field_syntax.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <string>

namespace idempotency::detail {
namespace {

// Every byte value at every place of a value long enough to be read a block at a time (16
// bytes, or 8) and then byte by byte: a value is good exactly when each of its bytes is in
// kValueChars, and skip_field_value() stops exactly at the first that is not.
TEST(FieldSyntax, AValueIsGoodExactlyWhenEveryByteIs) {
  for (int byte = 0; byte < 256; ++byte) {
    const bool allowed = kValueChars[static_cast<std::size_t>(byte)];
    for (std::size_t place = 0; place < 41; ++place) {
      std::string value(41, 'v');
      value[place] = static_cast<char>(byte);
      ASSERT_EQ(is_field_value(value), allowed) << "byte " << byte << " at " << place;
      ASSERT_EQ(skip_field_value(value, 0), allowed ? value.size() : place)
          << "byte " << byte << " at " << place;
      // From inside a line, as a value is read after its field's name.
      const std::string line = "Name:" + value;
      ASSERT_EQ(skip_field_value(line, 5), allowed ? line.size() : 5 + place)
          << "byte " << byte << " at " << place;
    }
  }
  EXPECT_TRUE(is_field_value(""));
  EXPECT_TRUE(is_field_value("Bearer a.b.c\tx"));
  EXPECT_FALSE(is_field_value("a\r\nX-Idempotency-Fence: 9"));
}

}  // namespace
}  // namespace idempotency::detail
