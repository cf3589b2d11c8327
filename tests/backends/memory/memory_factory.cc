#include "idempotency/memory_lock.h"
#include "support/backend_factory.h"

namespace idempotency::testing {

BackendFactory memory_factory() {
  return BackendFactory{.name = "Memory",
                        .make = [](const BackendOptions& options) -> std::unique_ptr<LockBackend> {
                          return std::make_unique<InMemoryLock>(options);
                        },
                        // An expired record is absent (and swept by later writes), as on Redis.
                        .reaps_at_expiry = true};
}

}  // namespace idempotency::testing
