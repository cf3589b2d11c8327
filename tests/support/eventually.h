// eventually(): polls a condition until it holds or a generous limit passes. A bounded hang
// guard for tests that wait on another thread or process, never a timing assertion.
#pragma once

#include <chrono>
#include <thread>

namespace idempotency::testing {

/// eventually() returns true as soon as `condition()` holds, false if it still does not after
/// `limit` (polled every millisecond).
template <class F>
bool eventually(F&& condition, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return condition();
}

}  // namespace idempotency::testing
