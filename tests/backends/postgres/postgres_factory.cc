// The contract suite's factory for PostgresLock: a fresh table per backend on the test server.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "idempotency/postgres_lock.h"
#include "support/backend_factory.h"
#include "support/test_servers.h"

namespace idempotency::testing {

BackendFactory postgres_factory() {
  BackendFactory f;
  f.name = "Postgres";
  f.reaps_at_expiry = false;  // records stay until purge_expired()
  f.make = [](const BackendOptions& options) -> std::unique_ptr<LockBackend> {
    const std::string url = postgres_url();
    if (url.empty()) {
      // Outside CI a developer without PostgreSQL skips; in CI a missing server fails. Both
      // are recorded from a void helper, so SetUp returns and gtest skips the test body.
      if (std::getenv("CI") != nullptr) {
        [] { FAIL() << "CI is set but there is no PostgreSQL test server (POSTGRES_URL)"; }();
      } else {
        [] { GTEST_SKIP() << "no PostgreSQL test server (set POSTGRES_URL)"; }();
      }
      return nullptr;
    }
    return std::make_unique<PostgresLock>(
        url, PostgresOptions{.backend = options, .table = unique_name("idem"), .pool_size = 16});
  };
  f.make_twins = [](const BackendOptions& options) {
    const std::string url = postgres_url();
    if (url.empty()) throw std::runtime_error("no PostgreSQL test server (set POSTGRES_URL)");
    const std::string table = unique_name("idem_twins");
    auto make = [&] {
      return std::make_unique<PostgresLock>(
          url, PostgresOptions{.backend = options, .table = table, .pool_size = 4});
    };
    std::unique_ptr<LockBackend> a = make();
    std::unique_ptr<LockBackend> b = make();
    return std::make_pair(std::move(a), std::move(b));
  };
  return f;
}

}  // namespace idempotency::testing
