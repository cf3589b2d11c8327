// Heartbeats (internal: guards and `once` use them): a few threads per process renew every
// live claim's lease at its interval, so work may run far longer than its lease while a crashed
// holder's key is still reclaimable one short lease after it died.
//
// The scheduler's threads serve every heartbeat in the process (not a thread per claim): one
// watches for the next renewal due, and runs it after handing the watch to another, started as
// needed up to four. So a renewal stalled in its store (until the store's timeout) holds back
// no other while fewer than four stall at once. A renewal is a call of the owner's `renew`,
// made on one of those threads: `true` means extended, `false` means refused (the claim was
// fenced out, released or completed: lost for good), and a throw is a transient failure,
// retried sooner until the lease as last extended would lapse, at which point the claim counts
// as lost too. `on_lost` is called once, on one of those threads, and renewals stop. Nothing a
// renewal does ever throws into the work.
//
// Thread safety: Heartbeat's members may be used from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>

namespace idempotency::detail {

/// What to renew and how often.
struct HeartbeatSpec {
  /// Time between two renewals; positive, and shorter than `lease`.
  std::chrono::milliseconds interval{0};
  /// The lease each renewal asks for: after a renewal that succeeded at t, the claim is held
  /// until t + lease, so failures are retried until then and no longer.
  std::chrono::milliseconds lease{0};
  /// When the claim's current lease lapses (steady clock); default: now + lease.
  std::chrono::steady_clock::time_point held_until{};
  /// One renewal: true = extended, false = refused (lost); a throw is a transient failure.
  std::function<bool()> renew;
  /// Called once when the claim is lost (refused, or failures outlasted the lease); must not
  /// block for long: it holds one of the few renewing threads meanwhile.
  std::function<void()> on_lost;
};

class HeartbeatScheduler;

/// Heartbeat keeps renewing from its construction until its destruction. The scheduler links
/// it into its queue in place, so starting one allocates nothing (a heartbeat starts with every
/// guarded call); it is neither copied nor moved.
class Heartbeat {
 public:
  /// Heartbeat() schedules the first renewal one interval from now. Throws
  /// std::invalid_argument when the interval is not positive and shorter than the lease, or a
  /// callback is empty.
  explicit Heartbeat(HeartbeatSpec spec);
  /// ~Heartbeat() stops the renewals; if one of its callbacks is running, waits for it to
  /// return (except when destroyed by that very callback, on its thread), so `renew` and
  /// `on_lost` never run once the destructor has returned.
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  /// lost() says whether the claim was lost (and `on_lost` called).
  [[nodiscard]] bool lost() const noexcept;
  /// renewals() counts the renewals that extended the lease.
  [[nodiscard]] std::uint64_t renewals() const noexcept;

 private:
  friend class HeartbeatScheduler;  // heartbeat.cc: the threads that renew
  struct Queue;

  // Guarded by the scheduler's mutex, but for the atomics.
  HeartbeatSpec spec_;
  std::atomic<bool> lost_{false};
  std::atomic<std::uint64_t> renewals_{0};
  std::chrono::steady_clock::time_point due_;
  Queue* queue_ = nullptr;  // the queue it is linked into; null while running or stopped
  Heartbeat* prev_ = nullptr;
  Heartbeat* next_ = nullptr;
  bool stopped_ = false;  // removed, or lost: never queued again
};

/// heartbeat_intervals_queued() counts the distinct intervals the scheduler keeps a queue for
/// (for tests: it stays bounded whatever intervals come and go).
[[nodiscard]] std::size_t heartbeat_intervals_queued();

}  // namespace idempotency::detail
