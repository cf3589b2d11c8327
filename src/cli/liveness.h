// How a stored record would answer the next delivery, for `idem inspect`: judged by asking the
// core's pure `transition()`, so the CLI never restates the state machine.
//
// Thread safety: pure functions.
#pragma once

#include "idempotency/record.h"

namespace idempotency::cli {

/// Liveness is how a record answers a claim made at a given instant.
enum class Liveness {
  /// CLAIMED with a live lease: the claim is held by another.
  kHeld,
  /// DONE within its ttl: the claim is a duplicate.
  kDone,
  /// CLAIMED and the lease lapsed: the claim wins with fence + 1.
  kLeaseLapsed,
  /// Past `expires_at`: the record suppresses nothing and the claim wins.
  kTtlLapsed,
};

/// liveness() judges `record` at `now` (epoch milliseconds) as `transition()` does.
[[nodiscard]] Liveness liveness(const Record& record, Millis now);

/// now_millis() is this host's clock in epoch milliseconds.
[[nodiscard]] Millis now_millis();

}  // namespace idempotency::cli
