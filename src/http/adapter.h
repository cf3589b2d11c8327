// The adapter between cpp-httplib and the library's framework-agnostic request and response
// types: conversion both ways, the bounded body read and the exception barrier around the
// handler. Internal to idempotency::http; the only file besides server.cc that names httplib.
//
// Thread safety: stateless functions, called concurrently from the worker threads.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <string>

#include "idempotency/http.h"
#include "idempotency/pubsub/message.h"
#include "idempotency/pubsub/response.h"

namespace idempotency::http::detail {

/// to_push_request() copies the method and every header of `request` (not the pseudo-headers
/// cpp-httplib adds for the peer and local addresses) and takes `body` as the body.
[[nodiscard]] pubsub::PushRequest to_push_request(const httplib::Request& request,
                                                  std::string body);

/// apply_response() writes `response` into `out`: status, headers and body. Framing headers
/// (Content-Length, Transfer-Encoding) are left to cpp-httplib; a status outside 100..599 is
/// answered 500 and logged (`handler_bad_status`).
void apply_response(const pubsub::PushResponse& response, httplib::Response& out);

/// call_handler() runs `handler`; when it throws, it logs `handler_threw` and returns a 500
/// with a one-line body instead, so the server keeps serving.
[[nodiscard]] pubsub::PushResponse call_handler(const Handler& handler,
                                                const pubsub::PushRequest& request) noexcept;

/// How reading a request body ended.
enum class BodyRead { kOk, kTooLarge, kFailed };

/// read_body() reads the body through `reader` (after chunked decoding and any
/// Content-Encoding) into `body`, stopping as soon as it would exceed `max_bytes`.
/// `response` is where cpp-httplib records its own verdict (413 for an oversized
/// Content-Length, which it refuses before reading).
[[nodiscard]] BodyRead read_body(const httplib::ContentReader& reader,
                                 const httplib::Response& response, std::size_t max_bytes,
                                 std::string& body);

/// error_response() fills `out` with `status`, a one-line plain-text body and
/// `Connection: close`, for answers the handler never saw.
void error_response(int status, const std::string& line, httplib::Response& out);

}  // namespace idempotency::http::detail
