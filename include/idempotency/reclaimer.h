// Reclaimer: deletes expired records in the background, so a long-running process keeps its
// store at what the traffic needs — rate × (lease + ttl) records, plus what one purge interval
// lets pile up — instead of growing until the disk is full.
//
//   auto backend = std::make_shared<idempotency::SqliteLock>("/var/lib/idem.db");
//   idempotency::Reclaimer reclaimer(backend, {.interval = std::chrono::minutes(1)});
//   ...  // serve; the reclaimer stops (and joins its thread) when destroyed
//
// One thread per Reclaimer, asleep between passes. Each pass is one `purge_expired()`, which
// every backend runs in bounded batches (short write transactions) and, on PostgreSQL, with
// `SKIP LOCKED` so that instances purging at once do not fight over rows. Waits are jittered
// (±25 % of the interval) so that many instances started together do not purge in lockstep.
// A failing pass is logged (`purge_failed`) and retried at the next tick; a pass that takes
// longer than the interval is logged (`purge_behind`). Purging never changes whether a claim
// wins, is a duplicate or finds the key held: only records past their `expires_at` are deleted,
// and a claim already wins those. The purged key's next claim starts again at fence 1 (as on
// Redis, which deletes at `expires_at`) instead of the old fence + 1.
//
// Thread safety: construct and destroy from one thread; `passes()` and `purged()` may be read
// from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "idempotency/backend.h"

namespace idempotency {

/// What one purge pass did, handed to `ReclaimerOptions::on_pass` (for metrics).
struct PurgePass {
  /// Records deleted by this pass.
  std::size_t purged = 0;
  /// How long the pass took.
  std::chrono::steady_clock::duration took{};
  /// Empty when the pass succeeded; otherwise the store's one-line error.
  std::string error;
  /// The records the store holds after the pass, where it can say (`stored_records()`; asked
  /// only when `on_pass` is set).
  std::optional<std::size_t> stored;
};

/// Options for Reclaimer. Fill with designated initializers.
struct ReclaimerOptions {
  /// The mean time between the starts of two passes; each wait is jittered by ±25 %. Must be
  /// positive and at most `kMaxTtl` (366 days).
  std::chrono::milliseconds interval = std::chrono::minutes(1);
  /// Called after every pass, on the reclaimer's thread; must not throw (a throw is ignored).
  std::function<void(const PurgePass&)> on_pass;
};

/// Reclaimer runs `backend->purge_expired()` every `interval` on a thread of its own.
class Reclaimer {
 public:
  /// Reclaimer() starts the thread; the first pass runs after one (jittered) interval. Throws
  /// `std::invalid_argument` for a null backend or a non-positive interval.
  Reclaimer(std::shared_ptr<LockBackend> backend, ReclaimerOptions options = {});
  /// ~Reclaimer() stops the thread, waiting for a running pass to end.
  ~Reclaimer();
  Reclaimer(const Reclaimer&) = delete;
  Reclaimer& operator=(const Reclaimer&) = delete;

  /// passes() counts the passes run so far (failed ones included).
  [[nodiscard]] std::size_t passes() const noexcept { return passes_.load(); }
  /// purged() counts the records deleted so far.
  [[nodiscard]] std::size_t purged() const noexcept { return purged_.load(); }

 private:
  void run();

  std::shared_ptr<LockBackend> backend_;
  ReclaimerOptions options_;
  std::atomic<std::size_t> passes_{0};
  std::atomic<std::size_t> purged_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace idempotency
