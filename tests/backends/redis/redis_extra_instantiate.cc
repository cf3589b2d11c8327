// The contract, differential, concurrency and cross-instance suites once more over rediss://
// ("RedisTls/…") and on the fixture's Redis Clusters, plain ("RedisCluster/…") and TLS
// ("RedisClusterTls/…"), in the Redis contract program rather than programs of their own: the
// suites are the same code, only the transport and the routing differ. (No Reclaimed variant: Redis
// purges nothing.)
#include <gtest/gtest.h>

#include "contract/suites.h"
#include "support/backend_factory.h"

namespace idempotency::testing {

IDEMPOTENCY_INSTANTIATE(RedisTls, BackendContract, redis_tls_factory());
IDEMPOTENCY_INSTANTIATE(RedisTls, Differential, redis_tls_factory());
IDEMPOTENCY_INSTANTIATE(RedisTls, Concurrency, redis_tls_factory());
IDEMPOTENCY_INSTANTIATE(RedisTls, CrossInstance, redis_tls_factory());

IDEMPOTENCY_INSTANTIATE(RedisCluster, BackendContract, redis_cluster_factory());
IDEMPOTENCY_INSTANTIATE(RedisCluster, Differential, redis_cluster_factory());
IDEMPOTENCY_INSTANTIATE(RedisCluster, Concurrency, redis_cluster_factory());
IDEMPOTENCY_INSTANTIATE(RedisCluster, CrossInstance, redis_cluster_factory());

IDEMPOTENCY_INSTANTIATE(RedisClusterTls, BackendContract, redis_cluster_tls_factory());
IDEMPOTENCY_INSTANTIATE(RedisClusterTls, Differential, redis_cluster_tls_factory());
IDEMPOTENCY_INSTANTIATE(RedisClusterTls, Concurrency, redis_cluster_tls_factory());
IDEMPOTENCY_INSTANTIATE(RedisClusterTls, CrossInstance, redis_cluster_tls_factory());

}  // namespace idempotency::testing
