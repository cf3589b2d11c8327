// The Redis entries of the contract, differential and concurrency suites: a RedisLock on the
// fixture's server (or REDIS_URL), and one on the same fixture's TLS port (rediss://), each with
// a fresh key prefix per backend, and one on the same fixture's Redis Cluster.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "idempotency/redis_lock.h"
#include "support/backend_factory.h"
#include "support/test_servers.h"

namespace idempotency::testing {

namespace {

std::string required(std::string url, const char* why) {
  if (url.empty()) {
    // No skip: a missing server must fail the run (in CI above all), never pass it.
    if (std::getenv("CI") != nullptr) ADD_FAILURE() << why;
    throw std::runtime_error(why);
  }
  return url;
}

std::string required_url() {
  return required(redis_url(),
                  "no Redis server: run through ctest (the redis_server fixture starts one) or "
                  "set REDIS_URL");
}

std::string required_tls_url() {
  return required(redis_tls_url(),
                  "no Redis TLS port: run through ctest (the redis_server fixture starts one)");
}

std::string required_cluster_url() {
  return required(redis_cluster_url(),
                  "no Redis Cluster: run through ctest (the redis_all fixture starts one)");
}

std::string required_cluster_tls_url() {
  return required(redis_cluster_tls_url(),
                  "no TLS Redis Cluster: run through ctest (the redis_all fixture starts one)");
}

// The suites' backends wait up to 10 s for the shared server, not the default 2 s: no suite here
// tests a timeout (the fault tests do, each on a server of its own), and on the 2-core VM, with
// PostgreSQL's suites and clang-tidy running beside a sanitized program, a differential test saw
// no reply within 2 s three times in a week. A call that never gets its reply still fails.
RedisOptions suite_options(const BackendOptions& options, std::string key_prefix) {
  return RedisOptions{.backend = options,
                      .key_prefix = std::move(key_prefix),
                      .connect_timeout = std::chrono::seconds(10),
                      .command_timeout = std::chrono::seconds(10)};
}

BackendFactory factory_for(std::string name, std::function<std::string()> url) {
  BackendFactory factory;
  factory.name = std::move(name);
  factory.reaps_at_expiry = true;  // PEXPIREAT; the script treats an expired record as absent
  factory.make = [url](const BackendOptions& options) -> std::unique_ptr<LockBackend> {
    return std::make_unique<RedisLock>(url(),
                                       suite_options(options, unique_name("idem_contract") + ":"));
  };
  factory.make_twins = [url](const BackendOptions& options) {
    const std::string prefix = unique_name("idem_twins") + ":";
    auto make = [&] { return std::make_unique<RedisLock>(url(), suite_options(options, prefix)); };
    std::unique_ptr<LockBackend> a = make();
    std::unique_ptr<LockBackend> b = make();
    return std::make_pair(std::move(a), std::move(b));
  };
  return factory;
}

}  // namespace

BackendFactory redis_factory() { return factory_for("Redis", required_url); }

BackendFactory redis_tls_factory() { return factory_for("RedisTls", required_tls_url); }

BackendFactory redis_cluster_factory() { return factory_for("RedisCluster", required_cluster_url); }

BackendFactory redis_cluster_tls_factory() {
  return factory_for("RedisClusterTls", required_cluster_tls_url);
}

}  // namespace idempotency::testing
