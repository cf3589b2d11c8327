// wait_for_notification(): the notify-wait loop of the stores that push changes (PostgreSQL
// LISTEN/NOTIFY, Redis SUBSCRIBE), written once so both wake, give up and fall back alike.
// Internal: never installed; header-only since each store supplies its own steps.
//
// Thread safety: pure functions of their arguments.
#pragma once

#include <poll.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <stop_token>

#include "idempotency/record.h"
#include "idempotency/wait_counts.h"

namespace idempotency::store_detail {

/// worth_waiting() says whether the record a waiter read right after subscribing can still
/// change under it: a missing or DONE record, or (when `now` is known) a lapsed lease or
/// retention, notifies nobody, so the caller should claim again at once.
[[nodiscard]] inline bool worth_waiting(const std::optional<Record>& record,
                                        std::optional<Millis> now) {
  if (!record || record->state == RecordState::kDone) return false;
  return !now || (*now < record->lease_expiry && *now < record->expires_at);
}

/// WaitEnd says how a wait_for_notification() ended, so a store can count its wake-ups (a
/// NOTIFY told from a timeout without measuring time).
enum class WaitEnd {
  kSettled,      ///< subscribe() found nothing to wait for
  kWoken,        ///< readable() asked to wake
  kTimedOut,     ///< `timeout` passed first
  kStopped,      ///< `stop` was requested
  kUnavailable,  ///< subscribe() threw, so the rest was slept; or poll() failed
  kPolled,       ///< the store has no notifications here (a pooler): slept, to claim again
};
/// How many WaitEnds there are, for a table of counts indexed by them.
inline constexpr std::size_t kWaitEnds = 6;

/// WaitTally counts a store's waits by how they ended; safe from any number of threads.
class WaitTally {
 public:
  /// count() adds one wait that ended as `end`.
  void count(WaitEnd end) noexcept { ++ends_[static_cast<std::size_t>(end)]; }
  /// counts() reads the tally as the public WaitCounts.
  [[nodiscard]] WaitCounts counts() const noexcept {
    const auto of = [&](WaitEnd end) { return ends_[static_cast<std::size_t>(end)].load(); };
    return {.settled = of(WaitEnd::kSettled),
            .notified = of(WaitEnd::kWoken),
            .timed_out = of(WaitEnd::kTimedOut),
            .stopped = of(WaitEnd::kStopped),
            .unavailable = of(WaitEnd::kUnavailable),
            .polled = of(WaitEnd::kPolled)};
  }

 private:
  std::array<std::atomic<std::uint64_t>, kWaitEnds> ends_{};
};

/// wait_for_notification() waits up to `timeout` for a store's notification about one key.
/// `subscribe()` opens the store's own listening connection, subscribes, then looks at the
/// record once (a change made before the subscription took effect notified nobody); it
/// returns the socket to wait on, or nullopt when there is nothing to wait for. When it throws
/// (store unreachable), `sleep(left)` waits out the rest instead; the next claim reports the
/// failure. `readable()` runs each time the socket has input and returns true to wake (the
/// notification for this key, EOF or an error). Returns early when `stop` is requested.
template <class Subscribe, class Readable, class Sleep>
WaitEnd wait_for_notification(std::chrono::milliseconds timeout, const std::stop_token& stop,
                              Subscribe&& subscribe, Readable&& readable, Sleep&& sleep) {
  using SteadyClock = std::chrono::steady_clock;
  const auto deadline = SteadyClock::now() + timeout;
  auto left = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
  };
  std::optional<int> socket;
  try {
    socket = subscribe();
  } catch (const std::exception&) {
    if (left() > std::chrono::milliseconds::zero()) sleep(left());
    return WaitEnd::kUnavailable;
  }
  if (!socket) return WaitEnd::kSettled;
  pollfd pfd{*socket, POLLIN, 0};
  while (!stop.stop_requested()) {
    const auto remaining = left();
    if (remaining <= std::chrono::milliseconds::zero()) return WaitEnd::kTimedOut;
    // Short slices so a stop request is seen promptly.
    const int slice = static_cast<int>(std::min<std::int64_t>(remaining.count(), 50));
    const int n = ::poll(&pfd, 1, slice);
    if (n < 0 && errno != EINTR) return WaitEnd::kUnavailable;
    if (n <= 0) continue;
    if (readable()) return WaitEnd::kWoken;
  }
  return WaitEnd::kStopped;
}

}  // namespace idempotency::store_detail
