// The rules a request's head must meet beyond its syntax, whichever reading parsed it (the fast
// one, simple_request.h, or Beast's): RFC 9112 §3.2 (an HTTP/1.1 request has exactly one Host
// field, and a valid one), §3.2.2 (an absolute-form target is read as the origin-form path and
// query, its authority as the Host) and §6.1 (Transfer-Encoding in HTTP/1.0 is faulty framing;
// a transfer coding besides chunked is not understood), and RFC 9110 §8.6 (one Content-Length,
// one number). Without them a client could hand the handler, or the gateway's upstream, a host
// of its own choosing through the target, or a body still encoded in a coding that the
// de-chunked request no longer names.
//
// Thread safety: settle_head() reads and writes its argument alone.
#pragma once

#include <optional>
#include <string_view>

#include "idempotency/pubsub/message.h"

namespace idempotency::http::detail {

/// Beast's number for HTTP/1.1 (10 is HTTP/1.0).
inline constexpr unsigned kHttp11 = 11;

/// Why a request is refused before its handler: the status and a fixed one-line reason (never
/// the request's own bytes).
struct HeadRefusal {
  int status = 400;
  std::string_view reason;
};

/// settle_head() checks `request`'s target and its Host, Authorization, Content-Length and
/// Transfer-Encoding fields (`version`
/// as Beast numbers it: 10 for HTTP/1.0, 11 for HTTP/1.1), and rewrites an absolute-form target
/// (`http://authority/path?query`) to its origin-form (`/path?query`), the authority becoming
/// the Host field's value. Returns the refusal when a rule is broken; `request` is then as it
/// came.
[[nodiscard]] std::optional<HeadRefusal> settle_head(pubsub::PushRequest& request,
                                                     unsigned version);

}  // namespace idempotency::http::detail
