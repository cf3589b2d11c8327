// The type-erased engine behind `once` (internal: use once.h). The template in once.h adapts
// a callable and a codec to these hooks; everything else lives in src/core/once.cc.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <typeindex>

#include "idempotency/backend.h"

namespace idempotency {

/// How a `once` call ended.
enum class Status {
  kExecuted,    ///< This call owned the key and ran the operation.
  kJoined,      ///< It arrived while an owner in this process ran and received its outcome.
  kReplayed,    ///< It arrived after a success and received the stored result.
  kDuplicate,   ///< The key is DONE but holds no result this call can return (e.g. set by lock(),
                ///< or bytes its codec cannot decode, logged as `stored_result_unreadable`).
  kInProgress,  ///< A live owner in another process has the key (after any `wait_for`).
};

/// status_name() returns "executed", "joined", "replayed", "duplicate" or "in_progress".
[[nodiscard]] const char* status_name(Status s) noexcept;

/// Options for `once`.
struct OnceOptions {
  /// The lease of the claim: it must exceed the operation's longest runtime, unless
  /// `heartbeat` renews it.
  std::chrono::milliseconds lease = kDefaultLease;
  /// Renew the lease this often while the operation runs (zero: never); shorter than the
  /// lease. When a renewal finds the claim lost, the operation's stop token is requested
  /// (logged once as `lease_lost`). An operation that stops for it must throw: a normal return
  /// is completed as a success, which is fenced out only once a newer claim took the key.
  std::chrono::milliseconds heartbeat{0};
  /// Stored with the claim; see `ClaimRequest::fingerprint`. once() does not compare it: a key
  /// must name one operation on one payload (the seed's rule), and a reused key replays.
  std::optional<std::string> fingerprint;
  /// On a live holder in another process, wait up to this long for it to finish and replay
  /// its result instead of answering `kInProgress`. Zero: do not wait. At most `kMaxTtl` (366
  /// days) is waited, so `milliseconds::max()` waits as long as a holder can hold.
  std::chrono::milliseconds wait_for{0};
  /// Cancels this caller: a joined caller alone gets `Cancelled`. An owner's token is passed
  /// to the operation when it accepts one; the key is released and handed off only once the
  /// operation honours it and throws. An operation that ignores it runs to its end, and a
  /// normal return stands as a success.
  std::stop_token stop;
};

namespace detail {

/// What the template layer supplies to the engine.
struct OnceHooks {
  std::type_index type = typeid(void);
  /// Runs the operation as owner and returns its result (null for `void`), setting `ran` as
  /// soon as the operation has returned: a failure after that (keeping the result) is not the
  /// operation's, and must not give the key up for it to run again.
  std::function<std::shared_ptr<const void>(const Claim&, std::stop_token, bool& ran)> execute;
  /// Encodes a result of execute() for the store; empty for `void` operations.
  std::function<std::string(const void*)> encode;
  /// Decodes stored result bytes; empty for `void` operations.
  std::function<std::shared_ptr<const void>(const std::string&)> decode;
};

/// What the engine answers; the template layer restores the type.
struct ErasedOutcome {
  Status status = Status::kExecuted;
  std::shared_ptr<const void> value;
  std::int64_t fence = 0;
  std::optional<TimePoint> lease_expiry;
};

/// run_once() is the engine: single-flight in process, claim / complete / release through
/// the backend, joins, replays, cancellation hand-off and re-entry detection.
ErasedOutcome run_once(std::string_view key, LockBackend& backend, const OnceOptions& options,
                       const OnceHooks& hooks);

/// outcome_of_done() is the outcome of a claim that found the key DONE: the stored result
/// replayed, or a duplicate when there is none this call can decode (logged as
/// `stored_result_unreadable` when bytes are there but do not decode).
[[nodiscard]] ErasedOutcome outcome_of_done(const AlreadyDone& done, std::string_view key,
                                            const OnceHooks& hooks);

/// AsyncFlight is this process's single flight for a key whose owner runs the operation
/// asynchronously, with no thread waiting on it: run_once() callers for the same key meanwhile
/// join it and receive what settle() or fail() publishes, as they would from a blocking owner.
///
/// Thread safety: settle() or fail() once, from any thread.
class AsyncFlight {
 public:
  /// ~AsyncFlight() without an outcome hands the flight to a joined caller, which claims the
  /// key itself (as when a blocking owner is cancelled); with none, the flight just ends.
  virtual ~AsyncFlight() = default;
  AsyncFlight(const AsyncFlight&) = delete;
  AsyncFlight& operator=(const AsyncFlight&) = delete;

  /// decide() publishes the owner's execution before its store write has ended: the callers
  /// joined without blocking receive it now (as joined), and those that join from then on
  /// receive its value at once as `kReplayed`, what a claim finds once the write lands.
  /// Callers blocked in run_once() still wait for settle() or fail(), which must follow.
  void decide(const ErasedOutcome& executed) noexcept;
  /// settle() publishes the owner's outcome to the joined callers and ends the flight.
  void settle(ErasedOutcome outcome) noexcept;
  /// fail() publishes the owner's exception to the joined callers and ends the flight.
  void fail(std::exception_ptr error) noexcept;

 protected:
  // The one kind there is (once.cc) holds the flight's state in the same allocation: a flight
  // begins with every asynchronous delivery.
  AsyncFlight() = default;
};

/// RunningFlight marks the calling thread, while it lives, as running the operation of an
/// asynchronous flight (null: marks nothing). A blocking call on the flight's key from inside
/// the operation would wait for a flight that cannot end before the operation returns: it
/// throws `ReentryError` instead, as a blocking owner's own re-entry does.
class RunningFlight {
 public:
  /// RunningFlight() marks this thread until the destructor, which restores the mark before.
  explicit RunningFlight(const AsyncFlight* flight) noexcept;
  ~RunningFlight();
  RunningFlight(const RunningFlight&) = delete;
  RunningFlight& operator=(const RunningFlight&) = delete;

 private:
  std::shared_ptr<const void> flight_;  // kept alive: no later flight can take its address
  const void* previous_ = nullptr;
};

/// Told once, on the thread that ended the flight it joined: the owner's outcome (an execution
/// reported as `kJoined`), or its exception, or neither when the owner gave up without either
/// (it was cancelled): the caller then starts over.
using JoinCallback =
    std::function<void(std::optional<ErasedOutcome> outcome, std::exception_ptr error)>;

/// begin_async_flight() makes the caller this process's owner of (backend, key); or, when a
/// flight for it already runs, joins it without blocking: returns null, and `on_joined` is
/// called when that flight ends (at once, on this thread, when its outcome is decided). Throws
/// `std::invalid_argument` for a bad key and `std::logic_error` when the running flight's result
/// type is another.
[[nodiscard]] std::unique_ptr<AsyncFlight> begin_async_flight(std::string_view key,
                                                              const LockBackend& backend,
                                                              std::type_index type,
                                                              JoinCallback on_joined);

/// Registers a lock/mutex guard's ownership of (backend, key) for re-entry detection; throws
/// `ReentryError` when this thread already owns it. The returned handle unregisters on
/// destruction (from any thread).
std::shared_ptr<void> register_guard(const LockBackend& backend, std::string_view key);

}  // namespace detail
}  // namespace idempotency
