// The Datastore backend's registry entry: `datastore://` URLs, read by parse_datastore_url().
#include <memory>

#include "idempotency/backend_registry.h"
#include "idempotency/datastore_lock.h"

namespace idempotency::registry_detail {

BackendEntry datastore_backend_entry() {
  return BackendEntry{
      .schemes = {"datastore"},
      .url_form = "datastore://PROJECT[/NAMESPACE][?kind=K&database=D]",
      .open = [](BackendUrl& url, const BackendOptions& backend) -> std::unique_ptr<LockBackend> {
        return std::make_unique<DatastoreLock>(
            parse_datastore_url(url.str(), DatastoreOptions{.backend = backend}));
      }};
}

}  // namespace idempotency::registry_detail
