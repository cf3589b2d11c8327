// What RedisLock opens with: its options, checked, and each connection's session (connected,
// authenticated, its database selected).
//
// Thread safety: pure functions.
#pragma once

#include "idempotency/redis_lock.h"
#include "redis_connection.h"
#include "redis_tls.h"

namespace idempotency::redis_detail {

/// validated() returns `o`, or throws `std::invalid_argument` naming the option out of range.
[[nodiscard]] RedisOptions validated(RedisOptions o);

/// open_session() connects to `node` (over TLS with `tls`), sends AUTH with the endpoint's
/// user and password when it has them and SELECT of its database when not 0. Throws
/// `StoreError` when a step fails (the server's message, never a password).
[[nodiscard]] ConnectionPtr open_session(const RedisNode& node, const RedisEndpoint& endpoint,
                                         const RedisOptions& options, const TlsContext* tls);

}  // namespace idempotency::redis_detail
