// The owner's step of once() against the store: claim the key, run the operation on a win,
// and complete or release by how it ended (internal to src/core; once.cc keeps the
// in-process single flight around it).
#pragma once

#include <string_view>

#include "idempotency/detail/once_engine.h"

namespace idempotency::detail {

/// claim_and_execute() claims `key` and, on a win, runs the operation as owner, renewing the
/// lease meanwhile; on a live holder elsewhere it waits up to `options.wait_for`. Runs on the
/// owner thread. Throws what the operation throws, `Cancelled`, and `StoreError`.
ErasedOutcome claim_and_execute(std::string_view key, LockBackend& backend,
                                const OnceOptions& options, const OnceHooks& hooks);

}  // namespace idempotency::detail
