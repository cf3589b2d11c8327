#include "base64.h"

#include <openssl/evp.h>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace idempotency::pubsub::internal {
namespace {

struct EncodeCtxDeleter {
  void operator()(EVP_ENCODE_CTX* ctx) const noexcept { EVP_ENCODE_CTX_free(ctx); }
};
using EncodeCtxPtr = std::unique_ptr<EVP_ENCODE_CTX, EncodeCtxDeleter>;

// EVP_DecodeUpdate takes an int length; feed it bounded chunks so any body size is safe.
constexpr std::size_t kChunk = 1 << 20;

// What a byte is to base64 text, by table: where a text is read a byte at a time (a block that
// is not all digits, the last short one), a lookup instead of a chain of comparisons.
enum Kind : std::uint8_t { kDigit = 0, kPadding = 1, kSpace = 2, kOther = 4 };

constexpr std::array<std::uint8_t, 256> kKinds = [] {
  std::array<std::uint8_t, 256> kinds{};
  kinds.fill(kOther);
  for (int c = 'A'; c <= 'Z'; ++c) kinds[static_cast<std::size_t>(c)] = kDigit;
  for (int c = 'a'; c <= 'z'; ++c) kinds[static_cast<std::size_t>(c)] = kDigit;
  for (int c = '0'; c <= '9'; ++c) kinds[static_cast<std::size_t>(c)] = kDigit;
  kinds['+'] = kDigit;
  kinds['/'] = kDigit;
  kinds['='] = kPadding;
  for (const char c : std::string_view(" \t\r\n")) kinds[static_cast<unsigned char>(c)] = kSpace;
  return kinds;
}();

Kind kind_of(char c) { return static_cast<Kind>(kKinds[static_cast<unsigned char>(c)]); }

// How many bytes from the start of `text` are digits, in whole blocks of 16: the common case
// (nearly all of `message.data`, most of a push's bytes), judged a block at a time. With SSE2,
// which every x86-64 has, under 2 instructions a byte, where comparing a byte at a time cost
// 19 (bench/push_path.sh, a 4 KiB message); with AVX2, where the CPU has it, 32 bytes a step
// and half that again; elsewhere by the table.
constexpr std::size_t kBlock = 16;

#if defined(__SSE2__)
// Which of the 16 bytes are digits (0xff) and which are not (0): a byte is within [low, low +
// span] when (byte - low), as unsigned, saturates to 0 past span.
__m128i digit_mask(__m128i bytes) {
  const auto within = [bytes](char low, char span) {
    const __m128i offset = _mm_sub_epi8(bytes, _mm_set1_epi8(low));
    return _mm_cmpeq_epi8(_mm_subs_epu8(offset, _mm_set1_epi8(span)), _mm_setzero_si128());
  };
  return _mm_or_si128(
      _mm_or_si128(within('A', 25), within('a', 25)),
      _mm_or_si128(within('0', 9), _mm_or_si128(_mm_cmpeq_epi8(bytes, _mm_set1_epi8('+')),
                                                _mm_cmpeq_epi8(bytes, _mm_set1_epi8('/')))));
}

#if defined(__x86_64__) && defined(__GNUC__)
#define IDEMPOTENCY_BASE64_AVX2 1
// The AVX2 functions are compiled for it alone (the build targets every x86-64) and called only
// where the CPU has it. digit_mask() at twice the width, with the same instructions:
__attribute__((target("avx2"))) __m256i within_avx2(__m256i bytes, char low, char span) {
  const __m256i offset = _mm256_sub_epi8(bytes, _mm256_set1_epi8(low));
  return _mm256_cmpeq_epi8(_mm256_subs_epu8(offset, _mm256_set1_epi8(span)),
                           _mm256_setzero_si256());
}

__attribute__((target("avx2"))) __m256i digit_mask_avx2(__m256i bytes) {
  return _mm256_or_si256(
      _mm256_or_si256(within_avx2(bytes, 'A', 25), within_avx2(bytes, 'a', 25)),
      _mm256_or_si256(within_avx2(bytes, '0', 9),
                      _mm256_or_si256(_mm256_cmpeq_epi8(bytes, _mm256_set1_epi8('+')),
                                      _mm256_cmpeq_epi8(bytes, _mm256_set1_epi8('/')))));
}

// The leading bytes of `text` in whole blocks of 32 that are all digits.
__attribute__((target("avx2"))) std::size_t digit_blocks_avx2(std::string_view text) {
  std::size_t i = 0;
  for (; text.size() - i >= 2 * kBlock; i += 2 * kBlock) {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(text.data() + i));
    if (_mm256_movemask_epi8(digit_mask_avx2(bytes)) != -1) break;
  }
  return i;
}

// Read during static initialization, which may run before libgcc's own: initialized first, as
// GCC's manual asks of a constructor, or a CPU with AVX2 could read as one without.
const bool kHasAvx2 = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0;
}();
#endif
#endif

std::size_t digit_blocks(std::string_view text) {
  std::size_t i = 0;
#if defined(__SSE2__)
#if defined(IDEMPOTENCY_BASE64_AVX2)
  // Then on by 16: the block where AVX2 stopped may start with 16 digits, and the rest is short.
  if (kHasAvx2) i = digit_blocks_avx2(text);
#endif
  for (; text.size() - i >= kBlock; i += kBlock) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(text.data() + i));
    if (_mm_movemask_epi8(digit_mask(bytes)) != 0xffff) break;
  }
#else
  for (; text.size() - i >= kBlock; i += kBlock) {
    unsigned kinds = 0;
    for (std::size_t k = 0; k < kBlock; ++k) {
      kinds |= kKinds[static_cast<unsigned char>(text[i + k])];
    }
    if (kinds != kDigit) break;
  }
#endif
  return i;
}

bool is_space(char c) { return kind_of(c) == kSpace; }

// Whether `text` holds only digits, padding and whitespace.
bool only_base64_or_space(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    i += digit_blocks(text.substr(i));
    // A block with something else in it (or the last, short one), a byte at a time.
    for (const std::size_t end = std::min(text.size(), i + kBlock); i < end; ++i) {
      if (kind_of(text[i]) == kOther) return false;
    }
  }
  return true;
}

}  // namespace

std::optional<std::string> base64_decode(std::string_view text) {
  // EVP's decoder is PEM-minded: it silently stops at '-' (the start of "-----END"), which
  // would truncate the data. Only the alphabet, padding and whitespace may reach it.
  if (!only_base64_or_space(text)) return std::nullopt;
  // One context per thread, reset per call: allocating one per message showed in the
  // gateway's profile.
  thread_local EncodeCtxPtr ctx;
  if (!ctx) ctx.reset(EVP_ENCODE_CTX_new());
  if (!ctx) return std::nullopt;
  EVP_DecodeInit(ctx.get());

  // Each update writes at most 3 bytes per 4 input bytes, counting the < 64 bytes the
  // context may hold back from the previous chunk; one buffer of that bound suffices.
  std::string out((text.size() / 4 + 17) * 3, '\0');
  auto* dst = reinterpret_cast<unsigned char*>(out.data());
  std::size_t written = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t n = std::min(kChunk, text.size() - pos);
    int produced = 0;
    const int rc = EVP_DecodeUpdate(ctx.get(), dst + written, &produced,
                                    reinterpret_cast<const unsigned char*>(text.data() + pos),
                                    static_cast<int>(n));
    if (rc < 0) return std::nullopt;
    written += static_cast<std::size_t>(produced);
    pos += n;
    if (rc == 0) {
      // The padding ended the data: whatever follows a chunk boundary must be whitespace.
      if (!std::all_of(text.begin() + static_cast<std::ptrdiff_t>(pos), text.end(), is_space)) {
        return std::nullopt;
      }
      break;
    }
  }
  int tail = 0;
  if (EVP_DecodeFinal(ctx.get(), dst + written, &tail) != 1) return std::nullopt;
  written += static_cast<std::size_t>(tail);
  out.resize(written);
  return out;
}

bool base64_valid(std::string_view text) noexcept {
  // What EVP's decoder, given only the characters base64_decode() lets through, accepts:
  // whitespace skipped, the rest whole groups of four, padding ('=', at most two) only at the
  // very end. parse_test holds the two to the same verdicts on random text.
  std::size_t digits = 0;
  std::size_t padding = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    // Blocks of digits alone are counted whole; a digit after padding is refused below.
    if (padding == 0) {
      const std::size_t run = digit_blocks(text.substr(i));
      digits += run;
      i += run;
    }
    // A block with something else in it (or the last, short one), a byte at a time.
    for (const std::size_t end = std::min(text.size(), i + kBlock); i < end; ++i) {
      switch (kind_of(text[i])) {
        case kDigit:
          if (padding > 0) return false;
          ++digits;
          break;
        case kPadding:
          ++padding;
          break;
        case kSpace:
          break;
        default:
          return false;
      }
    }
  }
  return (digits + padding) % 4 == 0 && padding <= 2;
}

}  // namespace idempotency::pubsub::internal
