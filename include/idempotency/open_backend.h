// open_backend(): the backend a URL names, for everything that takes a backend as a string
// (the gateway's --backend, the idem CLI, the examples' environment variables).
//
//   memory://                              InMemoryLock (this process only)
//   sqlite:///var/lib/idempotency/idem.db  SqliteLock on that file (?table=NAME)
//   redis://[user:password@]host:port[/db] RedisLock
//   postgres://user:password@host:port/db  PostgresLock (also postgresql://; ?table=NAME)
//   datastore://PROJECT[/NAMESPACE]?kind=K&database=D   DatastoreLock (Firestore in Datastore mode)
//
// Only the backends built into this installation are available; `backend_schemes()` lists
// them. Errors never echo the URL, which may hold a password.
//
// Thread safety: pure factory functions.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "idempotency/backend.h"

namespace idempotency {

/// open_backend() builds the backend `url` names with `options` (ttl, clock). Throws
/// `std::invalid_argument` for an unknown scheme or a malformed URL, and `StoreError` when the
/// store cannot be reached or opened.
[[nodiscard]] std::unique_ptr<LockBackend> open_backend(std::string_view url,
                                                        const BackendOptions& options = {});

/// backend_schemes() lists the URL schemes this build supports, e.g. {"memory", "sqlite"}.
[[nodiscard]] std::vector<std::string> backend_schemes();

}  // namespace idempotency
