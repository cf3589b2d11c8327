// The contract, differential, concurrency and cross-instance suites once more over rediss://
// ("RedisTls/…") and on the fixture's Redis Cluster ("RedisCluster/…"), in the Redis contract
// program rather than programs of their own: the suites are the same code, only the transport
// and the routing differ. (No Reclaimed variant: Redis purges nothing.)
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

INSTANTIATE_TEST_SUITE_P(RedisCluster, BackendContract, ::testing::Values(redis_cluster_factory()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(RedisCluster, Differential, ::testing::Values(redis_cluster_factory()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(RedisCluster, Concurrency, ::testing::Values(redis_cluster_factory()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(RedisCluster, CrossInstance, ::testing::Values(redis_cluster_factory()),
                         [](const auto& info) { return info.param.name; });

}  // namespace idempotency::testing
