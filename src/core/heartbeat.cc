// The process's one heartbeat scheduler: queues of due renewals and the few threads that run
// them.
//
// Every guarded call starts a heartbeat and nearly all of them end long before their first
// renewal, so starting and stopping one must cost no allocation: a Heartbeat is linked into a
// queue in place. Heartbeats of one interval are due in the order they were queued (each is
// queued at now + interval, with now read under the mutex), so each interval has a FIFO list,
// and the next renewal due is the earliest of the lists' heads. A retry after a failed renewal
// is due sooner than its interval: those go to a list of their own, kept in order by insertion
// (failures are rare, and a failing store fails every heartbeat alike).
#include "idempotency/detail/heartbeat.h"

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <list>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

namespace idempotency::detail {

using SteadyClock = std::chrono::steady_clock;

// Heartbeats linked in due order, earliest first.
struct Heartbeat::Queue {
  Heartbeat* head = nullptr;
  Heartbeat* tail = nullptr;
};

namespace {
// A failed renewal is retried well before the lease lapses, but not in a tight loop.
constexpr std::chrono::milliseconds kMinRetry{10};
// Threads that may renew at once. A renewal is a blocking store call: one stalled until the
// store's timeout must not hold back every other claim's, nor must a slow store's round trips,
// one after another, outlast a heartbeat's interval. Started one at a time, as needed.
constexpr std::size_t kMaxRenewers = 4;
// Distinct intervals whose queues are kept once empty: a process uses one or a few, and a kept
// queue spares every guarded call an allocation. Past this many, an emptied queue goes, so
// intervals that differ call by call cannot grow the map, and the watcher's scan of it, for ever.
constexpr std::size_t kKeptIntervals = 16;
}  // namespace

class HeartbeatScheduler {
  // A thread that renews: the watcher sleeps until the next renewal is due, the others renew
  // or wait to be needed.
  struct Renewer {
    std::thread thread;
    std::thread::id id;
    Heartbeat* running = nullptr;  // whose callback it runs now; null once that ended itself
  };

 public:
  static HeartbeatScheduler& instance() {
    static HeartbeatScheduler scheduler;
    return scheduler;
  }

  void add(Heartbeat& beat) {
    std::lock_guard lock(mutex_);
    // What may throw comes first: a heartbeat whose constructor throws must not stay queued.
    if (renewers_.empty()) start_renewer();
    Heartbeat::Queue& queue = by_interval_[beat.spec_.interval];
    enqueue(beat, queue, SteadyClock::now() + beat.spec_.interval);
  }

  void remove(Heartbeat& beat) {
    std::unique_lock lock(mutex_);
    unlink(beat);  // not queued while running: then `stopped_` tells it
    beat.stopped_ = true;
    Renewer* renewer = renewer_of(beat);
    if (renewer == nullptr) return;
    if (renewer->id == std::this_thread::get_id()) {
      // Its own callback ends it (an on_lost that ends the work, say): the call in flight is
      // the caller itself, and waiting would never end. The renewer must not touch it again.
      renewer->running = nullptr;
      return;
    }
    settled_.wait(lock, [&] { return renewer_of(beat) == nullptr; });
  }

  std::size_t intervals_queued() {
    std::lock_guard lock(mutex_);
    return by_interval_.size();
  }

  HeartbeatScheduler(const HeartbeatScheduler&) = delete;
  HeartbeatScheduler& operator=(const HeartbeatScheduler&) = delete;

 private:
  HeartbeatScheduler() = default;
  ~HeartbeatScheduler() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    hire_.notify_all();
    for (auto& renewer : renewers_) renewer.thread.join();
  }

  // Requires the mutex. The renewer running `beat`'s callback, if one is (of at most
  // kMaxRenewers: a scan, and no second record of it to keep in step).
  Renewer* renewer_of(const Heartbeat& beat) {
    for (Renewer& renewer : renewers_) {
      if (renewer.running == &beat) return &renewer;
    }
    return nullptr;
  }

  // Requires the mutex. Throws std::system_error when no thread can be started.
  void start_renewer() {
    Renewer& renewer = renewers_.emplace_back();
    try {
      renewer.thread = std::thread([this, &renewer] { run(renewer); });
    } catch (...) {
      renewers_.pop_back();
      throw;
    }
    renewer.id = renewer.thread.get_id();  // read by others under the mutex, held until here
  }

  // Requires the mutex. Links `beat` into `queue` at `due`: at the tail, or for a retry, after
  // the last one due no later.
  void enqueue(Heartbeat& beat, Heartbeat::Queue& queue, SteadyClock::time_point due) {
    beat.due_ = due;
    beat.queue_ = &queue;
    Heartbeat* after = queue.tail;
    while (after != nullptr && after->due_ > due) after = after->prev_;
    beat.prev_ = after;
    beat.next_ = after != nullptr ? after->next_ : queue.head;
    (beat.next_ != nullptr ? beat.next_->prev_ : queue.tail) = &beat;
    (after != nullptr ? after->next_ : queue.head) = &beat;
    // Wake the watcher only when it would sleep past this renewal: every guarded call starts a
    // heartbeat, and a wake-up (a context switch) per call would tax the hot path.
    if (due < sleeping_until_) wake_.notify_all();
  }

  // Requires the mutex. Takes `beat` out of its queue, if it is in one; an interval's queue
  // left empty goes too when more than kKeptIntervals are kept.
  void unlink(Heartbeat& beat) {
    Heartbeat::Queue* queue = beat.queue_;
    if (queue == nullptr) return;
    (beat.prev_ != nullptr ? beat.prev_->next_ : queue->head) = beat.next_;
    (beat.next_ != nullptr ? beat.next_->prev_ : queue->tail) = beat.prev_;
    beat.queue_ = nullptr;
    beat.prev_ = beat.next_ = nullptr;
    if (queue->head == nullptr && queue != &retries_ && by_interval_.size() > kKeptIntervals) {
      by_interval_.erase(beat.spec_.interval);
    }
  }

  // Requires the mutex. The heartbeat due first, or null when none is queued.
  Heartbeat* first_due() {
    Heartbeat* first = retries_.head;
    for (auto& [interval, queue] : by_interval_) {
      if (queue.head != nullptr && (first == nullptr || queue.head->due_ < first->due_)) {
        first = queue.head;
      }
    }
    return first;
  }

  // Requires the mutex, held by `lock`. As the watcher: sleeps until a renewal is due and
  // returns it, or null once stopping.
  Heartbeat* watch(std::unique_lock<std::mutex>& lock) {
    while (!stopping_) {
      Heartbeat* first = first_due();
      if (first == nullptr) {
        sleeping_until_ = SteadyClock::time_point::max();
        wake_.wait(lock);
        sleeping_until_ = SteadyClock::time_point::min();
        continue;
      }
      // A copy: the wait reads its deadline after the mutex was let go, when the heartbeat
      // may be gone.
      const SteadyClock::time_point due = first->due_;
      if (SteadyClock::now() < due) {
        sleeping_until_ = due;
        wake_.wait_until(lock, due);
        sleeping_until_ = SteadyClock::time_point::min();
        continue;
      }
      return first;
    }
    return nullptr;
  }

  // One renewer's life: the watcher while none is, else idle until needed; a renewal taken as
  // the watcher is run after handing the watch on, so the queue is never left unwatched while
  // a thread may still be started.
  void run(Renewer& self) {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      if (watching_) {
        ++idle_;
        hire_.wait(lock);
        --idle_;
        continue;
      }
      watching_ = true;
      Heartbeat* due = watch(lock);
      watching_ = false;
      if (due == nullptr) break;
      unlink(*due);
      hand_on_the_watch();
      self.running = due;
      renew_once(self, *due, lock);  // returns with the lock held
      self.running = nullptr;
      settled_.notify_all();
    }
  }

  // Requires the mutex. Someone else watches while this thread renews: an idle renewer, or a
  // new one while there are fewer than kMaxRenewers. Past that, the next renewer to finish.
  void hand_on_the_watch() {
    if (idle_ > 0) {
      hire_.notify_one();
      return;
    }
    if (renewers_.size() >= kMaxRenewers) return;
    try {
      start_renewer();
    } catch (...) {  // NOLINT(bugprone-empty-catch): no thread to spare; renewals queue instead
    }
  }

  // Requires the mutex, held by `lock`; returns with it held. One renewal of `beat`, then its
  // next due time, or the claim declared lost. The callbacks run without the mutex, and may
  // end the heartbeat itself (remove() on this thread): it is not touched after that.
  void renew_once(Renewer& self, Heartbeat& beat, std::unique_lock<std::mutex>& lock) {
    enum class Result { kExtended, kRefused, kFailed } result = Result::kFailed;
    const auto started = SteadyClock::now();
    // On this stack while it runs: a callback that ends the heartbeat destroys the spec.
    std::function<bool()> renew = std::move(beat.spec_.renew);
    lock.unlock();
    try {
      result = renew() ? Result::kExtended : Result::kRefused;
    } catch (...) {
      result = Result::kFailed;  // a store hiccup: retried below while the lease lasts
    }
    lock.lock();
    if (self.running != &beat) return;  // ended by its own callback
    beat.spec_.renew = std::move(renew);
    if (beat.stopped_) return;  // stopped meanwhile: nothing more to do
    const auto now = SteadyClock::now();
    if (result == Result::kExtended) {
      // The store extended from its own now, no earlier than `started`.
      beat.spec_.held_until = started + beat.spec_.lease;
      beat.renewals_.fetch_add(1);
      enqueue(beat, by_interval_[beat.spec_.interval], now + beat.spec_.interval);
      return;
    }
    if (result == Result::kFailed && now < beat.spec_.held_until) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(beat.spec_.held_until - now);
      enqueue(beat, retries_, now + std::min(std::max(left / 2, kMinRetry), beat.spec_.interval));
      return;
    }
    beat.stopped_ = true;
    beat.lost_.store(true);
    std::function<void()> on_lost = std::move(beat.spec_.on_lost);
    lock.unlock();
    try {
      on_lost();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the scheduler must outlive a bad callback
    }
    lock.lock();
  }

  std::mutex mutex_;
  std::condition_variable wake_;     // for the watcher: an earlier renewal was queued, or stop
  std::condition_variable hire_;     // for an idle renewer: the watch is free, or stop
  std::condition_variable settled_;  // a renewal (or on_lost) returned
  // The queued heartbeats: by interval, and the retries. One that is running or stopped is in
  // none. A map node per distinct interval, kept while empty up to kKeptIntervals of them.
  std::map<std::chrono::milliseconds, Heartbeat::Queue> by_interval_;
  Heartbeat::Queue retries_;
  std::list<Renewer> renewers_;  // started as needed, up to kMaxRenewers
  std::size_t idle_ = 0;         // renewers waiting on hire_
  bool watching_ = false;        // a renewer is the watcher
  bool stopping_ = false;
  // When the watcher's wait ends: min() while it is awake or none watches (it rereads the
  // queues before waiting again), max() while none is queued.
  SteadyClock::time_point sleeping_until_ = SteadyClock::time_point::min();
};

Heartbeat::Heartbeat(HeartbeatSpec spec) : spec_(std::move(spec)) {
  if (spec_.interval.count() <= 0 || spec_.interval >= spec_.lease) {
    throw std::invalid_argument(
        "heartbeat: the interval must be positive and shorter than the lease");
  }
  if (!spec_.renew || !spec_.on_lost) {
    throw std::invalid_argument("heartbeat: renew and on_lost must both be set");
  }
  if (spec_.held_until == SteadyClock::time_point{}) {
    spec_.held_until = SteadyClock::now() + spec_.lease;
  }
  HeartbeatScheduler::instance().add(*this);
}

Heartbeat::~Heartbeat() { HeartbeatScheduler::instance().remove(*this); }

bool Heartbeat::lost() const noexcept { return lost_.load(); }

std::uint64_t Heartbeat::renewals() const noexcept { return renewals_.load(); }

std::size_t heartbeat_intervals_queued() {
  return HeartbeatScheduler::instance().intervals_queued();
}

}  // namespace idempotency::detail
