#include "request_guard.h"

namespace idempotency::http::detail {

HeaderScan::Verdict HeaderScan::scan(std::string_view buffer) noexcept {
  // Resume a little back, so a CRLF CRLF or CRLF SP split across reads is still seen.
  std::size_t i = scanned_ >= 3 ? scanned_ - 3 : 0;
  for (; i < buffer.size(); ++i) {
    const char c = buffer[i];
    if (c == '\n') {
      if (i == 0 || buffer[i - 1] != '\r') return Verdict::kBareLineEnding;
      continue;
    }
    if (c != '\r') continue;
    if (i + 1 >= buffer.size()) break;  // the LF may be on its way
    if (buffer[i + 1] != '\n') return Verdict::kBareLineEnding;
    if (i + 2 >= buffer.size()) break;
    const char next = buffer[i + 2];
    // An empty line ends the header; what follows is body.
    if (next == '\r') {
      if (i + 3 >= buffer.size()) break;
      if (buffer[i + 3] == '\n') return Verdict::kComplete;
      return Verdict::kBareLineEnding;
    }
    // A line that starts with whitespace continues the previous one: obs-fold.
    if (next == ' ' || next == '\t') return Verdict::kObsFold;
  }
  scanned_ = i;
  return Verdict::kNeedMore;
}

}  // namespace idempotency::http::detail
