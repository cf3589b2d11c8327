// The memory backend's registry entry: `memory://`, nothing after it.
#include <memory>
#include <stdexcept>

#include "idempotency/backend_registry.h"
#include "idempotency/memory_lock.h"

namespace idempotency::registry_detail {

BackendEntry memory_backend_entry() {
  return BackendEntry{
      .schemes = {"memory"},
      .url_form = "memory://",
      .open = [](BackendUrl& url, const BackendOptions& options) -> std::unique_ptr<LockBackend> {
        if (!url.location().empty() || !url.parameters().empty()) {
          throw std::invalid_argument("memory backend URL takes nothing: memory://");
        }
        return std::make_unique<InMemoryLock>(options);
      }};
}

}  // namespace idempotency::registry_detail
