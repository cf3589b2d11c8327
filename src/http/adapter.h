// The server's side of the library's framework-agnostic response type: a response encoded for
// the wire, and the exception barrier around the handler (request_parser.h is the way in).
// Internal to idempotency::http.
//
// Thread safety: stateless functions, called concurrently from the worker threads.
#pragma once

#include <exception>
#include <string>
#include <string_view>

#include "idempotency/http.h"
#include "idempotency/pubsub/message.h"
#include "idempotency/pubsub/response.h"

namespace idempotency::http::detail {

/// EncodedResponse is a response as it goes on the wire: the status line and header block, then
/// the body (kept apart, so a large body is sent from where it is instead of copied).
struct EncodedResponse {
  std::string head;
  std::string body;
};

/// How the request being answered wants its response framed.
struct Framing {
  unsigned version = 11;    // 10 or 11, as Beast numbers HTTP/1.0 and HTTP/1.1
  bool head = false;        // a HEAD request: the length a GET would get, no body
  bool keep_alive = false;  // the connection stays open after this response
};

/// encode_response() writes `response` into `out` (reusing its strings' capacity): the status,
/// the handler's headers and body. Framing headers (Content-Length, Transfer-Encoding,
/// Connection) are the server's own, and a header whose name is not a token or whose value
/// holds a control byte is dropped (and logged), so a handler can never inject a header or
/// split the response. 204 and 304 go without content or Content-Length. A status outside
/// 200..599 (an interim 1xx too) is answered 500 and logged
/// (`handler_bad_status`).
void encode_response(pubsub::PushResponse&& response, Framing framing, EncodedResponse& out);

/// call_handler() runs `handler`; when it throws, it logs `handler_threw` and returns a 500
/// with a one-line body instead, so the server keeps serving.
[[nodiscard]] pubsub::PushResponse call_handler(const Handler& handler,
                                                const pubsub::PushRequest& request) noexcept;

/// answer_to_throw() logs `handler_threw` for `error`, thrown by a handler of a `method`
/// request, and returns the 500 to answer instead.
[[nodiscard]] pubsub::PushResponse answer_to_throw(const std::exception_ptr& error,
                                                   std::string_view method) noexcept;

/// internal_error() is the 500 answered for a handler's failure.
[[nodiscard]] pubsub::PushResponse internal_error();

/// encode_refusal() writes into `out` a one-line plain-text answer to a request the handler
/// never saw; it closes the connection.
void encode_refusal(int status, std::string_view line, EncodedResponse& out);

}  // namespace idempotency::http::detail
