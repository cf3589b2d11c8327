// WaitCounts: how a store's cross-instance waits ended, for the stores that push changes
// (RedisLock, PostgresLock).
#pragma once

#include <cstdint>

namespace idempotency {

/// WaitCounts tallies how an instance's cross-instance waits (`once` with `wait_for` while a
/// holder elsewhere runs) ended: for metrics, and for tests that must tell a wake-up by the
/// store's notification from a timeout without measuring time.
struct WaitCounts {
  std::uint64_t settled = 0;      ///< the record was settled or lapsed: no wait
  std::uint64_t notified = 0;     ///< woken by the key's notification (NOTIFY, a message)
  std::uint64_t timed_out = 0;    ///< the wait's timeout passed first
  std::uint64_t stopped = 0;      ///< the caller's stop token fired
  std::uint64_t unavailable = 0;  ///< the server or the listening connection failed: slept
  /// No notifications to listen to (PostgreSQL behind a transaction pooler): slept, then
  /// `once` claims again. Always 0 on Redis.
  std::uint64_t polled = 0;
};

}  // namespace idempotency
