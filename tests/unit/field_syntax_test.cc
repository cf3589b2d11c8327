// HTTP field syntax: the word-at-a-time value checks judge every byte as the byte table does,
// and the word-at-a-time name comparisons every pair of bytes as a byte at a time.
#include "idempotency/detail/field_syntax.h"

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

// Names of every length to 40 (so the short ones judged as overlapping words, 4 to 15 bytes,
// and every mix of blocks and bytes above), every byte value at every place: a name is a field
// name exactly when each of its bytes is in kTokenChars, as a byte at a time says.
TEST(FieldSyntax, ANameOfEveryLengthIsATokenExactlyWhenEveryByteIs) {
  const std::string_view spelled = "Content-Length-0123456789-abcdefghij-XYZ!";
  for (std::size_t size = 1; size <= 40; ++size) {
    for (int byte = 0; byte < 256; ++byte) {
      for (std::size_t place = 0; place < size; ++place) {
        std::string name(spelled.substr(0, size));
        name[place] = static_cast<char>(byte);
        bool bytewise = true;
        for (const char c : name) bytewise = bytewise && is_token_char(c);
        ASSERT_EQ(is_field_name(name), bytewise)
            << "byte " << byte << " at " << place << " of " << size;
        ASSERT_EQ(skip_token(name, 0) == size, bytewise)
            << "byte " << byte << " at " << place << " of " << size;
      }
    }
  }
}

// The value scan a block, a word and a byte at a time: at every length to 40 (so every mix of
// 16-byte blocks, an 8-byte word and single bytes), every byte value at every place stops it
// exactly where a byte at a time would.
TEST(FieldSyntax, AValueOfEveryLengthEndsAtItsFirstByteOutsideTheTable) {
  for (std::size_t size = 1; size <= 40; ++size) {
    for (int byte = 0; byte < 256; ++byte) {
      const bool allowed = kValueChars[static_cast<std::size_t>(byte)];
      for (std::size_t place = 0; place < size; ++place) {
        std::string value(size, 'v');
        value[place] = static_cast<char>(byte);
        ASSERT_EQ(skip_field_value(value, 0), allowed ? size : place)
            << "byte " << byte << " at " << place << " of " << size;
      }
    }
  }
}

// connection_closes() as it read every value before the two common ones were settled at once:
// the list, element by element.
std::optional<bool> connection_closes_listwise(std::string_view value) {
  bool close = false;
  for (;;) {
    const auto comma = value.find(',');
    const std::string_view token = trim_ows(value.substr(0, comma));
    if (!is_field_name(token) || iequals_ascii(token, "upgrade")) return std::nullopt;
    close = close || iequals_ascii(token, "close");
    if (comma == std::string_view::npos) return close;
    value.remove_prefix(comma + 1);
  }
}

// Every byte value at every place of the common values and of lists around them: the answer
// is the list reading's.
TEST(FieldSyntax, AConnectionValueClosesAsTheListReads) {
  const std::array<std::string_view, 12> seeds = {
      "keep-alive", "Keep-Alive",        "KEEP-ALIVE",       "close",       "Close", "CLOSE",
      "upgrade",    "keep-alive, close", "close,keep-alive", " keep-alive", "cl0se", "x"};
  for (const std::string_view seed : seeds) {
    ASSERT_EQ(connection_closes(seed), connection_closes_listwise(seed)) << seed;
    for (std::size_t place = 0; place < seed.size(); ++place) {
      for (int byte = 0; byte < 256; ++byte) {
        std::string value(seed);
        value[place] = static_cast<char>(byte);
        ASSERT_EQ(connection_closes(value), connection_closes_listwise(value))
            << ::testing::PrintToString(value);
      }
    }
  }
}

// Every value of up to six bytes of SP, HTAB and a letter: read_plain_fields() hands `each`
// the value trim_ows() makes of the bytes between the colon and the CRLF, as it did when it
// trimmed them so.
TEST(FieldSyntax, AFieldsValueIsItsBytesWithoutTheirOws) {
  constexpr std::array<char, 3> kBytes = {' ', '\t', 'a'};
  std::size_t values = 1;
  for (std::size_t size = 0; size <= 6; ++size, values *= kBytes.size()) {
    for (std::size_t n = 0; n < values; ++n) {
      std::string raw;
      for (std::size_t k = 0, rest = n; k < size; ++k, rest /= kBytes.size()) {
        raw += kBytes[rest % kBytes.size()];
      }
      const std::string text = "X-A:" + raw + "\r\nX-B:" + raw + "\r\n\r\n";
      std::vector<std::string> seen;
      PlainFraming framing;
      const auto end = read_plain_fields(text, 0, framing, [&](std::string_view, auto value) {
        seen.emplace_back(value);
        return true;
      });
      ASSERT_TRUE(end) << ::testing::PrintToString(raw);
      EXPECT_EQ(*end, text.size());
      const std::vector<std::string> trimmed(2, std::string(trim_ows(raw)));
      ASSERT_EQ(seen, trimmed) << ::testing::PrintToString(raw);
    }
  }
}

}  // namespace
}  // namespace idempotency::detail
