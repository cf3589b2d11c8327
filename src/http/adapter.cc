#include "adapter.h"

#include <boost/beast/http/status.hpp>

#include <algorithm>
#include <charconv>
#include <exception>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "idempotency/detail/ascii.h"
#include "idempotency/detail/decimal.h"
#include "idempotency/detail/field_syntax.h"
#include "idempotency/log.h"

namespace idempotency::http::detail {
namespace beast_http = boost::beast::http;
namespace {

using idempotency::detail::iequals_ascii;
using idempotency::detail::is_field_name;
using idempotency::detail::is_field_value;

// The server frames every message itself.
bool is_framing(std::string_view name) {
  return iequals_ascii(name, "Content-Length") || iequals_ascii(name, "Transfer-Encoding") ||
         iequals_ascii(name, "Connection") || iequals_ascii(name, "Keep-Alive");
}

// A HEAD answer's Content-Length: its body's size, or, with no body, the length the handler
// declares (a proxy passing on its upstream's HEAD answer has no body to count).
std::size_t head_length(const pubsub::PushResponse& response) {
  if (!response.body.empty()) return response.body.size();
  for (const auto& header : response.headers) {
    if (!iequals_ascii(header.name, "Content-Length")) continue;
    std::size_t length = 0;
    const char* const end = header.value.data() + header.value.size();
    const auto [at, error] = std::from_chars(header.value.data(), end, length);
    if (error == std::errc() && at == end && !header.value.empty()) return length;
  }
  return 0;
}

// Log fields are one line and short: an exception message is cut at its first line break.
std::string one_line(std::string_view text) {
  constexpr std::size_t kMax = 200;
  auto end = text.find_first_of("\r\n");
  text = text.substr(0, std::min({end, kMax, text.size()}));
  return std::string(text);
}

void append_status_line(std::string& out, unsigned version, int status) {
  using namespace std::string_view_literals;
  out += version >= 11 ? "HTTP/1.1 "sv : "HTTP/1.0 "sv;
  idempotency::detail::append_decimal(out, status);
  out += ' ';
  const auto reason = beast_http::obsolete_reason(static_cast<beast_http::status>(status));
  out.append(reason.data(), reason.size());
  out += "\r\n"sv;
}

void append_field(std::string& out, std::string_view name, std::string_view value) {
  using namespace std::string_view_literals;
  out.append(name);
  out += ": "sv;
  out.append(value);
  out += "\r\n"sv;
}

void append_content_length(std::string& out, std::size_t length) {
  using namespace std::string_view_literals;
  out += "Content-Length: "sv;
  idempotency::detail::append_decimal(out, length);
  out += "\r\n"sv;
}

}  // namespace

pubsub::PushResponse internal_error() {
  return pubsub::PushResponse{.status = 500,
                              .headers = {{"Content-Type", "text/plain; charset=utf-8"}},
                              .body = "internal error\n"};
}

void encode_response(pubsub::PushResponse&& response, Framing framing, EncodedResponse& out) {
  // A final answer: an interim (1xx) status would leave the client waiting for another one.
  if (response.status < 200 || response.status > 599) {
    log({.severity = Severity::kError,
         .event = "handler_bad_status",
         .message = "The handler returned an invalid HTTP status; answering 500.",
         .fields = {{"status", std::to_string(response.status)}}});
    encode_response(internal_error(), framing, out);
    return;
  }
  out.head.clear();
  append_status_line(out.head, framing.version, response.status);
  for (const auto& header : response.headers) {
    if (is_framing(header.name)) continue;
    if (!is_field_name(header.name) || !is_field_value(header.value)) {
      log({.severity = Severity::kWarning,
           .event = "handler_bad_header",
           .message = "The handler returned a header that is not valid HTTP; it was dropped."});
      continue;
    }
    append_field(out.head, header.name, header.value);
  }
  // 204 and 304 have no content (RFC 9110 §6.4.1; a body would be read as the next response),
  // and a 204 no Content-Length (§8.6). A HEAD answer announces the length a GET would have
  // sent, without the bytes.
  const bool no_content = response.status == 204 || response.status == 304;
  if (!no_content) {
    append_content_length(out.head, framing.head ? head_length(response) : response.body.size());
  }
  // Each version's default needs no header: 1.1 stays open, 1.0 closes.
  if (framing.keep_alive != (framing.version >= 11)) {
    append_field(out.head, "Connection", framing.keep_alive ? "keep-alive" : "close");
  }
  out.head += std::string_view("\r\n");
  if (framing.head || no_content) {
    out.body.clear();
  } else {
    out.body = std::move(response.body);
  }
}

pubsub::PushResponse answer_to_throw(const std::exception_ptr& error,
                                     std::string_view method) noexcept {
  std::string what;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    what = one_line(e.what());
  } catch (...) {
    what = "a non-standard exception";
  }
  log({.severity = Severity::kError,
       .event = "handler_threw",
       .message = "The push handler threw; answering 500.",
       .fields = {{"method", one_line(method)}, {"what", what}}});
  return internal_error();
}

pubsub::PushResponse call_handler(const Handler& handler,
                                  const pubsub::PushRequest& request) noexcept {
  try {
    return handler(request);
  } catch (...) {
    return answer_to_throw(std::current_exception(), request.method);
  }
}

void encode_refusal(int status, std::string_view line, EncodedResponse& out) {
  out.body.assign(line);
  out.body += '\n';
  out.head.clear();
  append_status_line(out.head, 11, status);
  append_field(out.head, "Content-Type", "text/plain; charset=utf-8");
  append_field(out.head, "Content-Length", std::to_string(out.body.size()));
  append_field(out.head, "Connection", "close");
  out.head += "\r\n";
}

}  // namespace idempotency::http::detail
