#include "request_guard.h"

#include <cstring>

namespace idempotency::http::detail {

namespace {

// Whether an LF in data[from, to) stands without a CR before it (memchr: vectorized).
bool has_bare_lf(const char* data, std::size_t from, std::size_t to) noexcept {
  for (std::size_t at = from; at < to;) {
    const auto* lf = static_cast<const char*>(std::memchr(data + at, '\n', to - at));
    if (lf == nullptr) return false;
    const auto i = static_cast<std::size_t>(lf - data);
    if (i == 0 || data[i - 1] != '\r') return true;
    at = i + 1;
  }
  return false;
}

}  // namespace

HeaderScan::Verdict HeaderScan::scan(std::string_view buffer, std::size_t limit) noexcept {
  // Resume a little back, so a CRLF CRLF or CRLF SP split across reads is still seen.
  const std::size_t from = scanned_ >= 3 ? scanned_ - 3 : 0;
  const char* const data = buffer.data();
  const std::size_t size = buffer.size();
  // Each CR, found by memchr (this runs over every request's header), must end a line: an LF
  // after it, then no SP or HTAB (obs-fold); a CRLF after it ends the header. The first
  // problem by position is the verdict, so the LFs before a CR's verdict are checked first.
  std::size_t end = size;  // where the verdict was reached, or where to resume
  Verdict verdict = Verdict::kNeedMore;
  for (std::size_t at = from;;) {
    const auto* cr = static_cast<const char*>(std::memchr(data + at, '\r', size - at));
    if (cr == nullptr) break;
    const auto i = static_cast<std::size_t>(cr - data);
    // The bytes that decide this CR have not all come: resume from it.
    if (i + 1 >= size ||
        (data[i + 1] == '\n' && (i + 2 >= size || (data[i + 2] == '\r' && i + 3 >= size)))) {
      end = i;
      break;
    }
    if (data[i + 1] != '\n') {
      verdict = Verdict::kBareLineEnding;
    } else if (const char next = data[i + 2]; next == '\r') {
      verdict = data[i + 3] == '\n' ? Verdict::kComplete : Verdict::kBareLineEnding;
    } else if (next == ' ' || next == '\t') {
      verdict = Verdict::kObsFold;
    }
    if (verdict != Verdict::kNeedMore) {
      end = i;
      break;
    }
    at = i + 2;
  }
  if (has_bare_lf(data, from, end)) return Verdict::kBareLineEnding;
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
