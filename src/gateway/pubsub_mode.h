// The pubsub mode: each push delivery is forwarded to the upstream at most once per key,
// through the library's idempotent_response(), and its outcome mapped to ack / nack:
//
// | upstream                    | gateway answers                         | Pub/Sub |
// |-----------------------------|-----------------------------------------|---------|
// | 2xx                         | its response (stored; a non-ack 2xx     | ack     |
// |                             | status such as 203 is answered as 200)  |         |
// | non-2xx                     | 500, key released                       | nack    |
// | timeout / refused / broken  | 503, key released                       | nack    |
// | (duplicate: DONE in ttl)    | 204, upstream not called                | ack     |
// | (held by another instance)  | 503 with Retry-After                    | nack    |
//
// Thread safety: the returned handler may be called from any number of threads.
#pragma once

#include "config.h"
#include "deps.h"
#include "idempotency/http.h"
#include "idempotency/pubsub/idempotent.h"

namespace idempotency::gateway {

/// make_key_function() turns `--key` and `--key-prefix` into the library's key function.
[[nodiscard]] pubsub::KeyFunction make_key_function(const KeySpec& spec, const std::string& prefix);

/// make_pubsub_handler() builds the pubsub mode's request handler.
[[nodiscard]] http::Handler make_pubsub_handler(const Config& config, const GatewayDeps& deps);

}  // namespace idempotency::gateway
