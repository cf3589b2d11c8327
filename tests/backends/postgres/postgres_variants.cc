// The shared suites again in the PostgreSQL contract program, for the backend's other ways in:
// over TLS with sslmode=verify-full (the contract suite: every operation's statement travels
// encrypted), and through PgBouncer in transaction pooling mode (every suite, the
// cross-instance one included, whose waiters are then woken by polling, not NOTIFY).
#include <gtest/gtest.h>

#include "contract/suites.h"

namespace idempotency::testing {
namespace {

const auto kName = [](const auto& info) { return info.param.name; };

}  // namespace

INSTANTIATE_TEST_SUITE_P(PostgresTls, BackendContract, ::testing::Values(postgres_tls_factory()),
                         kName);
INSTANTIATE_TEST_SUITE_P(PostgresBouncer, BackendContract, ::testing::Values(pgbouncer_factory()),
                         kName);
INSTANTIATE_TEST_SUITE_P(PostgresBouncer, Differential, ::testing::Values(pgbouncer_factory()),
                         kName);
INSTANTIATE_TEST_SUITE_P(PostgresBouncer, Concurrency, ::testing::Values(pgbouncer_factory()),
                         kName);
INSTANTIATE_TEST_SUITE_P(PostgresBouncer, CrossInstance, ::testing::Values(pgbouncer_factory()),
                         kName);

}  // namespace idempotency::testing
