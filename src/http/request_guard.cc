#include "request_guard.h"

namespace idempotency::http::detail {

HeaderScan::Verdict HeaderScan::scan(std::string_view buffer) noexcept {
  // Resume three bytes back, so a CRLF CRLF or CRLF SP split across reads is still seen.
  std::size_t i = scanned_ >= 3 ? scanned_ - 3 : 0;
  for (; i + 2 < buffer.size(); ++i) {
    if (buffer[i] != '\r' || buffer[i + 1] != '\n') continue;
    const char next = buffer[i + 2];
    // An empty line ends the header; what follows is body.
    if (next == '\r') {
      if (i + 3 >= buffer.size()) break;
      if (buffer[i + 3] == '\n') return Verdict::kComplete;
      continue;  // a bare CR: Beast's parser refuses it
    }
    // A line that starts with whitespace continues the previous one: obs-fold.
    if ((next == ' ' || next == '\t') && i > 0) return Verdict::kObsFold;
  }
  scanned_ = i;
  return Verdict::kNeedMore;
}

}  // namespace idempotency::http::detail
