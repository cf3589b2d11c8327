#include "base64.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstddef>
#include <memory>

namespace idempotency::pubsub::internal {
namespace {

struct EncodeCtxDeleter {
  void operator()(EVP_ENCODE_CTX* ctx) const noexcept { EVP_ENCODE_CTX_free(ctx); }
};
using EncodeCtxPtr = std::unique_ptr<EVP_ENCODE_CTX, EncodeCtxDeleter>;

// EVP_DecodeUpdate takes an int length; feed it bounded chunks so any body size is safe.
constexpr std::size_t kChunk = 1 << 20;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

bool is_base64_digit(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
         c == '/';
}

bool is_base64_or_space(char c) { return is_base64_digit(c) || c == '=' || is_space(c); }

}  // namespace

std::optional<std::string> base64_decode(std::string_view text) {
  // EVP's decoder is PEM-minded: it silently stops at '-' (the start of "-----END"), which
  // would truncate the data. Only the alphabet, padding and whitespace may reach it.
  if (!std::all_of(text.begin(), text.end(), is_base64_or_space)) return std::nullopt;
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
  for (const char c : text) {
    if (is_space(c)) continue;
    if (c == '=') {
      ++padding;
    } else if (!is_base64_digit(c) || padding > 0) {
      return false;
    } else {
      ++digits;
    }
  }
  return (digits + padding) % 4 == 0 && padding <= 2;
}

}  // namespace idempotency::pubsub::internal
