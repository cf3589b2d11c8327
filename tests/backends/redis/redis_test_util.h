// Helpers shared by the Redis-specific tests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <variant>

#include "idempotency/redis_lock.h"
#include "support/eventually.h"
#include "support/test_servers.h"

namespace idempotency::testing {

/// The fixture server's URL; a missing server fails the test (never a silent pass).
inline std::string fixture_redis_url() {
  std::string url = redis_url();
  if (url.empty()) {
    throw std::runtime_error(
        "no Redis server: run through ctest (the redis_server fixture starts one) or set "
        "REDIS_URL");
  }
  return url;
}

/// A RedisLock on the fixture server under a fresh prefix.
// The command timeout is 10 s, not the default 2 s: the fixture server is shared by the test
// programs ctest runs side by side, and under the sanitizers on two cores it once left a call
// unanswered for 2 s. No test of this lock is about that timeout (the fault tests set their
// own, on private servers).
inline std::unique_ptr<RedisLock> fixture_lock(BackendOptions backend = {},
                                               std::size_t pool_size = 8) {
  return std::make_unique<RedisLock>(
      fixture_redis_url(), RedisOptions{.backend = std::move(backend),
                                        .key_prefix = unique_name("idem_redis_test") + ":",
                                        .pool_size = pool_size,
                                        .command_timeout = std::chrono::seconds(10)});
}

inline const char* outcome(const ClaimResult& r) {
  if (std::holds_alternative<Won>(r)) return "Won";
  if (std::holds_alternative<AlreadyDone>(r)) return "AlreadyDone";
  return "HeldByOther";
}

/// The claim of a result that must be Won.
inline Claim won(const ClaimResult& r) {
  if (!std::holds_alternative<Won>(r)) {
    throw std::runtime_error(std::string("expected Won, got ") + outcome(r));
  }
  return std::get<Won>(r).claim;
}

}  // namespace idempotency::testing
