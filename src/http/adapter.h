// The adapter between Beast's messages and the library's framework-agnostic request and
// response types: conversion both ways and the exception barrier around the handler.
// Internal to idempotency::http.
//
// Thread safety: stateless functions, called concurrently from the worker threads.
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <exception>
#include <string_view>

#include "idempotency/http.h"
#include "idempotency/pubsub/message.h"
#include "idempotency/pubsub/response.h"

namespace idempotency::http::detail {

using BeastRequest = boost::beast::http::request<boost::beast::http::string_body>;
using BeastResponse = boost::beast::http::response<boost::beast::http::string_body>;

/// to_push_request() moves the method, target, every header field and the body of `request`
/// (already validated by the strict parser) into a PushRequest.
[[nodiscard]] pubsub::PushRequest to_push_request(BeastRequest&& request);

/// to_beast_response() builds the response to send: status, the handler's headers and body.
/// Framing headers (Content-Length, Transfer-Encoding, Connection) are the server's own, and a
/// header whose name is not a token or whose value holds a control byte is dropped (and
/// logged), so a handler can never inject a header or split the response. A status outside
/// 100..599 is answered 500 and logged (`handler_bad_status`).
[[nodiscard]] BeastResponse to_beast_response(pubsub::PushResponse&& response, unsigned version,
                                              bool head);

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

/// error_response() is a one-line plain-text answer the handler never saw; it closes the
/// connection.
[[nodiscard]] BeastResponse error_response(int status, std::string_view line, unsigned version);

}  // namespace idempotency::http::detail
