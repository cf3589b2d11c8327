// The backends built into this tree, in the order the registry lists them. Defined in
// built_in_backends.cc, which CMake generates from the backends that are switched on.
#pragma once

#include <vector>

#include "idempotency/backend_registry.h"

namespace idempotency::registry_detail {

/// built_in_backends() returns the entry of every backend built into this tree.
[[nodiscard]] std::vector<BackendEntry> built_in_backends();

}  // namespace idempotency::registry_detail
