// DoneCache: a LockBackend decorator that keeps copies of DONE records in this process, so that
// a burst of duplicates of one key costs one store round trip instead of one each.
//
// A DONE record answers every claim the same way — AlreadyDone, with its result and
// fingerprint — and nothing changes it before its expires_at (complete, release and extend leave
// it as it is). So when a claim comes back AlreadyDone, DoneCache keeps the answer with its
// `expires_at` and gives it to later claims of that key while `now + clock_margin < expires_at`.
// Won and HeldByOther are never kept: a CLAIMED record changes at any moment. Every other
// operation, inspect included, goes to the wrapped backend. `claim_async` is answered from a
// copy at once, before it returns; otherwise it and `complete_async` go to the wrapped
// backend's asynchronous calls (so a Redis backend's stay asynchronous).
//
//   auto store = std::make_shared<idempotency::DoneCache>(idempotency::open_backend(url));
//   // store->claim(...) of a key completed a moment ago: answered here, no round trip
//
// What it cannot see: a record changed outside the protocol (deleted by hand) is still answered
// from the copy until the copy's expiry. The expiry is the store's `expires_at`, judged by this
// process's clock, so `clock_margin` must exceed how far this clock may lag the store's (Redis
// `TIME`, PostgreSQL `clock_timestamp()`; none when the backend is given this same clock).
//
// Thread safety: safe from any number of threads (the copies are sharded, a mutex per shard);
// otherwise as safe as the wrapped backend.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "idempotency/clock.h"
#include "idempotency/forwarding_backend.h"

namespace idempotency {

/// Options for DoneCache. Fill with designated initializers.
struct DoneCacheOptions {
  /// The most copies kept (rounded up to a multiple of 16); past it the oldest go first. A
  /// copy costs its key twice, its result and fingerprint, and about 250 bytes besides.
  std::size_t capacity = 10'000;
  /// A copy is given out only while now + clock_margin < expires_at: set it above the clock
  /// skew between this process and the store. Zero when they read the same clock; at most
  /// `kMaxTtl`.
  std::chrono::milliseconds clock_margin = std::chrono::seconds(1);
  /// The clock the copies are judged by; nullptr: the system clock. Give it the wrapped
  /// backend's clock when that one was built with its own (`BackendOptions::clock`).
  std::shared_ptr<const Clock> clock;
};

/// DoneCache forwards to the backend it wraps and answers claims of DONE keys from copies.
class DoneCache final : public ForwardingBackend {
 public:
  /// DoneCache() wraps `inner` and shares its ownership. Throws `std::invalid_argument` for
  /// a zero capacity or a negative margin.
  explicit DoneCache(std::shared_ptr<LockBackend> inner, const DoneCacheOptions& options = {});
  /// DoneCache() wraps `inner`, which must outlive it. Throws like the one above.
  explicit DoneCache(LockBackend& inner, const DoneCacheOptions& options = {});
  ~DoneCache() override;

  /// cached_count() is how many copies are held, lapsed ones not yet dropped included.
  [[nodiscard]] std::size_t cached_count() const;

  /// hits() counts the claims answered from a copy, without a call to the wrapped backend.
  [[nodiscard]] std::uint64_t hits() const;

 protected:
  ClaimResult do_claim(std::string_view key, std::chrono::milliseconds lease,
                       const ClaimRequest& request) override;
  void do_claim_async(std::string_view key, std::chrono::milliseconds lease, ClaimRequest request,
                      ClaimDone done) override;
  void do_complete_async(const Claim& claim, std::optional<std::string> result,
                         CompleteDone done) override;
  /// The wrapped backend's: both calls above forward to its asynchronous ones (a copy answers
  /// before returning).
  [[nodiscard]] bool do_sends_async() const noexcept override { return inner().sends_async(); }

 private:
  struct State;
  // Shared with the wrapped backend's callbacks, which may outlive this decorator.
  std::shared_ptr<State> state_;
};

}  // namespace idempotency
