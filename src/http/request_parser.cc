#include "request_parser.h"

#include <string>

#include "idempotency/detail/field_syntax.h"

namespace idempotency::http::detail {
namespace beast_http = boost::beast::http;

namespace {

std::string_view view(boost::beast::string_view s) { return {s.data(), s.size()}; }

}  // namespace

std::string_view RequestParser::expect() const {
  return expect_ ? std::string_view(request_.headers[*expect_].value) : std::string_view();
}

void RequestParser::on_request_impl(beast_http::verb /*method*/, string_view method_string,
                                    string_view target, int version, error_code& /*ec*/) {
  request_.method.assign(view(method_string));
  request_.path.assign(view(target));
  version_ = static_cast<unsigned>(version);
  request_.headers.reserve(8);  // a typical request's, in one allocation instead of four
}

void RequestParser::on_response_impl(int /*code*/, string_view /*reason*/, int /*version*/,
                                     error_code& /*ec*/) {}  // a request parser never sees one

void RequestParser::on_field_impl(beast_http::field name, string_view name_string,
                                  string_view value, error_code& /*ec*/) {
  // After the header, a field is a chunked body's trailer. RFC 9110 §6.5.1 forbids merging one
  // into the header section, and merged it would pass around the checks the header met (a
  // second Host after settle_head(), a fence after the proxy's strip): it is dropped.
  if (is_header_done()) return;
  if (name == beast_http::field::expect && !expect_) expect_ = request_.headers.size();
  request_.headers.push_back({std::string(view(name_string)), std::string(view(value))});
}

void RequestParser::on_header_impl(error_code& /*ec*/) {}

void RequestParser::on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                                      error_code& /*ec*/) {
  // Within body_limit: the base parser refused a larger Content-Length before calling this.
  if (content_length) request_.body.reserve(static_cast<std::size_t>(*content_length));
}

std::size_t RequestParser::on_body_impl(string_view body, error_code& /*ec*/) {
  request_.body.append(body.data(), body.size());
  return body.size();
}

void RequestParser::on_chunk_header_impl(std::uint64_t /*size*/, string_view extensions,
                                         error_code& ec) {
  // Beast takes any byte inside a quoted extension value, a bare LF or a NUL included. A proxy
  // in front that ends the chunk line at that LF frames the body differently, and the rest of
  // it is a request smuggled past that proxy. Extensions carry nothing this server reads: one
  // with a control byte (HTAB aside), which no field value may hold either, is refused.
  if (!idempotency::detail::is_field_value(view(extensions))) {
    ec = beast_http::error::bad_chunk_extension;
  }
}

std::size_t RequestParser::on_chunk_body_impl(std::uint64_t /*remain*/, string_view body,
                                              error_code& ec) {
  return on_body_impl(body, ec);
}

void RequestParser::on_finish_impl(error_code& /*ec*/) {}

}  // namespace idempotency::http::detail
