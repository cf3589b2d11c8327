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

#ifdef IDEMPOTENCY_CROSS_INSTANCE
INSTANTIATE_TEST_SUITE_P(IDEMPOTENCY_BACKEND_NAME, CrossInstance,
                         ::testing::Values(IDEMPOTENCY_BACKEND_FACTORY()),
                         [](const auto& info) { return info.param.name; });
#endif

}  // namespace idempotency::testing
