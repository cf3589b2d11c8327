// once(): run an operation at most once per key and give every duplicate its result.
//
//   auto outcome = idempotency::once("create-payment:" + request_id, backend,
//                                    [&] { return gateway.create(request_id, cents); });
//   outcome.status();   // executed | joined | replayed | duplicate | in_progress
//   outcome.value();    // the owner's result, for every caller that got one
//
// Callers with one key in one process share one execution (single-flight): the first owns
// the key and runs the operation; those arriving while it runs *join* and receive its
// outcome, exception included; those arriving after a success *replay* the stored result,
// in this process or any other sharing the backend (results cross processes as bytes through
// a `Codec<T>`). Failures and cancellations are never stored: the key is released and a later
// call executes again. The ttl is measured from success.
//
// Joined and replayed callers receive the same value object as the owner (`shared_value()`
// points at one `const T`): do not cast the const away and mutate it.
//
// Error handling: the operation's exceptions propagate to the owner and every joined caller
// (the same exception object, rethrown). After a success, a store that fails to record it,
// or a fence-out, is logged and the value still returned (the seed's catch points). An empty
// key or a key function that throws propagates before any backend call. A thread that owns a
// key and asks for it again gets `ReentryError` instead of deadlocking.
//
// Thread safety: call from any number of threads; a backend is shared.
#pragma once

#include <concepts>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <type_traits>
#include <utility>

#include "idempotency/backend.h"
#include "idempotency/codec.h"
#include "idempotency/detail/once_engine.h"

namespace idempotency {

/// Outcome<T> is what `once` returns: the status, the value when there is one, and the
/// fence of the execution that produced it (0 when replayed from the store).
template <class T>
class Outcome {
 public:
  /// Outcome() is built by `once`; a test may build one to stand in for it. `value` is null
  /// for `duplicate` and `in_progress`, `lease_expiry` is set only for `in_progress`.
  Outcome(Status status, std::shared_ptr<const T> value, std::int64_t fence,
          std::optional<TimePoint> lease_expiry)
      : status_(status), value_(std::move(value)), fence_(fence), lease_expiry_(lease_expiry) {}

  /// status() says how this call ended.
  [[nodiscard]] Status status() const noexcept { return status_; }
  /// cache_hit() is true when the value came from another call (joined, replayed, duplicate).
  [[nodiscard]] bool cache_hit() const noexcept {
    return status_ == Status::kJoined || status_ == Status::kReplayed ||
           status_ == Status::kDuplicate;
  }
  /// has_value() is false for `duplicate` and `in_progress`.
  [[nodiscard]] bool has_value() const noexcept { return value_ != nullptr; }
  /// value() returns the result; throws `std::logic_error` when there is none.
  [[nodiscard]] const T& value() const {
    if (!value_)
      throw std::logic_error(std::string("once: no value for status ") + status_name(status_));
    return *value_;
  }
  /// shared_value() returns the one result object every caller shares (or nullptr).
  [[nodiscard]] const std::shared_ptr<const T>& shared_value() const noexcept { return value_; }
  /// fence() returns the fencing token of the execution, 0 when unknown.
  [[nodiscard]] std::int64_t fence() const noexcept { return fence_; }
  /// lease_expiry() says, for `in_progress`, when the other holder's lease lapses.
  [[nodiscard]] std::optional<TimePoint> lease_expiry() const noexcept { return lease_expiry_; }

 private:
  Status status_;
  std::shared_ptr<const T> value_;
  std::int64_t fence_;
  std::optional<TimePoint> lease_expiry_;
};

/// Outcome<void> is the outcome of an operation that returns nothing.
template <>
class Outcome<void> {
 public:
  /// Outcome() is built by `once`; a test may build one to stand in for it. `lease_expiry`
  /// is set only for `in_progress`.
  Outcome(Status status, std::int64_t fence, std::optional<TimePoint> lease_expiry)
      : status_(status), fence_(fence), lease_expiry_(lease_expiry) {}
  /// status() says how this call ended.
  [[nodiscard]] Status status() const noexcept { return status_; }
  /// cache_hit() is true when the operation ran in another call (joined, replayed, duplicate).
  [[nodiscard]] bool cache_hit() const noexcept {
    return status_ == Status::kJoined || status_ == Status::kReplayed ||
           status_ == Status::kDuplicate;
  }
  /// fence() returns the fencing token of the execution, 0 when unknown.
  [[nodiscard]] std::int64_t fence() const noexcept { return fence_; }
  /// lease_expiry() says, for `in_progress`, when the other holder's lease lapses.
  [[nodiscard]] std::optional<TimePoint> lease_expiry() const noexcept { return lease_expiry_; }

 private:
  Status status_;
  std::int64_t fence_;
  std::optional<TimePoint> lease_expiry_;
};

namespace detail {

// Calls fn with what it accepts: (claim, stop token), (stop token) or nothing.
template <class Fn>
decltype(auto) call_operation(Fn& fn, const Claim& claim, std::stop_token token) {
  if constexpr (std::is_invocable_v<Fn&, const Claim&, std::stop_token>) {
    return std::invoke(fn, claim, std::move(token));
  } else if constexpr (std::is_invocable_v<Fn&, std::stop_token>) {
    return std::invoke(fn, std::move(token));
  } else {
    return std::invoke(fn);
  }
}

template <class Fn>
using operation_result_t =
    decltype(call_operation(std::declval<Fn&>(), std::declval<const Claim&>(), std::stop_token{}));

}  // namespace detail

/// once() runs `fn` at most once per `key` on `backend` and returns its `Outcome`. `fn` takes
/// nothing, a `std::stop_token`, or `(const Claim&, std::stop_token)` — the claim carries the
/// fencing token for the operation to fence its own writes. Results are stored through `codec`
/// (default `Codec<R>`); a result it cannot encode is logged (`result_unencodable`) and the key
/// completed without it, so later calls get `kDuplicate` and the operation never runs again.
/// Throws what `fn` throws, `Cancelled`, `ReentryError`, `std::invalid_argument` for a bad key,
/// and `StoreError` when the store fails before the operation ran.
template <class Fn, class R = std::remove_cvref_t<detail::operation_result_t<Fn>>,
          class C = Codec<R>>
Outcome<R> once(std::string_view key, LockBackend& backend, Fn&& fn,
                const OnceOptions& options = {}, C codec = {}) {
  detail::OnceHooks hooks;
  hooks.type = typeid(R);
  if constexpr (std::is_void_v<R>) {
    hooks.execute = [&fn](const Claim& claim, std::stop_token token,
                          bool& ran) -> std::shared_ptr<const void> {
      detail::call_operation(fn, claim, std::move(token));
      ran = true;
      return nullptr;
    };
  } else {
    static_assert(CodecFor<C, R>, "once: no codec for this result type; specialize Codec<T>");
    hooks.execute = [&fn](const Claim& claim, std::stop_token token,
                          bool& ran) -> std::shared_ptr<const void> {
      R value = detail::call_operation(fn, claim, std::move(token));
      ran = true;
      return std::make_shared<const R>(std::move(value));
    };
    hooks.encode = [&codec](const void* value) {
      return std::string(codec.encode(*static_cast<const R*>(value)));
    };
    hooks.decode = [&codec](const std::string& bytes) -> std::shared_ptr<const void> {
      return std::make_shared<const R>(codec.decode(bytes));
    };
  }
  detail::ErasedOutcome out = detail::run_once(key, backend, options, hooks);
  if constexpr (std::is_void_v<R>) {
    return Outcome<void>(out.status, out.fence, out.lease_expiry);
  } else {
    return Outcome<R>(out.status, std::static_pointer_cast<const R>(out.value), out.fence,
                      out.lease_expiry);
  }
}

/// Policy binds a key function and a backend, so an operation's arguments pick its key.
///
///   auto create_payment = idempotency::policy(payment_key, backend).apply(charge);
///   auto outcome = create_payment("request-123", 2499);   // key = payment_key("request-123",
///   2499)
template <class KeyFn>
class Policy {
 public:
  /// Policy() keeps `key_fn` and `options` by value and `backend` by reference: the backend
  /// must outlive the policy and every callable `apply` returns.
  Policy(KeyFn key_fn, LockBackend& backend, OnceOptions options)
      : key_fn_(std::move(key_fn)), backend_(&backend), options_(std::move(options)) {}

  /// apply() returns a callable with `op`'s parameters that runs `op` through `once`, keyed by
  /// the key function called with the same arguments. A key function that throws or returns an
  /// empty key propagates before the backend is touched.
  template <class Op>
  auto apply(Op op) const {
    return [key_fn = key_fn_, backend = backend_, options = options_,
            op = std::move(op)](auto&&... args) {
      const std::string key = std::invoke(key_fn, args...);
      return once(
          key, *backend, [&] { return std::invoke(op, args...); }, options);
    };
  }

 private:
  KeyFn key_fn_;
  LockBackend* backend_;
  OnceOptions options_;
};

/// policy() builds a `Policy` from a key function, a backend and options.
template <class KeyFn>
Policy<KeyFn> policy(KeyFn key_fn, LockBackend& backend, OnceOptions options = {}) {
  return Policy<KeyFn>(std::move(key_fn), backend, std::move(options));
}

}  // namespace idempotency
