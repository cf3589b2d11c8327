#include "simple_request.h"

#include <array>
#include <string>
#include <utility>

#include "idempotency/detail/field_syntax.h"

namespace idempotency::http::detail {
namespace {

using idempotency::detail::kTargetChars;
using idempotency::detail::read_plain_fields;
using idempotency::detail::skip_token;

// More fields than this go to Beast's parser: the fast reading keeps its views on the stack.
constexpr std::size_t kMaxFields = 32;

constexpr std::string_view kVersionLineEnd = " HTTP/1.1\r\n";

std::size_t byte(char c) { return static_cast<unsigned char>(c); }

}  // namespace

std::optional<SimpleRequest> simple_request(std::string_view bytes, std::size_t header_limit,
                                            std::uint64_t body_limit) {
  // Every return is of this one object, so it is built where the caller takes it (NRVO): a
  // PushRequest moved is its four members moved, then destroyed.
  std::optional<SimpleRequest> read;
  const std::string_view text = bytes.substr(0, header_limit);

  // `METHOD SP target SP HTTP/1.1 CRLF`
  std::size_t i = skip_token(text, 0);
  if (i == 0 || i == text.size() || text[i] != ' ') return read;
  const std::string_view method = text.substr(0, i);
  const std::size_t target_start = ++i;
  while (i < text.size() && kTargetChars[byte(text[i])]) ++i;
  if (i == target_start || text.substr(i, kVersionLineEnd.size()) != kVersionLineEnd) {
    return read;
  }
  const std::string_view target = text.substr(target_start, i - target_start);
  i += kVersionLineEnd.size();

  // Where each field's name and value start and end: plain pointers, so the array is left
  // uninitialized (only the first `count` are read), where views would be zeroed, all 32.
  // Converted where a Header is constructed, a Field builds its strings in place: strings
  // built, then moved in, would cost a short one a second copy.
  struct Field {
    const char* name;
    const char* name_end;
    const char* value;
    const char* value_end;
    operator pubsub::Header() const {
      return {std::string(name, name_end), std::string(value, value_end)};
    }
  };
  std::array<Field, kMaxFields> fields;  // NOLINT(cppcoreguidelines-pro-type-member-init)
  std::size_t count = 0;
  idempotency::detail::PlainFraming framing;
  const auto header_end =
      read_plain_fields(text, i, framing, [&](std::string_view name, std::string_view value) {
        if (count == kMaxFields) return false;  // declined at once, not after the whole header
        fields[count++] = Field{name.data(), name.data() + name.size(), value.data(),
                                value.data() + value.size()};
        return true;
      });
  if (!header_end) return read;
  // A request without Content-Length (and without Transfer-Encoding) has no body.
  const std::uint64_t length = framing.content_length.value_or(0);
  if (length > body_limit || bytes.size() - *header_end < length) return read;

  SimpleRequest& out = read.emplace();
  // A PushRequest starts as `POST /`, what nearly every push is: comparing costs less than
  // writing the same bytes again.
  if (out.request.method != method) out.request.method.assign(method);
  if (out.request.path != target) out.request.path.assign(target);
  out.request.headers.reserve(count);
  for (std::size_t f = 0; f < count; ++f) {
    out.request.headers.emplace_back(fields[f]);
  }
  const auto body_length = static_cast<std::size_t>(length);
  out.request.body.assign(bytes.substr(*header_end, body_length));
  out.size = *header_end + body_length;
  out.keep_alive = !framing.close;
  return read;
}

}  // namespace idempotency::http::detail
