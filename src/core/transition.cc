// The record state machine: every row of the seed's transition table, in one pure function.
#include <algorithm>
#include <utility>

#include "idempotency/record.h"

namespace idempotency {
namespace {

// A record past its expires_at suppresses nothing and may vanish at any moment (Redis reaps
// it exactly then), so no answer may depend on whether it is still physically there, except
// a claim's fence: a surviving record keeps rising (fence + 1), a deleted one restarts at 1.
bool is_expired(const Record& r, Millis now) { return now >= r.expires_at; }

// The apply_* functions own their inputs (transition() takes them by value): they move the
// record and the operation's strings into the result instead of copying them.
Transition unchanged(std::optional<Record>& current, Answer answer) {
  return Transition{std::move(current), answer, false};
}

Transition apply_claim(std::optional<Record>& current, ClaimOp& op, Millis now) {
  auto fresh = [&](std::int64_t fence) {
    Record r;
    r.state = RecordState::kClaimed;
    r.fence = fence;
    r.lease_expiry = now + op.lease;
    r.expires_at = now + op.lease + op.ttl;
    r.claim_token = std::move(op.claim_token);
    r.fingerprint = std::move(op.fingerprint);
    return Transition{std::move(r), Answer{ClaimAnswer::kWon, true}, true};
  };
  if (!current) return fresh(1);
  const Record& r = *current;
  // A retried claim call finds its own claim: re-affirm it, same fence, nothing written. Only
  // while its lease is live: a lapsed claim goes through the reclaim below (fence + 1), and a
  // released one has no token left (see apply_release), so neither can come back to life.
  if (r.state == RecordState::kClaimed && !op.claim_token.empty() &&
      r.claim_token == op.claim_token && now < r.lease_expiry && !is_expired(r, now)) {
    return unchanged(current, Answer{ClaimAnswer::kWon, true});
  }
  if (is_expired(r, now)) return fresh(r.fence + 1);
  if (r.state == RecordState::kDone)
    return unchanged(current, Answer{ClaimAnswer::kAlreadyDone, false});
  if (now < r.lease_expiry) return unchanged(current, Answer{ClaimAnswer::kHeldByOther, false});
  return fresh(r.fence + 1);  // the holder crashed or gave up: reclaim (self-heal)
}

Transition apply_complete(std::optional<Record>& current, CompleteOp& op, Millis now) {
  if (!current || is_expired(*current, now) || current->fence != op.fence) {
    return unchanged(current, Answer{std::nullopt, false});
  }
  if (current->state == RecordState::kDone) return unchanged(current, Answer{std::nullopt, true});
  // No lease guard: until someone reclaims, the lapsed holder is the only one that ran the work.
  Record r = std::move(*current);
  r.state = RecordState::kDone;
  r.result = std::move(op.result);
  r.expires_at = now + op.ttl;
  return Transition{std::move(r), Answer{std::nullopt, true}, true};
}

Transition apply_release(std::optional<Record>& current, const ReleaseOp& op, Millis now) {
  if (!current || is_expired(*current, now) || current->fence != op.fence ||
      current->state == RecordState::kDone) {
    return unchanged(current, Answer{std::nullopt, false});
  }
  Record r = std::move(*current);
  r.lease_expiry = now;
  // Advancing the fence kills the released claim; keeping the record keeps the fence.
  r.fence += 1;
  // Nobody holds the new fence, so no token may re-affirm it, whatever the clocks say.
  r.claim_token.clear();
  r.expires_at = std::max(r.expires_at, now + op.ttl);
  return Transition{std::move(r), Answer{std::nullopt, true}, true};
}

// A heartbeat. Fence and token say who holds the key: a reclaim advanced the fence, a release
// advanced it and cleared the token, so a match is the sole holder even past its lease (nobody
// reclaimed in between), just as complete has no lease guard. Re-sent after a lost reply, it
// extends again: idempotent.
Transition apply_extend(std::optional<Record>& current, const ExtendOp& op, Millis now) {
  if (!current || is_expired(*current, now) || current->fence != op.fence ||
      current->state != RecordState::kClaimed || op.claim_token.empty() ||
      current->claim_token != op.claim_token) {
    return unchanged(current, Answer{std::nullopt, false});
  }
  const Millis lease_expiry = now + op.lease;
  const Millis expires_at = std::max(current->expires_at, now + op.lease + op.ttl);
  const bool changed = lease_expiry != current->lease_expiry || expires_at != current->expires_at;
  Record r = std::move(*current);
  r.lease_expiry = lease_expiry;
  r.expires_at = expires_at;
  return Transition{std::move(r), Answer{std::nullopt, true}, changed};
}

}  // namespace

Transition transition(std::optional<Record> current, Operation op, Millis now) {
  struct Visitor {
    std::optional<Record>& current;
    Millis now;
    Transition operator()(ClaimOp& o) const { return apply_claim(current, o, now); }
    Transition operator()(CompleteOp& o) const { return apply_complete(current, o, now); }
    Transition operator()(const ReleaseOp& o) const { return apply_release(current, o, now); }
    Transition operator()(const ExtendOp& o) const { return apply_extend(current, o, now); }
  };
  return std::visit(Visitor{current, now}, op);
}

}  // namespace idempotency
