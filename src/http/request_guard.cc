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

HeaderScan::Verdict HeaderScan::scan(std::string_view buffer) noexcept {
  // Resume a little back, so a CRLF CRLF or CRLF SP split across reads is still seen.
  const std::size_t from = scanned_ >= 3 ? scanned_ - 3 : 0;
  const char* const data = buffer.data();
  const std::size_t size = buffer.size();
  // Each CR, found by memchr (this runs over every request's header), must end a line: an LF
  // after it, then no SP or HTAB (obs-fold); a CRLF after it ends the header. The first
  // problem by position is the verdict, so the LFs before a CR's verdict are checked first.
  for (std::size_t at = from;;) {
    const auto* cr = static_cast<const char*>(std::memchr(data + at, '\r', size - at));
    if (cr == nullptr) break;
    const auto i = static_cast<std::size_t>(cr - data);
    if (i + 2 >= size && (i + 1 >= size || data[i + 1] == '\n')) {
      if (has_bare_lf(data, from, i)) return Verdict::kBareLineEnding;
      scanned_ = i;  // what follows is on its way
      return Verdict::kNeedMore;
    }
    Verdict verdict = Verdict::kNeedMore;
    if (data[i + 1] != '\n') {
      verdict = Verdict::kBareLineEnding;
    } else if (const char next = data[i + 2]; next == '\r') {
      if (i + 3 >= size) {
        if (has_bare_lf(data, from, i)) return Verdict::kBareLineEnding;
        scanned_ = i;
        return Verdict::kNeedMore;
      }
      verdict = data[i + 3] == '\n' ? Verdict::kComplete : Verdict::kBareLineEnding;
    } else if (next == ' ' || next == '\t') {
      verdict = Verdict::kObsFold;
    }
    if (verdict != Verdict::kNeedMore) {
      return has_bare_lf(data, from, i) ? Verdict::kBareLineEnding : verdict;
    }
    at = i + 2;
  }
  if (has_bare_lf(data, from, size)) return Verdict::kBareLineEnding;
  scanned_ = size;
  return Verdict::kNeedMore;
}

}  // namespace idempotency::http::detail
