// libFuzzer target for the HTTP server's request framing: request_guard.h's HeaderScan, then
// Beast's request parser, exactly as src/http/connection.cc chains them.
//
// The input is the raw bytes a client sends, fed in two pieces (split at the first input
// byte's value) so that scanning across reads is exercised. Besides the sanitizers' checks it
// asserts the promise the gateway's fence depends on: a request whose header both checks
// accept carries no field name that is not a token and no field value with a CR, LF, NUL or
// other control byte (so nothing a lenient parser downstream could read as another header),
// and no obs-fold line.
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "field_syntax.h"
#include "request_guard.h"

namespace {

namespace beast_http = boost::beast::http;
using idempotency::http::detail::HeaderScan;

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);  // NOLINT
  const std::size_t split = size == 0 ? 0 : data[0] % (size + 1);
  HeaderScan scan;
  auto verdict = scan.scan(input.substr(0, split));
  if (verdict == HeaderScan::Verdict::kNeedMore) verdict = scan.scan(input);
  if (verdict != HeaderScan::Verdict::kComplete) return 0;

  beast_http::request_parser<beast_http::string_body> parser;
  parser.header_limit(64 * 1024);
  parser.body_limit(1 << 20);
  parser.eager(false);
  boost::beast::error_code ec;
  (void)parser.put(boost::asio::buffer(input.data(), input.size()), ec);
  if (ec || !parser.is_header_done()) return 0;

  for (const auto& field : parser.get()) {
    const auto name = field.name_string();
    const auto value = field.value();
    check(idempotency::http::detail::is_field_name(std::string_view(name.data(), name.size())));
    check(idempotency::http::detail::is_field_value(std::string_view(value.data(), value.size())));
  }
  // No accepted header block holds a line that starts with whitespace.
  const auto end = input.find("\r\n\r\n");
  check(end != std::string_view::npos);
  const auto header = input.substr(0, end + 2);
  check(header.find("\r\n ") == std::string_view::npos);
  check(header.find("\r\n\t") == std::string_view::npos);
  return 0;
}
