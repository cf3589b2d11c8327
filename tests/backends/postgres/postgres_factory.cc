// The contract suite's factories for PostgresLock: a fresh table per backend on the test
// server, reached directly, over TLS, or through PgBouncer.
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
namespace {

// factory_for() makes PostgresLocks at the URL `url_of()` returns (`what` names that server
// when there is none) in `mode`.
BackendFactory factory_for(std::string name, std::string (*url_of)(), std::string what,
                           PostgresPoolMode mode) {
  BackendFactory f;
  f.name = std::move(name);
  f.reaps_at_expiry = false;  // records stay until purge_expired()
  f.make = [url_of, what, mode](const BackendOptions& options) -> std::unique_ptr<LockBackend> {
    const std::string url = url_of();
    if (url.empty()) {
      // Outside CI a developer without the server skips; in CI a missing server fails. Both
      // are recorded from a void helper, so SetUp returns and gtest skips the test body.
      if (std::getenv("CI") != nullptr) {
        [&] { FAIL() << "CI is set but there is no " << what; }();
      } else {
        [&] { GTEST_SKIP() << "no " << what; }();
      }
      return nullptr;
    }
    return std::make_unique<PostgresLock>(
        url,
        PostgresOptions{
            .backend = options, .table = unique_name("idem"), .pool_size = 16, .pool_mode = mode});
  };
  f.make_twins = [url_of, what, mode](const BackendOptions& options) {
    const std::string url = url_of();
    if (url.empty()) throw std::runtime_error("no " + what);
    const std::string table = unique_name("idem_twins");
    auto make = [&] {
      return std::make_unique<PostgresLock>(
          url,
          PostgresOptions{.backend = options, .table = table, .pool_size = 4, .pool_mode = mode});
    };
    std::unique_ptr<LockBackend> a = make();
    std::unique_ptr<LockBackend> b = make();
    return std::make_pair(std::move(a), std::move(b));
  };
  return f;
}

}  // namespace

BackendFactory postgres_factory() {
  return factory_for("Postgres", postgres_url, "PostgreSQL test server (set POSTGRES_URL)",
                     PostgresPoolMode::kSession);
}

BackendFactory postgres_tls_factory() {
  return factory_for("PostgresTls", postgres_tls_url,
                     "PostgreSQL test server with TLS (set POSTGRES_TLS_URL)",
                     PostgresPoolMode::kSession);
}

BackendFactory pgbouncer_factory() {
  return factory_for("PostgresBouncer", pgbouncer_url,
                     "PgBouncer in transaction mode (set PGBOUNCER_URL)",
                     PostgresPoolMode::kTransaction);
}

}  // namespace idempotency::testing
