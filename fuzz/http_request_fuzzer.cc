// libFuzzer target for the HTTP server's request framing: request_guard.h's HeaderScan, then
// request_parser.h's RequestParser (Beast's basic_parser), exactly as src/http/connection.cc
// chains them: the header on its own, then the body bytes that came with it.
//
// The input is the raw bytes a client sends, fed in two pieces (split at the first input
// byte's value) so that scanning across reads is exercised. Besides the sanitizers' checks it
// asserts the promise the gateway's fence depends on: a request whose header both checks
// accept carries no field name that is not a token and no field value with a CR, LF, NUL or
// other control byte (so nothing a lenient parser downstream could read as another header),
// and no obs-fold line. And it holds simple_request.h's fast reading to the strict one: a
// request the fast reading accepts, the strict reading accepts whole and reads the same way
// (method, target, HTTP/1.1, every field in order, body, keep-alive, the bytes used). Then
// request_head.h's rules: what they accept has a path for a target and, in HTTP/1.1, one Host.
#include <boost/beast/http/error.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "idempotency/detail/field_syntax.h"
#include "request_guard.h"
#include "request_head.h"
#include "request_parser.h"
#include "simple_request.h"

namespace {

using idempotency::http::detail::HeaderScan;

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The limits come from the input too, small as often as not, so that their edges are met
  // (an input of the default 4,096 bytes never meets 64 KiB or 1 MiB).
  const std::size_t header_limit = size > 1 && (data[1] & 1) == 0 ? 16 + data[1] : 64 * 1024;
  const std::size_t body_limit = size > 2 && (data[2] & 1) == 0 ? data[2] % 64 : 1 << 20;
  const std::string_view input(reinterpret_cast<const char*>(data), size);  // NOLINT
  // Whatever the fast reading accepts, every step below must accept too.
  const auto simple = idempotency::http::detail::simple_request(input, header_limit, body_limit);
  const auto refused = [&simple] {
    check(!simple);
    return 0;
  };
  const std::size_t split = size == 0 ? 0 : data[0] % (size + 1);
  HeaderScan scan;
  // As the server: a header over the limit is refused whole, whichever parser would read it.
  auto verdict = scan.scan(input.substr(0, split), header_limit);
  if (verdict == HeaderScan::Verdict::kNeedMore) verdict = scan.scan(input, header_limit);
  if (verdict != HeaderScan::Verdict::kComplete) return refused();
  check(scan.header_size() <= header_limit);
  check(input.substr(scan.header_size() - 4, 4) == "\r\n\r\n");

  idempotency::http::detail::RequestParser parser;
  parser.header_limit(static_cast<std::uint32_t>(header_limit));
  parser.body_limit(body_limit);
  parser.eager(false);
  boost::beast::error_code ec;
  const std::size_t used = parser.put(boost::asio::buffer(input.data(), input.size()), ec);
  if (ec || !parser.is_header_done()) return refused();

  for (const auto& field : parser.request().headers) {
    check(idempotency::detail::is_field_name(field.name));
    check(idempotency::detail::is_field_value(field.value));
  }
  // The head's rules, as the server applies them next: a request they accept has a path for a
  // target (or * for OPTIONS) and, in HTTP/1.1, one Host; one they refuse is left as it came.
  auto settled = parser.request();
  if (idempotency::http::detail::settle_head(settled, parser.version())) {
    check(settled.path == parser.request().path);
    check(settled.headers.size() == parser.request().headers.size());
    for (std::size_t i = 0; i < settled.headers.size(); ++i) {
      check(settled.headers[i].value == parser.request().headers[i].value);
    }
  } else {
    check((!settled.path.empty() && settled.path.front() == '/') ||
          (settled.path == "*" && settled.method == "OPTIONS"));
    std::size_t hosts = 0;
    for (const auto& field : settled.headers) {
      if (idempotency::detail::iequals_ascii(field.name, "Host")) ++hosts;
    }
    check(hosts == 1 || (hosts == 0 && parser.version() < 11));
  }
  // The body that came with the header: never more than was sent, or than the limit; and a
  // chunked body's trailer fields never join the header's, which the checks above have read.
  const std::size_t header_fields = parser.request().headers.size();
  parser.eager(true);
  const auto rest = input.substr(used);
  // As the server: a request already complete (no body) is not fed again.
  std::size_t body_used = 0;
  if (!parser.is_done() && !rest.empty()) {
    body_used = parser.put(boost::asio::buffer(rest.data(), rest.size()), ec);
  }
  check(parser.request().headers.size() == header_fields);
  check(parser.request().body.size() <= rest.size());
  check(parser.request().body.size() <= body_limit);
  if (simple) {
    const auto& ours = simple->request;
    const auto& strict = parser.request();
    check(!ec || ec == boost::beast::http::error::need_more);
    check(parser.is_done() && parser.version() == 11 && parser.expect().empty());
    check(ours.method == strict.method && ours.path == strict.path && ours.body == strict.body);
    check(ours.headers.size() == strict.headers.size());
    for (std::size_t i = 0; i < ours.headers.size(); ++i) {
      check(ours.headers[i].name == strict.headers[i].name);
      check(ours.headers[i].value == strict.headers[i].value);
    }
    check(simple->keep_alive == parser.keep_alive());
    check(simple->size == used + body_used);
  }
  // No accepted header block holds a line that starts with whitespace.
  const auto end = input.find("\r\n\r\n");
  check(end != std::string_view::npos);
  const auto header = input.substr(0, end + 2);
  check(header.find("\r\n ") == std::string_view::npos);
  check(header.find("\r\n\t") == std::string_view::npos);
  return 0;
}
