// The Redis backend's registry entry: `redis://` URLs, parsed by parse_redis_url().
#include <memory>

#include "idempotency/backend_registry.h"
#include "idempotency/redis_lock.h"

namespace idempotency::registry_detail {

BackendEntry redis_backend_entry() {
  return BackendEntry{
      .schemes = {"redis"},
      .url_form = "redis://HOST:PORT[/DB]",
      .open = [](BackendUrl& url, const BackendOptions& backend) -> std::unique_ptr<LockBackend> {
        return std::make_unique<RedisLock>(url.str(), RedisOptions{.backend = backend});
      }};
}

}  // namespace idempotency::registry_detail
