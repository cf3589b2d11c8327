// open_backend(): the backend a URL names, for everything that takes a backend as a string
// (the gateway's --backend, the idem CLI, the examples' environment variables), e.g.
//
//   memory://                              InMemoryLock (this process only)
//   sqlite:///var/lib/idempotency/idem.db  SqliteLock on that file (?table=NAME)
//
// Every backend the registry knows is reachable (backend_registry.h; the README's backend
// table lists the URL forms): those built into this installation, which `backend_schemes()`
// lists, and any a program registered itself. Errors never echo the URL, which may hold a
// password.
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
/// `std::invalid_argument` for an unknown scheme, a malformed URL or an unknown parameter, and
/// `StoreError` when the store cannot be reached or opened.
[[nodiscard]] std::unique_ptr<LockBackend> open_backend(std::string_view url,
                                                        const BackendOptions& options = {});

/// backend_schemes() lists the registered backends by name (the first scheme of each), e.g.
/// {"memory", "sqlite"}.
[[nodiscard]] std::vector<std::string> backend_schemes();

}  // namespace idempotency
