// The Redis backend's registry entry: `redis://`, `rediss://` (TLS) and the Redis Cluster forms
// `redis+cluster://` and `rediss+cluster://`, parsed by
// parse_redis_url().
#include <memory>

#include "idempotency/backend_registry.h"
#include "idempotency/redis_lock.h"

namespace idempotency::registry_detail {

BackendEntry redis_backend_entry() {
  return BackendEntry{
      .schemes = {"redis", "rediss", "redis+cluster", "rediss+cluster"},
      .url_form = "redis[s]://HOST:PORT[/DB][?ca=PATH] | redis[s]+cluster://HOST:PORT[,HOST:PORT…]",
      .open = [](BackendUrl& url, const BackendOptions& backend) -> std::unique_ptr<LockBackend> {
        return std::make_unique<RedisLock>(url.str(), RedisOptions{.backend = backend});
      }};
}

}  // namespace idempotency::registry_detail
