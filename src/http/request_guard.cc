#include "request_guard.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace idempotency::http::detail {

namespace {

using Verdict = HeaderScan::Verdict;

// What the CR or LF at `i` says of the header: nothing (nullopt) when it ends a line as it
// should; kNeedMore when the bytes that decide it have not all come; else the verdict there.
// An LF must follow a CR. A CR must end a line: an LF after it, then no SP or HTAB (obs-fold);
// a CRLF after it ends the header.
std::optional<Verdict> judge(const char* data, std::size_t size, std::size_t i) noexcept {
  if (data[i] == '\n') {
    if (i == 0 || data[i - 1] != '\r') return Verdict::kBareLineEnding;
    return std::nullopt;
  }
  if (i + 1 >= size ||
      (data[i + 1] == '\n' && (i + 2 >= size || (data[i + 2] == '\r' && i + 3 >= size)))) {
    return Verdict::kNeedMore;
  }
  if (data[i + 1] != '\n') return Verdict::kBareLineEnding;
  const char next = data[i + 2];
  if (next == '\r') return data[i + 3] == '\n' ? Verdict::kComplete : Verdict::kBareLineEnding;
  if (next == ' ' || next == '\t') return Verdict::kObsFold;
  return std::nullopt;
}

// The bytes line_ends() looks at in one step: two SSE2 blocks, so that a long value (a 1 KiB
// token) costs few steps.
constexpr std::size_t kStep = 32;

// Bit k set where data[k] is a CR or an LF, for `width` (at most kStep) bytes: 16 at once with
// SSE2, which every x86-64 has.
std::uint32_t line_ends(const char* data, std::size_t width) noexcept {
  std::uint32_t ends = 0;
  std::size_t k = 0;
#if defined(__SSE2__)
  for (; k + 16 <= width; k += 16) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + k));
    const auto block = static_cast<std::uint32_t>(_mm_movemask_epi8(_mm_or_si128(
        _mm_cmpeq_epi8(bytes, _mm_set1_epi8('\r')), _mm_cmpeq_epi8(bytes, _mm_set1_epi8('\n')))));
    ends |= block << k;
  }
#endif
  for (; k < width; ++k) {
    if (data[k] == '\r' || data[k] == '\n') ends |= std::uint32_t{1} << k;
  }
  return ends;
}

}  // namespace

HeaderScan::Verdict HeaderScan::scan(std::string_view buffer, std::size_t limit) noexcept {
  // Resume a little back, so a CRLF CRLF or CRLF SP split across reads is still seen.
  const std::size_t from = scanned_ >= 3 ? scanned_ - 3 : 0;
  const char* const data = buffer.data();
  const std::size_t size = buffer.size();
  // Every CR and LF in order, judged (judge()) until one decides: so the first problem by
  // position is the verdict. They are found a step at a time (line_ends()), as this runs over
  // every request's header: a memchr for each CR and for each LF cost more than the judging.
  std::optional<Verdict> found;
  std::size_t end = size;  // where the verdict was reached, or where to resume
  for (std::size_t at = from; at < size && !found;) {
    const std::size_t width = std::min(kStep, size - at);
    std::uint32_t ends = line_ends(data + at, width);
    for (; ends != 0; ends &= ends - 1) {
      const auto bit = static_cast<unsigned>(__builtin_ctz(ends));
      found = judge(data, size, at + bit);
      if (found) {
        end = at + bit;
        break;
      }
      // A CR judged so has an LF after it, which needs no judging.
      if (data[at + bit] == '\r') ends &= ~(std::uint32_t{2} << bit);
    }
    at += width;
  }
  const Verdict verdict = found.value_or(Verdict::kNeedMore);
  if (verdict == Verdict::kNeedMore) {
    scanned_ = end;
    return size > limit ? Verdict::kTooLarge : verdict;
  }
  if (verdict == Verdict::kComplete) {
    header_size_ = end + 4;  // `end` is its final CRLF CRLF's CR
    if (header_size_ > limit) return Verdict::kTooLarge;
  }
  return verdict;
}

}  // namespace idempotency::http::detail
