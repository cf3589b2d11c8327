// The process's one heartbeat scheduler: a queue of due renewals and the thread that runs them.
#include "idempotency/detail/heartbeat.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

namespace idempotency::detail {

using SteadyClock = std::chrono::steady_clock;

struct HeartbeatEntry {
  HeartbeatSpec spec;
  std::uint64_t id = 0;
  std::atomic<bool> lost{false};
  std::atomic<std::uint64_t> renewals{0};
  // Guarded by the scheduler's mutex.
  SteadyClock::time_point due;
  bool running = false;  // its renew or on_lost is being called right now
  bool stopped = false;  // removed, or lost: never queued again
};

namespace {

// A failed renewal is retried well before the lease lapses, but not in a tight loop.
constexpr std::chrono::milliseconds kMinRetry{10};

class Scheduler {
 public:
  static Scheduler& instance() {
    static Scheduler scheduler;
    return scheduler;
  }

  void add(const std::shared_ptr<HeartbeatEntry>& entry) {
    std::lock_guard lock(mutex_);
    entry->id = next_id_++;
    enqueue(entry, SteadyClock::now() + entry->spec.interval);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }

  void remove(HeartbeatEntry& entry) {
    std::unique_lock lock(mutex_);
    queue_.erase({entry.due, entry.id});  // not there while running: then `stopped` tells it
    entry.stopped = true;
    // On the scheduler thread (an on_lost that ends the work, say) the call in flight is the
    // caller itself: waiting would never end.
    if (std::this_thread::get_id() != thread_.get_id()) {
      settled_.wait(lock, [&] { return !entry.running; });
    }
  }

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

 private:
  Scheduler() = default;
  ~Scheduler() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  void enqueue(const std::shared_ptr<HeartbeatEntry>& entry, SteadyClock::time_point due) {
    entry->due = due;
    queue_.emplace(std::pair{due, entry->id}, entry);
    // Wake the thread only when it would sleep past this renewal: every guarded request starts
    // a heartbeat, and a wake-up (a context switch) per request would tax the hot path.
    if (due < sleeping_until_) wake_.notify_all();
  }

  void run() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      if (queue_.empty()) {
        sleeping_until_ = SteadyClock::time_point::max();
        wake_.wait(lock);
        sleeping_until_ = SteadyClock::time_point::min();
        continue;
      }
      const auto first = queue_.begin();
      const auto due = first->first.first;
      if (SteadyClock::now() < due) {
        sleeping_until_ = due;
        wake_.wait_until(lock, due);
        sleeping_until_ = SteadyClock::time_point::min();
        continue;
      }
      // Held here, not only by its handle: an on_lost may destroy the handle on this thread.
      const std::shared_ptr<HeartbeatEntry> entry = std::move(first->second);
      queue_.erase(first);
      entry->running = true;
      lock.unlock();
      renew_once(entry, lock);  // returns with the lock held
      entry->running = false;
      settled_.notify_all();
    }
  }

  // One renewal of `entry`, then its next due time, or the claim declared lost.
  void renew_once(const std::shared_ptr<HeartbeatEntry>& handle,
                  std::unique_lock<std::mutex>& lock) {
    HeartbeatEntry& entry = *handle;
    enum class Result { kExtended, kRefused, kFailed } result = Result::kFailed;
    const auto started = SteadyClock::now();
    try {
      result = entry.spec.renew() ? Result::kExtended : Result::kRefused;
    } catch (...) {
      result = Result::kFailed;  // a store hiccup: retried below while the lease lasts
    }
    lock.lock();
    if (entry.stopped) return;  // stopped meanwhile: nothing more to do
    const auto now = SteadyClock::now();
    if (result == Result::kExtended) {
      // The store extended from its own now, no earlier than `started`.
      entry.spec.held_until = started + entry.spec.lease;
      entry.renewals.fetch_add(1);
      enqueue(handle, now + entry.spec.interval);
      return;
    }
    if (result == Result::kFailed && now < entry.spec.held_until) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(entry.spec.held_until - now);
      enqueue(handle, now + std::min(std::max(left / 2, kMinRetry), entry.spec.interval));
      return;
    }
    entry.stopped = true;
    entry.lost.store(true);
    lock.unlock();
    try {
      entry.spec.on_lost();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the scheduler must outlive a bad callback
    }
    lock.lock();
  }

  std::mutex mutex_;
  std::condition_variable wake_;     // an earlier renewal was queued, or stop
  std::condition_variable settled_;  // a renewal (or on_lost) returned
  // The live heartbeats by due time (the id breaks ties), each in one node; one that is running
  // or stopped is not here.
  std::map<std::pair<SteadyClock::time_point, std::uint64_t>, std::shared_ptr<HeartbeatEntry>>
      queue_;
  std::uint64_t next_id_ = 1;
  bool stopping_ = false;
  // When the thread's wait ends: min() while it is awake (it rereads the queue before waiting
  // again), max() while the queue is empty.
  SteadyClock::time_point sleeping_until_ = SteadyClock::time_point::min();
  std::thread thread_;  // started with the first heartbeat
};

}  // namespace

Heartbeat::~Heartbeat() { Scheduler::instance().remove(*entry_); }

bool Heartbeat::lost() const noexcept { return entry_->lost.load(); }

std::uint64_t Heartbeat::renewals() const noexcept { return entry_->renewals.load(); }

std::unique_ptr<Heartbeat> start_heartbeat(HeartbeatSpec spec) {
  if (spec.interval.count() <= 0 || spec.interval >= spec.lease) {
    throw std::invalid_argument(
        "heartbeat: the interval must be positive and shorter than the lease");
  }
  if (!spec.renew || !spec.on_lost) {
    throw std::invalid_argument("heartbeat: renew and on_lost must both be set");
  }
  if (spec.held_until == SteadyClock::time_point{}) {
    spec.held_until = SteadyClock::now() + spec.lease;
  }
  auto entry = std::make_shared<HeartbeatEntry>();
  entry->spec = std::move(spec);
  Scheduler::instance().add(entry);
  return std::unique_ptr<Heartbeat>(new Heartbeat(std::move(entry)));
}

}  // namespace idempotency::detail
