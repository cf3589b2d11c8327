// The contract, differential, concurrency and cross-instance suites once more over rediss://
// ("RedisTls/…"), in the Redis contract program rather than one of its own: the suites are the
// same code, only the transport differs. (No Reclaimed variant: Redis purges nothing.)
#include <gtest/gtest.h>

#include "contract/suites.h"
#include "support/backend_factory.h"

namespace idempotency::testing {

INSTANTIATE_TEST_SUITE_P(RedisTls, BackendContract, ::testing::Values(redis_tls_factory()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(RedisTls, Differential, ::testing::Values(redis_tls_factory()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(RedisTls, Concurrency, ::testing::Values(redis_tls_factory()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(RedisTls, CrossInstance, ::testing::Values(redis_tls_factory()),
                         [](const auto& info) { return info.param.name; });

}  // namespace idempotency::testing
