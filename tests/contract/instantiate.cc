// Instantiates every parameterized backend suite for the backend this program is built for
// (IDEMPOTENCY_BACKEND_NAME / IDEMPOTENCY_BACKEND_FACTORY come from CMake).
#include <gtest/gtest.h>

#include "contract/suites.h"

namespace idempotency::testing {

IDEMPOTENCY_INSTANTIATE(IDEMPOTENCY_BACKEND_NAME, BackendContract, IDEMPOTENCY_BACKEND_FACTORY());
IDEMPOTENCY_INSTANTIATE(IDEMPOTENCY_BACKEND_NAME, Differential, IDEMPOTENCY_BACKEND_FACTORY());
IDEMPOTENCY_INSTANTIATE(IDEMPOTENCY_BACKEND_NAME, Concurrency, IDEMPOTENCY_BACKEND_FACTORY());

// The contract and differential suites again, with a Reclaimer purging every millisecond
// beside each backend ("<Name>Reclaimed/…"): purging never changes an answer (issue 13).
// IDEMPOTENCY_INSTANTIATE expands the pasted prefix before gtest's macro sees it.
#define IDEMPOTENCY_PASTE_(a, b) a##b
#define IDEMPOTENCY_PASTE(a, b) IDEMPOTENCY_PASTE_(a, b)
IDEMPOTENCY_INSTANTIATE(IDEMPOTENCY_PASTE(IDEMPOTENCY_BACKEND_NAME, Reclaimed), BackendContract,
                        with_reclaimer(IDEMPOTENCY_BACKEND_FACTORY()));
IDEMPOTENCY_INSTANTIATE(IDEMPOTENCY_PASTE(IDEMPOTENCY_BACKEND_NAME, Reclaimed), Differential,
                        with_reclaimer(IDEMPOTENCY_BACKEND_FACTORY()));

#ifdef IDEMPOTENCY_CROSS_INSTANCE
IDEMPOTENCY_INSTANTIATE(IDEMPOTENCY_BACKEND_NAME, CrossInstance, IDEMPOTENCY_BACKEND_FACTORY());
#endif

}  // namespace idempotency::testing
