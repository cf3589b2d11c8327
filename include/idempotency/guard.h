// lock() and mutex(): the RAII guards that run work at most once per key, or one at a time.
//
//   auto held = idempotency::lock("orders:po-123", backend);   // throws Duplicate/InProgress
//   send_order_to_supplier(held.fence());
//   // scope exit: complete (no exception in flight) or release (exception in flight)
//
// lock() walks ABSENT -> CLAIMED -> DONE: a later delivery is a `Duplicate`. mutex() walks
// only ABSENT -> CLAIMED -> released, forever: each caller runs in turn, none is suppressed.
//
// Error handling follows the seed's three catch points exactly. After the work has run,
// `complete` throwing is logged (event "complete_failed") and not rethrown, and being fenced
// out is logged as an alertable error (event "fenced_out"): re-raising would nack and repeat
// a side effect that already happened. Everything else propagates.
//
// Thread safety: a Guard belongs to one thread at a time; the backend is shared. Re-entry is
// detected on the thread that took the guard: handed to another thread, the guard leaves that
// first thread marked as the key's owner (its own lock() of the key is a ReentryError, not
// InProgress) and the new one unmarked, until the guard ends.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>

#include "idempotency/backend.h"
#include "idempotency/detail/lease_keeper.h"

namespace idempotency {

/// Options for lock() and mutex().
struct LockOptions {
  /// The lease: must exceed the guarded work's longest runtime, unless `heartbeat` renews it.
  std::chrono::milliseconds lease = kDefaultLease;
  /// Renew the lease this often while the guard is held (zero: never). With it, the lease
  /// only has to outlast a renewal's worst delay, so a crashed holder's key frees itself one
  /// short lease after the crash; must be shorter than the lease.
  std::chrono::milliseconds heartbeat{0};
  /// Stored with the claim; see `ClaimRequest::fingerprint`.
  std::optional<std::string> fingerprint;
};

/// How a guard's completion went.
enum class CompleteStatus {
  kCompleted,    ///< The record is DONE; duplicates are suppressed for the ttl.
  kFencedOut,    ///< A newer claim took the key over; logged as an alertable error.
  kStoreFailed,  ///< The store failed after the work; logged, the key self-heals after the lease.
  kNotHeld,      ///< The guard was already finished or moved from.
  /// A mutex guard, which serializes and is never completed: DONE, the key would turn every
  /// later holder away for the ttl. Nothing changed; it is released as always, and logged.
  kMutexNeverCompletes,
};

/// Guard holds one claim and finishes it exactly once.
class [[nodiscard]] Guard {
 public:
  /// Guard(Guard&&) takes over the claim, its heartbeat and the duty to finish it. The
  /// moved-from guard holds nothing: its destructor does nothing, `complete()` answers
  /// `kNotHeld`, `release()` does nothing, `extend()` answers false; do not use its `claim()`.
  Guard(Guard&& other) noexcept;
  Guard& operator=(Guard&&) = delete;
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;
  /// ~Guard() finishes the claim if still held: lock guards complete when no exception is
  /// in flight and release when one is; mutex guards always release. Never throws.
  ~Guard();

  /// fence() returns the fencing token; pass it to downstream writes to fence them.
  [[nodiscard]] std::int64_t fence() const noexcept { return claim_.fence; }
  /// claim() returns the whole claim (key, fence, lease expiry, token).
  [[nodiscard]] const Claim& claim() const noexcept { return claim_; }

  /// complete() finishes a lock guard now, storing `result` for duplicates to replay. It
  /// never throws after the work: a store failure or a fence-out is logged and reported. A
  /// mutex guard is not completed (`kMutexNeverCompletes`).
  CompleteStatus complete(std::optional<std::string> result = {}) noexcept;

  /// release() gives the key up now so the next caller runs. Throws `StoreError` if the
  /// store fails (the key then self-heals when its lease lapses).
  void release();

  /// extend() renews the lease now, for `lease` from now (see LockBackend::extend). Returns
  /// false when the claim is no longer held (fenced out, released, finished). Throws
  /// `StoreError` when the store fails.
  [[nodiscard]] bool extend(std::chrono::milliseconds lease);

  /// lost() says whether the heartbeat found the claim lost: a renewal refused (a newer claim
  /// took the key, so a completion is fenced out), or renewals failing until the lease lapsed
  /// (a completion still commits while nobody has taken the key, as a late one does). The work
  /// should stop, and end by throwing: a guard left normally completes the key.
  [[nodiscard]] bool lost() const noexcept { return keeper_.lost(); }

  /// stop_token() is requested when the claim is lost (never without a heartbeat), for work
  /// that can stop early.
  [[nodiscard]] std::stop_token stop_token() const noexcept { return lost_token_; }

 private:
  friend Guard lock(std::string_view, LockBackend&, const LockOptions&);
  friend Guard mutex(std::string_view, LockBackend&, const LockOptions&);
  Guard(LockBackend& backend, Claim claim, bool completes, std::shared_ptr<void> registration,
        const LockOptions& options);

  LockBackend* backend_;
  Claim claim_;
  std::shared_ptr<void> registration_;  // this thread owns the key: re-entry is an error
  detail::LeaseKeeper keeper_;          // the heartbeat, when LockOptions::heartbeat is set
  // The keeper's, made with the guard, so that stop_token() cannot fail.
  std::stop_token lost_token_;
  bool completes_;
  bool held_ = true;
  int exceptions_at_entry_;
};

namespace detail {
/// complete_after_work() completes `claim` after its work ran, applying the seed's catch
/// points: a store failure and a fence-out are logged, never thrown.
CompleteStatus complete_after_work(LockBackend& backend, const Claim& claim,
                                   std::optional<std::string> result) noexcept;
/// note_complete_outcome() is complete_after_work() for a complete_async() outcome: a store
/// failure and a fence-out are logged the same way.
CompleteStatus note_complete_outcome(const Claim& claim,
                                     const AsyncCompleteResult& outcome) noexcept;
/// release_after_failure() gives `claim` up after its work failed or was abandoned. A store
/// failure is logged (`release_failed`), never thrown: the key frees itself when the lease
/// lapses, and callers are destructors and failure paths that must not throw.
void release_after_failure(LockBackend& backend, const Claim& claim) noexcept;

/// made_or_released() returns `make()`; when it throws, releases `claim` (as
/// release_after_failure()) and rethrows. For what a claim just won needs before its work can
/// run (its lease keeper): failing to make it (out of memory, no thread for the heartbeat) must
/// not leave the key held, with no work under it, until the lease lapses.
template <class Make>
auto made_or_released(LockBackend& backend, const Claim& claim, Make&& make) -> decltype(make()) {
  try {
    return std::forward<Make>(make)();
  } catch (...) {
    release_after_failure(backend, claim);
    throw;
  }
}
/// keep_after_unknown_outcome() leaves `claim` held after work whose outcome is unknown (it may
/// still be happening elsewhere), so no one reclaims the key before its lease lapses; logs
/// `outcome_unknown` (fingerprint and fence only).
void keep_after_unknown_outcome(const Claim& claim) noexcept;
}  // namespace detail

/// lock() claims `key` for work that must run at most once. Throws `Duplicate` when the key
/// is DONE within its ttl, `InProgress` when a live holder has it, `std::invalid_argument`
/// for a bad key or lease, `ReentryError` when this thread already owns the key, and
/// `StoreError` when the store fails.
Guard lock(std::string_view key, LockBackend& backend, const LockOptions& options = {});

/// mutex() claims `key` for work that must not overlap but must each run. The guard always
/// releases and never completes. Throws `InProgress` when a live holder has the key or the
/// key is DONE (a mutex never runs over finished work).
Guard mutex(std::string_view key, LockBackend& backend, const LockOptions& options = {});

}  // namespace idempotency
