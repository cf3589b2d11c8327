#include "adapter.h"

#include <algorithm>
#include <exception>
#include <string>
#include <string_view>
#include <utility>

#include "field_syntax.h"
#include "idempotency/detail/ascii.h"
#include "idempotency/log.h"

namespace idempotency::http::detail {
namespace beast_http = boost::beast::http;
namespace {

using idempotency::detail::iequals_ascii;

// The server frames every message itself.
bool is_framing(std::string_view name) {
  return iequals_ascii(name, "Content-Length") || iequals_ascii(name, "Transfer-Encoding") ||
         iequals_ascii(name, "Connection") || iequals_ascii(name, "Keep-Alive");
}

// Log fields are one line and short: an exception message is cut at its first line break.
std::string one_line(std::string_view text) {
  constexpr std::size_t kMax = 200;
  auto end = text.find_first_of("\r\n");
  text = text.substr(0, std::min({end, kMax, text.size()}));
  return std::string(text);
}

}  // namespace

pubsub::PushResponse internal_error() {
  return pubsub::PushResponse{.status = 500,
                              .headers = {{"Content-Type", "text/plain; charset=utf-8"}},
                              .body = "internal error\n"};
}

pubsub::PushRequest to_push_request(BeastRequest&& request) {
  pubsub::PushRequest out;
  out.method = std::string(request.method_string());
  out.path = std::string(request.target());
  out.headers.reserve(static_cast<std::size_t>(std::distance(request.begin(), request.end())));
  for (const auto& field : request) {
    out.headers.push_back({std::string(field.name_string()), std::string(field.value())});
  }
  out.body = std::move(request.body());
  return out;
}

BeastResponse to_beast_response(pubsub::PushResponse&& response, unsigned version, bool head) {
  if (response.status < 100 || response.status > 599) {
    log({.severity = Severity::kError,
         .event = "handler_bad_status",
         .message = "The handler returned an invalid HTTP status; answering 500.",
         .fields = {{"status", std::to_string(response.status)}}});
    return to_beast_response(internal_error(), version, head);
  }
  BeastResponse out{static_cast<beast_http::status>(response.status), version};
  for (auto& header : response.headers) {
    if (is_framing(header.name)) continue;
    if (!is_field_name(header.name) || !is_field_value(header.value)) {
      log({.severity = Severity::kWarning,
           .event = "handler_bad_header",
           .message = "The handler returned a header that is not valid HTTP; it was dropped."});
      continue;
    }
    out.insert(boost::beast::string_view(header.name.data(), header.name.size()),
               boost::beast::string_view(header.value.data(), header.value.size()));
  }
  const std::size_t length = response.body.size();
  if (!head) out.body() = std::move(response.body);
  // A HEAD answer announces the length a GET would have sent, without the bytes.
  out.content_length(length);
  return out;
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

BeastResponse error_response(int status, std::string_view line, unsigned version) {
  BeastResponse out{static_cast<beast_http::status>(status), version};
  out.set(beast_http::field::content_type, "text/plain; charset=utf-8");
  out.set(beast_http::field::connection, "close");
  out.keep_alive(false);
  out.body() = std::string(line) + "\n";
  out.prepare_payload();
  return out;
}

}  // namespace idempotency::http::detail
