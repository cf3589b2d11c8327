// The contract, differential, concurrency and cross-instance suites once more over rediss://
// ("RedisTls/…") and on the fixture's Redis Clusters, plain ("RedisCluster/…") and TLS
// ("RedisClusterTls/…"), in the Redis contract program rather than programs of their own: the
// suites are the same code, only the transport and the routing differ. (No Reclaimed variant: Redis
// purges nothing.)
#include <gtest/gtest.h>

#include "contract/suites.h"
#include "support/backend_factory.h"

namespace idempotency::testing {

IDEMPOTENCY_INSTANTIATE_ALL(RedisTls, redis_tls_factory());
IDEMPOTENCY_INSTANTIATE_ALL(RedisCluster, redis_cluster_factory());
IDEMPOTENCY_INSTANTIATE_ALL(RedisClusterTls, redis_cluster_tls_factory());

}  // namespace idempotency::testing
