// The Redis backend's registry entry: `redis://` and `rediss://` (TLS) URLs, parsed by
// parse_redis_url().
#include <memory>

#include "idempotency/backend_registry.h"
#include "idempotency/redis_lock.h"

namespace idempotency::registry_detail {

BackendEntry redis_backend_entry() {
  return BackendEntry{
      .schemes = {"redis", "rediss"},
      .url_form = "redis[s]://HOST:PORT[/DB][?ca=PATH]",
      .open = [](BackendUrl& url, const BackendOptions& backend) -> std::unique_ptr<LockBackend> {
        return std::make_unique<RedisLock>(url.str(), RedisOptions{.backend = backend});
      }};
}

}  // namespace idempotency::registry_detail
