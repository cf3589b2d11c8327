#include "simple_response.h"

#include "idempotency/detail/field_syntax.h"

namespace idempotency::gateway::upstream_detail {

namespace {

using idempotency::detail::at_crlf;
using idempotency::detail::read_plain_fields;
using idempotency::detail::skip_field_value;

constexpr std::string_view kStatusLineStart = "HTTP/1.1 ";
bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

std::optional<SimpleResponse> simple_response(std::string_view bytes,
                                              std::uint64_t body_limit) noexcept {
  // One pass over the header, which must end within kSimpleHeaderLimit bytes.
  const std::string_view text = bytes.substr(0, kSimpleHeaderLimit);

  // `HTTP/1.1 DDD reason`: a final status with a body by length (Beast reads no body after a
  // 1xx, 204 or 304, whatever the fields say).
  std::size_t i = kStatusLineStart.size();
  if (!text.starts_with(kStatusLineStart) || text.size() < i + 4 || !is_digit(text[i]) ||
      !is_digit(text[i + 1]) || !is_digit(text[i + 2]) || text[i + 3] != ' ') {
    return std::nullopt;
  }
  SimpleResponse out;
  out.status = (text[i] - '0') * 100 + (text[i + 1] - '0') * 10 + (text[i + 2] - '0');
  if (out.status < 200 || out.status > 599 || out.status == 204 || out.status == 304) {
    return std::nullopt;
  }
  i = skip_field_value(text, i + 4);  // the reason phrase
  if (!at_crlf(text, i)) return std::nullopt;
  i += 2;

  idempotency::detail::PlainFraming framing;
  const auto header_end = read_plain_fields(text, i, framing, [](auto, auto) { return true; });
  if (!header_end) return std::nullopt;
  const auto& length = framing.content_length;
  if (!length || *length > body_limit || bytes.size() - *header_end != *length) {
    return std::nullopt;
  }
  out.keep_alive = !framing.close;
  out.size = bytes.size();
  return out;
}

}  // namespace idempotency::gateway::upstream_detail
