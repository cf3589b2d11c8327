// The Redis entry of the contract, differential and concurrency suites: a RedisLock on the
// fixture's server (or REDIS_URL), with a fresh key prefix per backend.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include "idempotency/redis_lock.h"
#include "support/backend_factory.h"
#include "support/test_servers.h"

namespace idempotency::testing {

namespace {

std::string required_url() {
  const std::string url = redis_url();
  if (url.empty()) {
    // No skip: a missing server must fail the run (in CI above all), never pass it.
    const char* why =
        "no Redis server: run through ctest (the redis_server fixture starts one) or set "
        "REDIS_URL";
    if (std::getenv("CI") != nullptr) ADD_FAILURE() << why;
    throw std::runtime_error(why);
  }
  return url;
}

}  // namespace

BackendFactory redis_factory() {
  BackendFactory factory;
  factory.name = "Redis";
  factory.reaps_at_expiry = true;  // PEXPIREAT; the script treats an expired record as absent
  factory.make = [](const BackendOptions& options) -> std::unique_ptr<LockBackend> {
    return std::make_unique<RedisLock>(
        required_url(),
        RedisOptions{.backend = options, .key_prefix = unique_name("idem_contract") + ":"});
  };
  factory.make_twins = [](const BackendOptions& options) {
    const std::string prefix = unique_name("idem_twins") + ":";
    auto make = [&] {
      return std::make_unique<RedisLock>(required_url(),
                                         RedisOptions{.backend = options, .key_prefix = prefix});
    };
    std::unique_ptr<LockBackend> a = make();
    std::unique_ptr<LockBackend> b = make();
    return std::make_pair(std::move(a), std::move(b));
  };
  return factory;
}

}  // namespace idempotency::testing
