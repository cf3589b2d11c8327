// The exceptions the library throws. All derive from `idempotency::Error`.
//
// Protocol outcomes of the port are values; these exceptions are what `lock` and `mutex`
// raise for a duplicate or a live holder, and what any component raises when its store
// fails. No `what()` ever contains a raw key: keys are customer data.
//
// Thread safety: plain exception types.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

#include "idempotency/clock.h"

namespace idempotency {

/// Error is the base of every exception the library defines.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// StoreError means the store failed (unreachable, corrupt, full, timed out). It carries
/// the store's own message and never the key. The operation's outcome is unknown.
class StoreError : public Error {
 public:
  using Error::Error;
};

/// Duplicate is thrown by `lock` when the key is DONE within its ttl: the work already ran.
class Duplicate : public Error {
 public:
  /// Duplicate() keeps the result bytes the original execution stored, if any.
  explicit Duplicate(std::optional<std::string> result);
  /// result() returns the stored result bytes of the original execution, if any.
  [[nodiscard]] const std::optional<std::string>& result() const noexcept { return result_; }

 private:
  std::optional<std::string> result_;
};

/// InProgress is thrown by `lock` and `mutex` when a live holder has the key (or, for
/// `mutex`, the key is DONE): retry later.
class InProgress : public Error {
 public:
  /// InProgress() keeps when the holder's lease lapses at the latest.
  explicit InProgress(TimePoint lease_expiry);
  /// lease_expiry() says when the key may be reclaimed at the latest (for Retry-After); the
  /// epoch when unknown (a `mutex` on a DONE key).
  [[nodiscard]] TimePoint lease_expiry() const noexcept { return lease_expiry_; }

 private:
  TimePoint lease_expiry_;
};

/// Cancelled is thrown by `once` to a caller whose `std::stop_token` was stopped: to a
/// joined caller alone, or to an owner whose execution was cancelled (nothing was stored).
class Cancelled : public Error {
 public:
  /// Cancelled() carries a fixed message that names neither the key nor the operation.
  Cancelled();
};

/// OutcomeUnknown is what an operation run by `once` throws when it cannot tell whether its
/// side effect happened: a call that reached a remote service and got no answer (a timeout, a
/// connection reset after sending) may still be running there. `once` then does NOT release
/// the key: it stays held until its lease lapses, so no retry can run concurrently with the
/// call that went silent, and the fence guards the sink after that. Nothing is stored; the
/// exception propagates to the caller (and to joined callers) like any failure.
class OutcomeUnknown : public Error {
 public:
  using Error::Error;
};

/// NotInspectable is what `LockBackend::inspect` throws for a backend that cannot read its
/// records back (a custom backend that does not override `do_inspect`); every shipped backend
/// can. It says what the backend lacks, not that the store failed.
class NotInspectable : public Error {
 public:
  /// NotInspectable() carries a fixed message that names neither the key nor the backend's
  /// URL; `idem` exits 2 with it.
  NotInspectable();
};

/// ReentryError is thrown when a thread that owns a key (inside `once` or holding a `lock`
/// guard) asks for the same key again: waiting for itself would deadlock.
class ReentryError : public Error {
 public:
  /// ReentryError() keeps the key for the caller; `what()` never contains it.
  explicit ReentryError(std::string key);
  /// key() returns the key that was reused.
  [[nodiscard]] const std::string& key() const noexcept { return key_; }

 private:
  std::string key_;
};

}  // namespace idempotency
