#include "request_guard.h"

#include <cstring>

namespace idempotency::http::detail {

HeaderScan::Verdict HeaderScan::scan(std::string_view buffer) noexcept {
  // Resume a little back, so a CRLF CRLF or CRLF SP split across reads is still seen.
  const std::size_t from = scanned_ >= 3 ? scanned_ - 3 : 0;
  const char* const data = buffer.data();
  const std::size_t size = buffer.size();
  // Each CR, found by memchr (vectorized: this runs over every request's header), must end a
  // line: an LF after it, then no SP or HTAB (obs-fold); a CRLF after it ends the header.
  std::size_t end = size;  // where the header ends, or how far it is known to be sound
  bool complete = false;
  for (std::size_t at = from;;) {
    const auto* cr = static_cast<const char*>(std::memchr(data + at, '\r', size - at));
    if (cr == nullptr) break;
    const auto i = static_cast<std::size_t>(cr - data);
    if (i + 1 >= size || (data[i + 1] == '\n' && i + 2 >= size)) {
      end = i;  // what follows is on its way
      break;
    }
    if (data[i + 1] != '\n') return Verdict::kBareLineEnding;
    const char next = data[i + 2];
    if (next == '\r') {
      if (i + 3 >= size) {
        end = i;
        break;
      }
      if (data[i + 3] != '\n') return Verdict::kBareLineEnding;
      end = i + 4;
      complete = true;
      break;
    }
    if (next == ' ' || next == '\t') return Verdict::kObsFold;
    at = i + 2;
  }
  // And every LF up to there must follow a CR.
  for (std::size_t at = from; at < end;) {
    const auto* lf = static_cast<const char*>(std::memchr(data + at, '\n', end - at));
    if (lf == nullptr) break;
    const auto i = static_cast<std::size_t>(lf - data);
    if (i == 0 || data[i - 1] != '\r') return Verdict::kBareLineEnding;
    at = i + 1;
  }
  if (complete) return Verdict::kComplete;
  scanned_ = end;
  return Verdict::kNeedMore;
}

}  // namespace idempotency::http::detail
