// BackendFactory: how the one contract suite (and the differential and concurrency tests)
// builds a fresh backend of each kind. A backend joins every suite by providing one of these.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>

#include "idempotency/backend.h"

namespace idempotency::testing {

struct BackendFactory {
  /// Shown in test names: "Memory", "Sqlite", "Redis", "Postgres".
  std::string name;
  /// Makes a fresh, empty backend (its own table / prefix / file) with `options`. Every
  /// backend honours `options.clock` when it is set (Redis and PostgreSQL then judge time by
  /// it instead of the server clock), so the suite moves time without sleeping.
  std::function<std::unique_ptr<LockBackend>(const BackendOptions& options)> make;
  /// True when the store treats a record as deleted exactly at its expires_at (Redis
  /// PEXPIREAT; the memory backend, which sweeps expired records as it writes), so a claim
  /// after it restarts at fence 1 instead of fence + 1.
  bool reaps_at_expiry = false;
  /// Makes two backend instances over one fresh store, as two processes sharing it would
  /// have (for the cross-instance `once` suite). Empty for a store no two instances share.
  std::function<std::pair<std::unique_ptr<LockBackend>, std::unique_ptr<LockBackend>>(
      const BackendOptions& options)>
      make_twins;
  /// Zero: the suites run the backend as it is. Positive (set by the contract suites'
  /// `with_reclaimer`): each backend a suite makes runs a `Reclaimer` at this interval for the
  /// test's whole life, and every move of the suite's clock waits for a pass that started
  /// after it, so expired records are gone by the time the move returns.
  std::chrono::milliseconds reclaim_interval{0};
};

inline std::ostream& operator<<(std::ostream& os, const BackendFactory& f) { return os << f.name; }

/// Factories for each backend built into this tree; each lives beside its backend's tests.
BackendFactory memory_factory();
BackendFactory sqlite_factory();
BackendFactory redis_factory();
/// Redis over TLS (`rediss://`, the redis_server fixture's TLS port).
BackendFactory redis_tls_factory();
/// Redis Cluster (`redis+cluster://`, the redis_server fixture's 3-master cluster).
BackendFactory redis_cluster_factory();
/// The same cluster over TLS (`rediss+cluster://`, every node's TLS port).
BackendFactory redis_cluster_tls_factory();
BackendFactory postgres_factory();
/// PostgreSQL over TLS (verify-full), and through PgBouncer in transaction pooling mode.
BackendFactory postgres_tls_factory();
BackendFactory pgbouncer_factory();
BackendFactory datastore_factory();

}  // namespace idempotency::testing
