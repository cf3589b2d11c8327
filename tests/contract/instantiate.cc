// Instantiates every parameterized backend suite for the backend this program is built for
// (IDEMPOTENCY_BACKEND_NAME / IDEMPOTENCY_BACKEND_FACTORY come from CMake).
#include <gtest/gtest.h>

#include "contract/suites.h"

namespace idempotency::testing {

INSTANTIATE_TEST_SUITE_P(IDEMPOTENCY_BACKEND_NAME, BackendContract,
                         ::testing::Values(IDEMPOTENCY_BACKEND_FACTORY()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(IDEMPOTENCY_BACKEND_NAME, Differential,
                         ::testing::Values(IDEMPOTENCY_BACKEND_FACTORY()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(IDEMPOTENCY_BACKEND_NAME, Concurrency,
                         ::testing::Values(IDEMPOTENCY_BACKEND_FACTORY()),
                         [](const auto& info) { return info.param.name; });

// The contract and differential suites again, with a Reclaimer purging every millisecond
// beside each backend ("<Name>Reclaimed/…"): purging never changes an answer (issue 13). The
// indirection pastes the backend's name into the prefix before gtest's macro sees it.
#define IDEMPOTENCY_PASTE_(a, b) a##b
#define IDEMPOTENCY_PASTE(a, b) IDEMPOTENCY_PASTE_(a, b)
#define IDEMPOTENCY_INSTANTIATE_RECLAIMED(prefix, suite)                                     \
  INSTANTIATE_TEST_SUITE_P(prefix, suite,                                                    \
                           ::testing::Values(with_reclaimer(IDEMPOTENCY_BACKEND_FACTORY())), \
                           [](const auto& info) { return info.param.name; })
IDEMPOTENCY_INSTANTIATE_RECLAIMED(IDEMPOTENCY_PASTE(IDEMPOTENCY_BACKEND_NAME, Reclaimed),
                                  BackendContract);
IDEMPOTENCY_INSTANTIATE_RECLAIMED(IDEMPOTENCY_PASTE(IDEMPOTENCY_BACKEND_NAME, Reclaimed),
                                  Differential);

#ifdef IDEMPOTENCY_CROSS_INSTANCE
INSTANTIATE_TEST_SUITE_P(IDEMPOTENCY_BACKEND_NAME, CrossInstance,
                         ::testing::Values(IDEMPOTENCY_BACKEND_FACTORY()),
                         [](const auto& info) { return info.param.name; });
#endif

}  // namespace idempotency::testing
