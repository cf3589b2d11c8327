// The idempotency-key mode: HTTP API requests deduplicated by their `Idempotency-Key` header,
// with the semantics of the IETF draft "The Idempotency-Key HTTP Header Field" (as Stripe
// implements it):
//
// | request                                           | answer                              |
// |---------------------------------------------------|-------------------------------------|
// | POST / PATCH without the header                   | 400                                 |
// | first with a key                                  | forwarded; a 2xx is stored          |
// | same key, same method + path + body, after a 2xx  | the stored response, byte for byte, |
// |                                                   | plus `Idempotency-Replayed: true`   |
// | same key while the first is in flight             | 409 with Retry-After                |
// | same key, different method, path or body          | 422                                 |
// | upstream 2xx with a body over --max-response      | its status and headers, empty body, |
// |                                                   | `Idempotency-Response-Omitted:      |
// |                                                   | too-large`; stored and replayed so  |
// | upstream non-2xx                                  | passed through, not stored, released|
// | upstream unreachable (provably did not act)       | 502, not stored, key released       |
// | upstream silent after the request was sent        | 504, not stored, key HELD until its |
// |   (timeout, reset: it may still be acting)        | lease lapses (a retry gets 409)     |
// | any other method                                  | forwarded as it is, not deduplicated|
//
// Built directly on the LockBackend port, not on once(): a concurrent duplicate must get 409
// rather than join the first. The request fingerprint (SHA-256 of method, path and body) is
// stored with the claim and compared with the one a duplicate finds.
//
// The table above is this mode's own (another protocol than Pub/Sub push), so it does not use
// `pubsub::push_response`; each request is counted once, where its answer is decided, with the
// labels the pubsub mode uses where the meaning is the same (`handled`, `duplicate`,
// `replayed`, `nack_upstream*`, `backend_error`, `bad_request`, `unauthorized`: metrics.h).
//
// Thread safety: the returned handler may be called from any number of threads.
#pragma once

#include <string>
#include <string_view>

#include "config.h"
#include "deps.h"
#include "idempotency/http.h"

namespace idempotency::gateway {

/// The request header carrying the key.
inline constexpr std::string_view kIdempotencyKeyHeader = "Idempotency-Key";

/// The response header that marks a replayed answer.
inline constexpr const char* kReplayedHeader = "Idempotency-Replayed";

/// The response header that says why an applied request's body was not kept: `too-large`
/// (over --max-response), `incomplete` (the connection broke or the deadline passed mid-body)
/// or `transfer-coding` (a coding besides chunked, not undone).
inline constexpr const char* kResponseOmittedHeader = "Idempotency-Response-Omitted";

/// request_fingerprint() is the hex SHA-256 of method, path and body, length-delimited so no
/// two different requests share the input.
[[nodiscard]] std::string request_fingerprint(const pubsub::PushRequest& request);

/// make_idempotency_key_handler() builds the idempotency-key mode's request handler.
[[nodiscard]] http::Handler make_idempotency_key_handler(const Config& config, GatewayDeps deps);

}  // namespace idempotency::gateway
