// The strictness Beast's request parser leaves to its user. Beast already refuses a bare CR or
// bare LF line ending, NUL and other control bytes in a field, invalid field names, and
// Content-Length together with Transfer-Encoding; it accepts obs-fold (RFC 9112 §5.2 lets a
// server refuse it, and a proxy that unfolds or forwards it lets one client smuggle a header
// past the next parser), so the raw header block is checked for it before parsing, and for
// bare line endings, which Beast refuses only once it has the whole header.
//
// Thread safety: a plain value, used by one connection at a time.
#pragma once

#include <cstddef>
#include <limits>
#include <string_view>

namespace idempotency::http::detail {

/// HeaderScan finds where a request's header block ends in a growing buffer and whether it
/// holds an obs-fold line, without rescanning bytes it has already seen.
class HeaderScan {
 public:
  enum class Verdict { kNeedMore, kComplete, kObsFold, kBareLineEnding, kTooLarge };

  /// scan() examines `buffer` (the bytes received so far for this request, from its first
  /// byte, growing between calls) and says whether the header block is complete, incomplete,
  /// or contains an obs-fold line or a bare CR or LF (refused at once: a header ended by bare
  /// LFs would otherwise never be seen to end, and wait for its deadline).
  /// A header block longer than `limit` bytes, complete or still arriving, is kTooLarge: the
  /// limit is the whole header's, whichever parser then reads it.
  [[nodiscard]] Verdict scan(std::string_view buffer,
                             std::size_t limit = std::numeric_limits<std::size_t>::max()) noexcept;

  /// header_size() is the header block's bytes, its final CRLF CRLF included, once scan()
  /// said kComplete.
  [[nodiscard]] std::size_t header_size() const noexcept { return header_size_; }

  /// reset() forgets what was scanned, for the connection's next request.
  void reset() noexcept {
    scanned_ = 0;
    header_size_ = 0;
  }

 private:
  std::size_t scanned_ = 0;
  std::size_t header_size_ = 0;
};

}  // namespace idempotency::http::detail
