// outcome_of(): the value of a store call for an asynchronous caller — the call's result, or
// the StoreFailure its exception becomes — shared by LockBackend's default claim_async /
// complete_async and by backends that decode a reply on their own I/O thread.
#pragma once

#include <exception>
#include <utility>
#include <variant>

#include "idempotency/backend.h"

namespace idempotency::detail {

/// outcome_of() returns `f()`, or a StoreFailure with the message of what it threw (a
/// `StoreError`, or out of memory): an asynchronous caller gets a value either way.
template <class T, class F>
[[nodiscard]] std::variant<T, StoreFailure> outcome_of(F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const std::exception& e) {
    return StoreFailure{e.what()};
  }
}

}  // namespace idempotency::detail
