// The pubsub mode: each push delivery is forwarded to the upstream at most once per key,
// through the library's idempotent_async(), and its outcome mapped to ack / nack:
//
// | upstream                    | gateway answers                         | Pub/Sub |
// |-----------------------------|-----------------------------------------|---------|
// | 2xx                         | its status (stored; a non-ack 2xx       | ack     |
// |                             | status such as 203 is answered as 200)  |         |
// | non-2xx                     | 500, key released                       | nack    |
// | refused / never sent        | 503, key released                       | nack    |
// | sent, then silent or broken | 503, key held until its lease lapses    | nack    |
// | (duplicate: DONE in ttl)    | 204, upstream not called                | ack     |
// | (held by another instance)  | 503 with Retry-After                    | nack    |
//
// The statuses are the library's push status table (`pubsub::push_response`); this mode never
// reads them. Each request is counted from its typed outcome (`IdempotentOptions::on_outcome`),
// refined by what only the forward step knows — how the upstream failed — which it says by
// the type of what it throws.
//
// Thread safety: the returned handler may be called from any number of threads.
#pragma once

#include <string>
#include <string_view>

#include "config.h"
#include "deps.h"
#include "idempotency/http.h"
#include "idempotency/pubsub/idempotent.h"
#include "idempotency/pubsub/idempotent_async.h"
#include "idempotency/pubsub/outcome.h"

namespace idempotency::gateway {

/// How the upstream failed, when the forward step nacks without an ambiguous outcome.
enum class UpstreamFailure {
  kUnreachable,  ///< Provably not acted on (refused, never sent): the key is released.
  kRejected,     ///< The upstream answered non-2xx: the key is released.
};

/// UpstreamNack is the nack the forward step throws; its type and `failure()` carry the cause
/// to the outcome observer (`OutcomeEvent::error`), also to deliveries that joined it.
class UpstreamNack : public pubsub::Nack {
 public:
  /// UpstreamNack() nacks with `status` and a one-line `reason`, as `Nack` does.
  UpstreamNack(UpstreamFailure failure, int status, const std::string& reason)
      : pubsub::Nack(status, reason), failure_(failure) {}
  /// failure() says how the upstream failed.
  [[nodiscard]] UpstreamFailure failure() const noexcept { return failure_; }

 private:
  UpstreamFailure failure_;
};

/// metric_outcome() is the `requests_total` outcome of one delivery: its typed outcome, refined
/// by how the upstream failed. It is never shown the response, so the status table may change
/// without changing what is counted.
[[nodiscard]] std::string_view metric_outcome(const pubsub::OutcomeEvent& event);

/// make_key_function() turns `--key` and `--key-prefix` into the library's key function.
[[nodiscard]] pubsub::KeyFunction make_key_function(const KeySpec& spec, const std::string& prefix);

/// make_pubsub_handler() builds the pubsub mode's request handler: asynchronous, forwarding on
/// `deps.loop`, with store calls that may block on `deps.run_blocking`.
[[nodiscard]] pubsub::AsyncPushHandler make_pubsub_handler(const Config& config,
                                                           const GatewayDeps& deps);

}  // namespace idempotency::gateway
