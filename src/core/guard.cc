#include "idempotency/guard.h"

#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "idempotency/detail/once_engine.h"
#include "idempotency/errors.h"
#include "idempotency/key.h"
#include "idempotency/log.h"

namespace idempotency {
namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;  // clang 14 lacks C++20's aggregate deduction

// Logs one line about `claim`, with `error` when there is one. Every caller is noexcept (a
// destructor's path, a complete's): out of memory, a line that cannot be built is dropped
// rather than thrown into them, which would end the process.
void log_about(const Claim& claim, Severity severity, std::string_view event,
               std::string_view message, std::optional<std::string_view> error = {}) noexcept {
  try {
    LogRecord record{
        severity,
        std::string(event),
        std::string(message),
        {{"key_fingerprint", key_fingerprint(claim.key)}, {"fence", std::to_string(claim.fence)}}};
    if (error) record.fields.emplace_back("error", std::string(*error));
    log(record);
  } catch (...) {  // NOLINT(bugprone-empty-catch): a log line that cannot be built is dropped
  }
}

// Claims the key or throws the outcome a guard cannot hold.
Claim claim_or_throw(std::string_view key, LockBackend& backend, const LockOptions& options,
                     bool completes) {
  ClaimResult result = backend.claim(key, options.lease, ClaimRequest{{}, options.fingerprint});
  return std::visit(Overloaded{
                        [](Won& won) { return std::move(won.claim); },
                        [&](AlreadyDone& done) -> Claim {
                          // A mutex never runs over finished work, and never reports it as a
                          // duplicate.
                          if (!completes) throw InProgress(TimePoint{});
                          throw Duplicate(std::move(done.result));
                        },
                        [](HeldByOther& held) -> Claim { throw InProgress(held.lease_expiry); },
                    },
                    result);
}

}  // namespace

Guard::Guard(LockBackend& backend, Claim claim, bool completes, std::shared_ptr<void> registration,
             const LockOptions& options)
    : backend_(&backend),
      claim_(std::move(claim)),
      registration_(std::move(registration)),
      keeper_(detail::made_or_released(
          backend, claim_,
          [&] { return detail::LeaseKeeper(backend, claim_, options.lease, options.heartbeat); })),
      lost_token_(
          detail::made_or_released(backend, claim_, [this] { return keeper_.lost_token(); })),
      completes_(completes),
      exceptions_at_entry_(std::uncaught_exceptions()) {}

Guard::Guard(Guard&& other) noexcept
    : backend_(other.backend_),
      claim_(std::move(other.claim_)),
      registration_(std::move(other.registration_)),
      keeper_(std::move(other.keeper_)),
      lost_token_(std::move(other.lost_token_)),
      completes_(other.completes_),
      held_(std::exchange(other.held_, false)),
      exceptions_at_entry_(other.exceptions_at_entry_) {}

Guard::~Guard() {
  if (!held_) return;
  const bool unwinding = std::uncaught_exceptions() > exceptions_at_entry_;
  if (completes_ && !unwinding) {
    (void)complete();
    return;
  }
  held_ = false;
  keeper_.stop();  // no renewal may race the release
  registration_.reset();
  detail::release_after_failure(*backend_, claim_);  // nothing may escape a destructor
}

CompleteStatus Guard::complete(std::optional<std::string> result) noexcept {
  if (!held_) return CompleteStatus::kNotHeld;
  if (!completes_) {
    // The seed's mutex "never complete()s": a DONE record would make every later mutex() on
    // the key InProgress, and every lock() a Duplicate, for the whole ttl.
    log_about(claim_, Severity::kError, "mutex_complete_refused",
              "complete() on a mutex guard is refused: a mutex is released, never completed");
    return CompleteStatus::kMutexNeverCompletes;
  }
  held_ = false;
  // Renewed until the complete has landed: a slow store must not let the lease lapse under
  // this live owner, or another instance would run the work again.
  keeper_.finishing();
  registration_.reset();
  const CompleteStatus status = detail::complete_after_work(*backend_, claim_, std::move(result));
  keeper_.stop();
  return status;
}

namespace detail {

namespace {

CompleteStatus completed_or_fenced_out(const Claim& claim, bool completed) noexcept {
  if (completed) return CompleteStatus::kCompleted;
  log_about(claim, Severity::kError, "fenced_out",
            "work finished but a newer claim took the key over (the work outran its lease, "
            "or a heartbeat lost it); acking anyway: the reclaimer may run the work again, "
            "only a longer lease or a heartbeat prevents it");
  return CompleteStatus::kFencedOut;
}

CompleteStatus complete_failed(const Claim& claim, std::string_view error) noexcept {
  log_about(claim, Severity::kError, "complete_failed",
            "work finished but recording it failed; acking anyway so the side effect "
            "is not repeated; the key frees itself when the lease lapses",
            error);
  return CompleteStatus::kStoreFailed;
}

}  // namespace

CompleteStatus complete_after_work(LockBackend& backend, const Claim& claim,
                                   std::optional<std::string> result) noexcept {
  try {
    return completed_or_fenced_out(claim, backend.complete(claim, std::move(result)));
  } catch (const std::exception& e) {
    return complete_failed(claim, e.what());
  } catch (...) {
    return complete_failed(claim, "an unknown error");
  }
}

CompleteStatus note_complete_outcome(const Claim& claim,
                                     const AsyncCompleteResult& outcome) noexcept {
  if (const auto* failure = std::get_if<StoreFailure>(&outcome)) {
    return complete_failed(claim, failure->message);
  }
  const bool* completed = std::get_if<bool>(&outcome);
  return completed_or_fenced_out(claim, completed != nullptr && *completed);
}

void keep_after_unknown_outcome(const Claim& claim) noexcept {
  log_about(claim, Severity::kWarning, "outcome_unknown",
            "the operation's outcome is unknown; the key stays held until its lease lapses");
}

void release_after_failure(LockBackend& backend, const Claim& claim) noexcept {
  // The lease lapses by itself, so the key self-heals whatever the release's error.
  try {
    backend.release(claim);
  } catch (const std::exception& e) {
    log_about(claim, Severity::kWarning, "release_failed",
              "release failed; the key frees itself when the lease lapses", e.what());
  } catch (...) {
    // Anything else (a driver's own type) must not reach noexcept code and terminate.
    log_about(claim, Severity::kWarning, "release_failed",
              "release failed with an unknown error; the key frees itself when the lease lapses");
  }
}

}  // namespace detail

void Guard::release() {
  if (!held_) return;
  held_ = false;
  keeper_.stop();
  registration_.reset();
  backend_->release(claim_);
}

bool Guard::extend(std::chrono::milliseconds lease) {
  if (!held_) return false;
  const auto expiry = backend_->extend(claim_, lease);
  if (!expiry) return false;
  claim_.lease_expiry = *expiry;
  return true;
}

Guard lock(std::string_view key, LockBackend& backend, const LockOptions& options) {
  validate_key(key);
  validate_heartbeat(options.heartbeat, options.lease);
  auto registration = detail::register_guard(backend, key);
  return Guard(backend, claim_or_throw(key, backend, options, true), true, std::move(registration),
               options);
}

Guard mutex(std::string_view key, LockBackend& backend, const LockOptions& options) {
  validate_key(key);
  validate_heartbeat(options.heartbeat, options.lease);
  auto registration = detail::register_guard(backend, key);
  return Guard(backend, claim_or_throw(key, backend, options, false), false,
               std::move(registration), options);
}

}  // namespace idempotency
