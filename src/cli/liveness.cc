#include "liveness.h"

#include "idempotency/clock.h"

namespace idempotency::cli {

Liveness liveness(const Record& record, Millis now) {
  // A claim with no token never re-affirms anything: it is exactly the next delivery's claim.
  // Lease and ttl only shape the record it would write, not the answer.
  const Transition next = transition(record, ClaimOp{.lease = 1, .ttl = 1}, now);
  if (next.answer.claim == ClaimAnswer::kHeldByOther) return Liveness::kHeld;
  if (next.answer.claim == ClaimAnswer::kAlreadyDone) return Liveness::kDone;
  // The claim wins. The record's own holder may still complete it until the record expires,
  // and only then: that tells a lapsed lease from a lapsed ttl.
  const Transition own = transition(record, CompleteOp{.fence = record.fence, .ttl = 1}, now);
  return own.answer.ok ? Liveness::kLeaseLapsed : Liveness::kTtlLapsed;
}

Millis now_millis() { return to_millis(system_clock()->now()); }

}  // namespace idempotency::cli
