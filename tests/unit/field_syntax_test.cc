// HTTP field syntax: the word-at-a-time value checks judge every byte as the byte table does,
// and the word-at-a-time name comparisons every pair of bytes as a byte at a time.
#include "idempotency/detail/field_syntax.h"

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "idempotency/detail/ascii.h"

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

// Every byte value at every place of a name long enough to be read a block at a time (16 bytes)
// and then byte by byte: skip_token() stops exactly at the first byte that is not in
// kTokenChars, and a name is a field name exactly when each of its bytes is.
TEST(FieldSyntax, ATokenEndsExactlyAtItsFirstByteOutsideTheTable) {
  for (int byte = 0; byte < 256; ++byte) {
    const bool allowed = kTokenChars[static_cast<std::size_t>(byte)];
    for (std::size_t place = 0; place < 41; ++place) {
      std::string name = "X-Abc_d.e!f#g$h%i&j'k*l+m^n`o|p~q0123456789";
      name.resize(41);
      name[place] = static_cast<char>(byte);
      ASSERT_EQ(is_field_name(name), allowed) << "byte " << byte << " at " << place;
      ASSERT_EQ(skip_token(name, 0), allowed ? name.size() : place)
          << "byte " << byte << " at " << place;
      const std::string line = "\r\n" + name + ": v";
      ASSERT_EQ(skip_token(line, 2), 2 + (allowed ? name.size() : place))
          << "byte " << byte << " at " << place;
    }
  }
  EXPECT_FALSE(is_field_name(""));
  EXPECT_EQ(skip_token("Host: a", 0), 4U);
}

// The rules a byte at a time, as the comparisons read before they took words.
bool iequals_bytewise(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  }
  return true;
}

bool same_field_name_bytewise(std::string_view name, std::string_view canonical) {
  if (name.size() != canonical.size()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (ascii_lower(name[i] == '_' ? '-' : name[i]) != ascii_lower(canonical[i])) return false;
  }
  return true;
}

// Every pair of bytes at every place of names of each length a word-at-a-time comparison
// reads differently (under 4 bytes, 4 to 7, one word, a word and a part, two words and more),
// the rest of the names spelled alike in mixed case: both comparisons answer as a byte at a
// time would, and so at compile time, where they compare a byte at a time.
TEST(FieldSyntax, NamesCompareAsByteAtATime) {
  static_assert(iequals_ascii("Content-Length", "content-LENGTH"));
  static_assert(!iequals_ascii("Content-Length", "Content_Length"));
  static_assert(same_field_name("Content_length", "Content-Length"));
  static_assert(!same_field_name("Content-Lengt@", "Content-Length"));
  const std::string_view spelled = "Ab-cD_eFgH-iJ_kLmNoP";
  for (const std::size_t size :
       std::array<std::size_t, 12>{1, 3, 4, 5, 7, 8, 9, 13, 14, 15, 16, 17}) {
    const std::string base(spelled.substr(0, size));
    // The other spelling: lower case, and for a field name's canonical form, dashes.
    std::string lowered = base;
    for (char& c : lowered) c = ascii_lower(c);
    std::string canonical = lowered;
    for (char& c : canonical) c = c == '_' ? '-' : c;
    for (std::size_t place = 0; place < size; ++place) {
      for (int x = 0; x < 256; ++x) {
        std::string a = base;
        a[place] = static_cast<char>(x);
        for (int y = 0; y < 256; ++y) {
          lowered[place] = static_cast<char>(y);
          canonical[place] = static_cast<char>(y);
          ASSERT_EQ(iequals_ascii(a, lowered), iequals_bytewise(a, lowered))
              << "bytes " << x << ", " << y << " at " << place << " of " << size;
          ASSERT_EQ(same_field_name(a, canonical), same_field_name_bytewise(a, canonical))
              << "bytes " << x << ", " << y << " at " << place << " of " << size;
        }
      }
      lowered[place] = ascii_lower(base[place]);
      canonical[place] = lowered[place] == '_' ? '-' : lowered[place];
    }
  }
  EXPECT_TRUE(same_field_name("x_idempotency_fence", "X-Idempotency-Fence"));
  EXPECT_FALSE(same_field_name("x-idempotency-fence", "X_Idempotency_Fence"));
  EXPECT_FALSE(iequals_ascii("Content-Length", "Content-Lengt"));
}

}  // namespace
}  // namespace idempotency::detail
