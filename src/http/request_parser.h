// RequestParser: Beast's strict HTTP/1 request parser, writing what it reads straight into a
// PushRequest. Beast's own parser builds a message first (an allocation per field), which the
// server then copied field by field; the parsing, its limits and its errors are Beast's either
// way. Internal to idempotency::http.
//
// Thread safety: one parser per request, used by one thread at a time.
#pragma once

#include <boost/beast/http/basic_parser.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "idempotency/pubsub/message.h"

namespace idempotency::http::detail {

class RequestParser : public boost::beast::http::basic_parser<true> {
 public:
  /// request() is what has been parsed: method, target, every header field in order (a chunked
  /// body's trailer fields are dropped), the body.
  [[nodiscard]] pubsub::PushRequest& request() { return request_; }
  /// version() is the request's HTTP version as Beast numbers it (10, 11).
  [[nodiscard]] unsigned version() const { return version_; }
  /// expect() is the value of the first Expect field, empty when there is none.
  [[nodiscard]] std::string_view expect() const;

 private:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;

  void on_request_impl(boost::beast::http::verb method, string_view method_string,
                       string_view target, int version, error_code& ec) override;
  void on_response_impl(int code, string_view reason, int version, error_code& ec) override;
  void on_field_impl(boost::beast::http::field name, string_view name_string, string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code& ec) override;
  void on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                         error_code& ec) override;
  std::size_t on_body_impl(string_view body, error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t size, string_view extensions, error_code& ec) override;
  std::size_t on_chunk_body_impl(std::uint64_t remain, string_view body, error_code& ec) override;
  void on_finish_impl(error_code& ec) override;

  pubsub::PushRequest request_;
  unsigned version_ = 11;
  std::optional<std::size_t> expect_;  // the first Expect field's index in request_.headers
};

}  // namespace idempotency::http::detail
