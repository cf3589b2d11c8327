// The owner's step of once() against the store (once_claim.h).
#include "once_claim.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>
#include <variant>

#include "idempotency/backend.h"
#include "idempotency/detail/lease_keeper.h"
#include "idempotency/errors.h"
#include "idempotency/guard.h"
#include "idempotency/key.h"
#include "idempotency/log.h"

namespace idempotency::detail {

ErasedOutcome outcome_of_done(const AlreadyDone& done, std::string_view key,
                              const OnceHooks& hooks) {
  if (!hooks.decode) return ErasedOutcome{Status::kReplayed, nullptr, 0, std::nullopt};
  if (!done.result) return ErasedOutcome{Status::kDuplicate, nullptr, 0, std::nullopt};
  try {
    return ErasedOutcome{Status::kReplayed, hooks.decode(*done.result), 0, std::nullopt};
  } catch (const std::exception& e) {
    // DONE is DONE whoever wrote it (lock() + complete("receipt") on the same key): the
    // work ran, so this is a duplicate; failing would turn every redelivery into a nack
    // until the ttl ends.
    log(LogRecord{Severity::kWarning,
                  "stored_result_unreadable",
                  "the key is done but its stored result is not this call's type; "
                  "answering duplicate",
                  {{"key_fingerprint", key_fingerprint(key)}, {"error", e.what()}}});
    return ErasedOutcome{Status::kDuplicate, nullptr, 0, std::nullopt};
  }
}

namespace {

// The bytes to store for a result the operation returned, or none when its codec cannot
// encode it: the work ran, so the key is completed all the same (later calls are duplicates)
// rather than given up for the operation to run again on every delivery.
std::optional<std::string> encoded_result(const OnceHooks& hooks,
                                          const std::shared_ptr<const void>& value,
                                          std::string_view key) noexcept {
  if (!hooks.encode || !value) return std::nullopt;
  std::exception_ptr failure;
  try {
    return hooks.encode(value.get());
  } catch (...) {
    failure = std::current_exception();
  }
  try {
    std::string error = "a codec threw a non-exception";
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the default reason stands
    }
    log(LogRecord{Severity::kError,
                  "result_unencodable",
                  "the operation ran but its result could not be encoded; the key is completed "
                  "without it, and later calls are duplicates",
                  {{"key_fingerprint", key_fingerprint(key)}, {"error", std::move(error)}}});
  } catch (...) {  // NOLINT(bugprone-empty-catch): a log line that cannot be built is dropped
  }
  return std::nullopt;
}

}  // namespace

ErasedOutcome claim_and_execute(std::string_view key, LockBackend& backend,
                                const OnceOptions& options, const OnceHooks& hooks) {
  if (options.stop.stop_requested()) throw Cancelled();
  // At most kMaxTtl: "wait for ever" as milliseconds::max() would overflow the steady clock's
  // nanoseconds into a deadline already past.
  const auto deadline =
      std::chrono::steady_clock::now() + std::min(options.wait_for, idempotency::kMaxTtl);
  std::chrono::milliseconds backoff(10);
  while (true) {
    ClaimResult result = backend.claim(key, options.lease, ClaimRequest{{}, options.fingerprint});
    if (auto* won = std::get_if<Won>(&result)) {
      const Claim& claim = won->claim;
      // The operation is asked to stop when its caller cancels or its claim is lost; the two
      // callbacks unregister (waiting for a running one) before `work` goes.
      std::stop_source work = made_or_released(backend, claim, [] { return std::stop_source(); });
      detail::LeaseKeeper keeper = made_or_released(backend, claim, [&] {
        return detail::LeaseKeeper(backend, claim, options.lease, options.heartbeat);
      });
      std::stop_callback on_cancel(options.stop, [&work] { work.request_stop(); });
      std::stop_callback on_lost(
          made_or_released(backend, claim, [&] { return keeper.lost_token(); }),
          [&work] { work.request_stop(); });
      std::shared_ptr<const void> value;
      bool ran = false;
      try {
        value = hooks.execute(claim, work.get_token(), ran);
      } catch (const OutcomeUnknown&) {
        keep_after_unknown_outcome(claim);
        throw;
      } catch (...) {
        if (ran) {
          // The operation succeeded and only keeping its result failed (out of memory): it
          // must not run again, so the key is completed, without a result.
          keeper.finishing();
          (void)complete_after_work(backend, claim, std::nullopt);
          keeper.stop();
          throw;
        }
        // Failures and cancellations are never stored: give the key up and propagate.
        keeper.stop();
        release_after_failure(backend, claim);
        if (options.stop.stop_requested()) throw Cancelled();
        throw;
      }
      std::optional<std::string> bytes = encoded_result(hooks, value, key);
      // Renewed until the complete has landed (LeaseKeeper::finishing()).
      keeper.finishing();
      (void)complete_after_work(backend, claim, std::move(bytes));
      keeper.stop();
      return ErasedOutcome{Status::kExecuted, std::move(value), claim.fence, std::nullopt};
    }
    if (auto* done = std::get_if<AlreadyDone>(&result)) return outcome_of_done(*done, key, hooks);
    const auto& held = std::get<HeldByOther>(result);
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return ErasedOutcome{Status::kInProgress, nullptr, 0, held.lease_expiry};
    }
    // Wait for the other holder to finish or give up: woken by the store where it can
    // notify, else polled with back-off, until the wait runs out.
    backend.wait_for_change(
        key,
        std::min(backoff, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) +
                              std::chrono::milliseconds(1)),
        options.stop);
    if (options.stop.stop_requested()) throw Cancelled();
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

}  // namespace idempotency::detail
