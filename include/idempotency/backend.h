// The port every storage backend implements: claim / complete / release / purge_expired, and
// the read-only inspect that operators' tools use.
//
// `LockBackend` validates its inputs once, in non-virtual public functions, and hands the
// storage work to protected virtual `do_*` functions, so no backend can forget a check.
// Protocol outcomes are values (`Won | AlreadyDone | HeldByOther`, `bool`); infrastructure
// failures are `StoreError` exceptions that never contain the key.
//
// Thread safety: every backend shipped with the library is safe to share between threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "idempotency/clock.h"
#include "idempotency/record.h"

namespace idempotency {

/// The default lease: the mutual-exclusion window; it must exceed the guarded work's runtime.
inline constexpr std::chrono::milliseconds kDefaultLease = std::chrono::minutes(15);
/// The default ttl: how long a completed key suppresses duplicates. lease + ttl = 75 min
/// clears Cloud Run's 60 min request cap (the seed's invariant 2).
inline constexpr std::chrono::milliseconds kDefaultTtl = std::chrono::hours(1);
/// Longest accepted lease; anything longer is a unit mistake, not a policy.
inline constexpr std::chrono::milliseconds kMaxLease = std::chrono::hours(24 * 7);
/// Longest accepted ttl.
inline constexpr std::chrono::milliseconds kMaxTtl = std::chrono::hours(24 * 366);
/// The longest a holder can live on Cloud Run; lease + ttl should exceed it.
inline constexpr std::chrono::milliseconds kMaxHolderLifetime = std::chrono::hours(1);

/// A won claim: what the holder needs to complete or release, and to fence its own writes.
struct Claim {
  std::string key;
  /// The fencing token; pass it to downstream writes so a stale holder is refused there too.
  std::int64_t fence = 0;
  /// When the lease lapses and another caller may reclaim the key.
  TimePoint lease_expiry;
  /// Identifies the claim call; a retried claim carrying it re-affirms this claim while its
  /// lease is live (never after a release or once the lease lapsed).
  std::string claim_token;
};

/// The key was free or reclaimable and is now held by the caller.
struct Won {
  Claim claim;
};

/// The key is DONE within its ttl. `result` holds what `complete` stored.
struct AlreadyDone {
  std::optional<std::string> result;
  std::optional<std::string> fingerprint;
  /// Until when the record suppresses duplicates (its `expires_at`), by the clock the store
  /// judges by; a DONE record answers every claim the same way until then. Every shipped backend
  /// sets it; nullopt from a backend that does not say.
  std::optional<TimePoint> expires_at;
};

/// A live holder has the key. `lease_expiry` says when it may be reclaimed at the latest.
struct HeldByOther {
  TimePoint lease_expiry;
  std::optional<std::string> fingerprint;
};

using ClaimResult = std::variant<Won, AlreadyDone, HeldByOther>;

/// Per-call extras for `claim`.
struct ClaimRequest {
  /// Empty: the backend makes a fresh random token. Set it to retry a claim whose reply was
  /// lost: the retry then re-affirms the claim it made instead of finding it held, as long as
  /// that claim's lease is live. Past the lease, or after a release, the retry is an ordinary
  /// claim (a reclaim with fence + 1 when the key is free).
  std::string claim_token;
  /// Stored with the claim and returned to duplicates (e.g. a hash of the request body).
  std::optional<std::string> fingerprint;
};

/// StoreFailure is what an asynchronous call delivers instead of throwing `StoreError`: the
/// same one-line message, which never contains the key.
struct StoreFailure {
  std::string message;
};

/// The outcome of claim_async(): its result, or the store's failure.
using AsyncClaimResult = std::variant<ClaimResult, StoreFailure>;
/// The outcome of complete_async(): complete()'s answer, or the store's failure.
using AsyncCompleteResult = std::variant<bool, StoreFailure>;
/// Called once with a claim_async() outcome. It must not throw, and should not block: it may
/// run on a thread of the backend's that other calls' outcomes wait behind.
using ClaimDone = std::function<void(AsyncClaimResult)>;
/// Called once with a complete_async() outcome; the same rules as `ClaimDone`.
using CompleteDone = std::function<void(AsyncCompleteResult)>;

/// Options every backend shares. Fill with designated initializers.
struct BackendOptions {
  /// How long a completed key suppresses duplicates, measured from success.
  std::chrono::milliseconds ttl = kDefaultTtl;
  /// nullptr (the default): the store's own clock where it has one (Redis `TIME`,
  /// PostgreSQL `clock_timestamp()`), else the system clock. Set: every backend judges time
  /// by this clock instead, which lets tests move time without sleeping.
  std::shared_ptr<const Clock> clock;
};

/// LockBackend is the storage port behind `lock`, `mutex` and `once`.
class LockBackend {
 public:
  LockBackend(const LockBackend&) = delete;
  LockBackend& operator=(const LockBackend&) = delete;
  virtual ~LockBackend() = default;

  /// claim() atomically takes `key` if it has no record, its lease lapsed, or its ttl ended.
  /// Returns `Won` (with the fence), `AlreadyDone` (with the stored result) or
  /// `HeldByOther`. Throws `std::invalid_argument` for a bad key or lease before any store
  /// call, and `StoreError` when the store fails. Warns once per backend when lease + ttl
  /// does not exceed `kMaxHolderLifetime`.
  [[nodiscard]] ClaimResult claim(std::string_view key, std::chrono::milliseconds lease,
                                  ClaimRequest request = {});

  /// complete() marks the claim DONE and stores `result` when its fence still matches,
  /// even after the lease lapsed. Returns false when a newer claim fenced it out. A DONE
  /// record answers true only for its own fence. A result longer than max_result_bytes() is
  /// not stored (logged as `result_too_large`): the key is completed without it. Throws
  /// `StoreError` when the store fails.
  [[nodiscard]] bool complete(const Claim& claim, std::optional<std::string> result = {});

  /// release() abandons the claim: the lease ends now and the fence advances, so the key is
  /// reclaimable and the released claim can never complete. A stale fence is a no-op.
  /// Throws `StoreError` when the store fails.
  void release(const Claim& claim);

  /// extend() renews a claim's lease (a heartbeat): while `claim` still holds the key — its
  /// fence and claim token match a CLAIMED record within its ttl, even past the lease when
  /// nobody reclaimed — the lease runs until now + `lease` and the record lives at least
  /// `lease` + ttl longer. Returns the new lease expiry, or nullopt, writing nothing, when the
  /// claim was fenced out, released or completed, or its record expired. A retry after a lost
  /// reply extends again. Throws `std::invalid_argument` for a bad key or lease and
  /// `StoreError` when the store fails.
  [[nodiscard]] std::optional<TimePoint> extend(const Claim& claim,
                                                std::chrono::milliseconds lease);

  /// claim_async() is claim() for callers that keep many calls in flight without a thread
  /// each (an event loop, a batch): `done` gets the outcome exactly once, a store failure as a
  /// `StoreFailure`. Backends that can (Redis on its shared connections) send the call and
  /// return at once, and `done` runs later on the backend's I/O thread; the others run the
  /// blocking claim() and call `done` before returning. Throws `std::invalid_argument` for a
  /// bad key or lease (before any store call; `done` is then not called).
  void claim_async(std::string_view key, std::chrono::milliseconds lease, ClaimRequest request,
                   ClaimDone done);

  /// complete_async() is complete() as claim_async() is claim(), with its result limit. Throws
  /// `std::invalid_argument` for a bad key (`done` is then not called).
  void complete_async(const Claim& claim, std::optional<std::string> result, CompleteDone done);

  /// purge_expired() physically deletes records past their `expires_at` and returns how
  /// many it deleted. Never needed for correctness; it only reclaims storage.
  std::size_t purge_expired();

  /// stored_records() counts the records the store holds, expired ones not yet purged
  /// included, where the store can say cheaply and exactly (memory, SQLite); nothing
  /// elsewhere. For metrics: it never affects an answer. Throws `StoreError` when it fails.
  [[nodiscard]] std::optional<std::size_t> stored_records();

  /// wait_for_change() blocks until `key`'s record may have changed, `timeout` passed, or
  /// `stop` was requested, whichever comes first; spurious wake-ups are allowed. `once` calls
  /// it while it waits for a holder in another process. Backends whose store can notify
  /// (Redis pub/sub, PostgreSQL LISTEN/NOTIFY) wake early; the default just sleeps.
  void wait_for_change(std::string_view key, std::chrono::milliseconds timeout,
                       const std::stop_token& stop);

  /// inspect() returns `key`'s record as stored, if any, and changes nothing: the one read
  /// operators' tools (`idem inspect`) and tests use, through any decorator. A record past its
  /// `expires_at` may still be returned (or already gone, where the store deletes it itself);
  /// `transition()` says how it would answer. Throws `std::invalid_argument` for a bad key,
  /// `NotInspectable` when the backend cannot read records back, and `StoreError` when the
  /// store fails.
  [[nodiscard]] std::optional<Record> inspect(std::string_view key);

  /// max_result_bytes() is the longest result complete() stores: Datastore's entity limit less
  /// room for the record's other fields; far above any result elsewhere. A longer result is
  /// dropped rather than failing the complete, since the work it reports has run: a complete
  /// that failed would leave the key to be claimed, and the work run again, after the lease.
  [[nodiscard]] std::size_t max_result_bytes() const noexcept { return do_max_result_bytes(); }

  /// ttl() is the duplicate-suppression window this backend was built with.
  [[nodiscard]] std::chrono::milliseconds ttl() const noexcept { return ttl_; }

  /// may_block() says whether a call can wait on I/O (a disk flush, a network round trip):
  /// true for every store but the in-process memory one. An event loop may call a backend that
  /// says false inline and hands the others to a thread pool.
  [[nodiscard]] bool may_block() const noexcept { return do_may_block(); }

  /// sends_async() says whether claim_async() and complete_async() return at once and call
  /// `done` later, on the backend's own I/O thread (Redis on its shared connections), rather
  /// than running the blocking call first. An event loop may then call them itself instead of
  /// handing them to a thread pool.
  [[nodiscard]] bool sends_async() const noexcept { return do_sends_async(); }

 protected:
  /// Validates `options` (ttl positive and at most `kMaxTtl`) or throws
  /// `std::invalid_argument`.
  explicit LockBackend(const BackendOptions& options);

  /// Drops `result` when it is longer than max_result_bytes(), and logs why.
  void fit_result(const Claim& claim, std::optional<std::string>& result) const;

  /// The storage work behind claim(); inputs are validated and `request.claim_token` is set.
  virtual ClaimResult do_claim(std::string_view key, std::chrono::milliseconds lease,
                               const ClaimRequest& request) = 0;
  /// The storage work behind complete().
  virtual bool do_complete(const Claim& claim, std::optional<std::string> result) = 0;
  /// The storage work behind release().
  virtual void do_release(const Claim& claim) = 0;
  /// The storage work behind extend(); inputs are validated.
  virtual std::optional<TimePoint> do_extend(const Claim& claim,
                                             std::chrono::milliseconds lease) = 0;
  /// The storage work behind purge_expired().
  virtual std::size_t do_purge_expired() = 0;
  /// The storage work behind claim_async(); inputs are validated and `request.claim_token` is
  /// set. The default calls do_claim() and then `done`, an exception (`StoreError`, or out of
  /// memory) becoming a `StoreFailure`; a decorator that does not override it thus keeps its
  /// own do_claim().
  virtual void do_claim_async(std::string_view key, std::chrono::milliseconds lease,
                              ClaimRequest request, ClaimDone done);
  /// The storage work behind complete_async(); the default calls do_complete(), as above.
  virtual void do_complete_async(const Claim& claim, std::optional<std::string> result,
                                 CompleteDone done);
  /// The read behind inspect(); the default throws `NotInspectable`.
  virtual std::optional<Record> do_inspect(std::string_view key);
  /// The count behind stored_records(); the default says nothing.
  virtual std::optional<std::size_t> do_stored_records() { return std::nullopt; }
  /// The limit behind max_result_bytes(); the default is none.
  [[nodiscard]] virtual std::size_t do_max_result_bytes() const noexcept {
    return std::numeric_limits<std::size_t>::max();
  }
  /// The answer behind may_block(); the default is the safe one, true.
  [[nodiscard]] virtual bool do_may_block() const noexcept { return true; }
  /// The answer behind sends_async(); the default, false, is what the default
  /// do_claim_async() and do_complete_async() do. A decorator that overrides both to forward
  /// them may answer its backend's.
  [[nodiscard]] virtual bool do_sends_async() const noexcept { return false; }
  /// The storage work of another backend `to`, below its public call's validation: for
  /// decorators (ForwardingBackend), whose own public call has validated already.
  static ClaimResult forward_claim(LockBackend& to, std::string_view key,
                                   std::chrono::milliseconds lease, const ClaimRequest& request) {
    return to.do_claim(key, lease, request);
  }
  /// As forward_claim(), for complete().
  static bool forward_complete(LockBackend& to, const Claim& claim,
                               std::optional<std::string> result) {
    return to.do_complete(claim, std::move(result));
  }
  /// As forward_claim(), for claim_async().
  static void forward_claim_async(LockBackend& to, std::string_view key,
                                  std::chrono::milliseconds lease, ClaimRequest request,
                                  ClaimDone done) {
    to.do_claim_async(key, lease, std::move(request), std::move(done));
  }
  /// As forward_claim(), for complete_async().
  static void forward_complete_async(LockBackend& to, const Claim& claim,
                                     std::optional<std::string> result, CompleteDone done) {
    to.do_complete_async(claim, std::move(result), std::move(done));
  }
  /// As forward_claim(), for release().
  static void forward_release(LockBackend& to, const Claim& claim) { to.do_release(claim); }
  /// As forward_claim(), for extend().
  static std::optional<TimePoint> forward_extend(LockBackend& to, const Claim& claim,
                                                 std::chrono::milliseconds lease) {
    return to.do_extend(claim, lease);
  }
  /// As forward_claim(), for inspect().
  static std::optional<Record> forward_inspect(LockBackend& to, std::string_view key) {
    return to.do_inspect(key);
  }
  /// As forward_claim(), for wait_for_change().
  static void forward_wait_for_change(LockBackend& to, std::string_view key,
                                      std::chrono::milliseconds timeout,
                                      const std::stop_token& stop) {
    to.do_wait_for_change(key, timeout, stop);
  }
  /// The wait behind wait_for_change(); the default sleeps `timeout` (or until `stop`).
  virtual void do_wait_for_change(std::string_view key, std::chrono::milliseconds timeout,
                                  const std::stop_token& stop);

 private:
  void warn_sizing_once(std::chrono::milliseconds lease);

  std::chrono::milliseconds ttl_;
  std::atomic<bool> sizing_warned_{false};
};

/// claim_result() turns the record a claim left behind and its answer into what `claim`
/// returns, for backends built on `transition()`. Pass the record with `std::move` when it is
/// no longer needed: its strings then move into the result.
[[nodiscard]] ClaimResult claim_result(std::string_view key, Record record, ClaimAnswer answer);

/// extend_result() turns what `transition` did with an `ExtendOp` into what `extend` returns,
/// for backends built on `transition()`.
[[nodiscard]] std::optional<TimePoint> extend_result(const Transition& t);

/// validate_lease() throws `std::invalid_argument` unless 0 < lease <= kMaxLease.
void validate_lease(std::chrono::milliseconds lease);

/// validate_heartbeat() throws `std::invalid_argument` unless `heartbeat` is zero (off) or
/// positive and shorter than `lease`.
void validate_heartbeat(std::chrono::milliseconds heartbeat, std::chrono::milliseconds lease);

/// validate_ttl() throws `std::invalid_argument` unless 0 < ttl <= kMaxTtl.
void validate_ttl(std::chrono::milliseconds ttl);

}  // namespace idempotency
