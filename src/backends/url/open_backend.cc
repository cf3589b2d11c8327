#include "idempotency/open_backend.h"

#include "idempotency/backend_registry.h"
#include "idempotency/backend_url.h"

namespace idempotency {

std::vector<std::string> backend_schemes() {
  std::vector<std::string> schemes;
  for (const auto* entry : registered_backends()) schemes.push_back(entry->schemes.front());
  return schemes;
}

std::unique_ptr<LockBackend> open_backend(std::string_view url, const BackendOptions& options) {
  BackendUrl parsed = BackendUrl::parse(url);
  return backend_for(parsed).open(parsed, options);
}

}  // namespace idempotency
