// The shared suites again in the PostgreSQL contract program, for the backend's other ways in:
// over TLS with sslmode=verify-full (the contract suite: every operation's statement travels
// encrypted), and through PgBouncer in transaction pooling mode (every suite, the
// cross-instance one included, whose waiters are then woken by polling, not NOTIFY).
#include <gtest/gtest.h>

#include "contract/suites.h"

namespace idempotency::testing {

IDEMPOTENCY_INSTANTIATE(PostgresTls, BackendContract, postgres_tls_factory());
IDEMPOTENCY_INSTANTIATE_ALL(PostgresBouncer, pgbouncer_factory());

}  // namespace idempotency::testing
