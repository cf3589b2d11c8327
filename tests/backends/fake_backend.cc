#include "backends/fake_backend.h"

#include <memory>
#include <mutex>
#include <string>

#include "idempotency/backend_registry.h"
#include "idempotency/open_backend.h"

namespace idempotency::testing {

void register_fake_backend() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_backend(BackendEntry{
        .schemes = {"fake"},
        .url_form = "fake://INNER-URL",
        .open = [](BackendUrl& url, const BackendOptions& options) -> std::unique_ptr<LockBackend> {
          // Everything after "fake://", the inner URL's own parameters included.
          const std::string inner = url.str().substr(url.scheme().size() + 3);
          return std::make_unique<FakeBackend>(
              std::shared_ptr<LockBackend>(open_backend(inner, options)));
        }});
  });
}

}  // namespace idempotency::testing
