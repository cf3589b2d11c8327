// The idempotency record and its state machine: the one truth every backend stores.
//
// A key maps to at most one `Record`. `transition()` is the single, pure definition of how
// a record answers `claim`, `complete`, `release` and `extend` at a given instant. Backends that
// read-modify-write under a transaction (memory, SQLite, Datastore) call it directly;
// backends that decide server-side in one round trip (Redis Lua, a PostgreSQL statement)
// re-express it, and a differential test holds them to it.
//
// Thread safety: everything here is a value type or a pure function; safe from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>

namespace idempotency {

/// Epoch milliseconds: the unit every backend stores, so records compare across stores.
using Millis = std::int64_t;

/// The two stored states. "Reclaimable" is never stored: it is what `claim` sees when a
/// lease or a ttl has lapsed, judged lazily on every read.
enum class RecordState : std::uint8_t { kClaimed = 1, kDone = 2 };

/// One key's record. Times are epoch milliseconds of the clock the backend judges by.
struct Record {
  RecordState state = RecordState::kClaimed;
  /// Fencing token: >= 1 and only ever rises while the record exists; a record deleted after
  /// its `expires_at` takes its fence with it, and the key's next claim starts at 1.
  std::int64_t fence = 1;
  /// Until this instant a CLAIMED record is held by its claimant (mutual exclusion).
  Millis lease_expiry = 0;
  /// From this instant the record suppresses nothing and may be physically deleted.
  Millis expires_at = 0;
  /// Per claim call; a retried claim carrying the same token re-affirms instead of locking
  /// itself out, while the lease is live. Empty after a release.
  std::string claim_token;
  /// The operation's result bytes, stored by `complete` (DONE only).
  std::optional<std::string> result;
  /// A fingerprint of the request payload, stored at claim, so a key reused with another
  /// payload can be refused.
  std::optional<std::string> fingerprint;

  friend bool operator==(const Record&, const Record&) = default;
};

/// `claim(key, lease)`: take the key if it is absent or reclaimable.
struct ClaimOp {
  std::string claim_token;
  Millis lease = 0;
  Millis ttl = 0;
  std::optional<std::string> fingerprint;
};

/// `complete(claim, result)`: CLAIMED -> DONE when the fence matches (no lease guard).
struct CompleteOp {
  std::int64_t fence = 0;
  std::optional<std::string> result;
  Millis ttl = 0;
};

/// `release(claim)`: expire the lease in place and advance the fence; never delete.
struct ReleaseOp {
  std::int64_t fence = 0;
  Millis ttl = 0;
};

/// `extend(claim, lease)`: the live holder renews its lease (a heartbeat). Only a CLAIMED
/// record with this fence and claim token, not past `expires_at`, moves; anything else is
/// refused unchanged.
struct ExtendOp {
  std::int64_t fence = 0;
  std::string claim_token;
  Millis lease = 0;
  Millis ttl = 0;
};

using Operation = std::variant<ClaimOp, CompleteOp, ReleaseOp, ExtendOp>;

/// How `transition` answered a claim.
enum class ClaimAnswer : std::uint8_t { kWon, kAlreadyDone, kHeldByOther };

/// What the caller of an operation is told. For a claim, `claim` is set; for complete, `ok`
/// says whether the fence matched; for release, `ok` says whether the record changed; for
/// extend, `ok` says whether the claim still holds the key (its lease now runs on).
struct Answer {
  std::optional<ClaimAnswer> claim;
  bool ok = false;

  friend bool operator==(const Answer&, const Answer&) = default;
};

/// The record after an operation (nullopt: no record) and the answer to the caller.
struct Transition {
  std::optional<Record> record;
  Answer answer;
  /// False when `record` equals the input: the backend need not write anything.
  bool changed = false;
};

/// transition() applies `op` to `current` (nullopt when the key has no record) at `now`.
///
/// Pure and total: the same inputs always give the same outputs (it throws only bad_alloc); it
/// implements every row of the seed's transition table plus claim-token re-affirm, result
/// bytes and fingerprints. Lengths (lease, ttl) must already be validated positive.
///
/// Timing rules: a claim sets `lease_expiry = now + lease` and `expires_at = now + lease +
/// ttl` (the record outlives its holder); complete sets `expires_at = now + ttl` (the ttl is
/// measured from success); release sets `lease_expiry = now`, clears the claim token and keeps
/// the record at least `ttl` longer so the advanced fence outlives any holder that could still
/// wake up; extend sets `lease_expiry = now + lease` and keeps the record at least until
/// `now + lease + ttl`, as a fresh claim would.
///
/// Re-affirm: a claim whose token equals a CLAIMED record's answers Won with that record's
/// fence, unchanged, only while `now < lease_expiry` (and before `expires_at`). Past the lease
/// it is an ordinary reclaim (fence + 1); after a release there is no token to match.
///
/// Both inputs are taken by value and moved into the result: a caller that no longer needs
/// them passes them with `std::move` and no string is copied.
[[nodiscard]] Transition transition(std::optional<Record> current, Operation op, Millis now);

}  // namespace idempotency
