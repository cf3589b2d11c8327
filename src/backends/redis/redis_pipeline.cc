#include "redis_pipeline.h"

#include "idempotency/errors.h"
#include "redis_script_call.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string_view>
#include <utility>

namespace idempotency::redis_detail {
namespace {

// A waiting caller sleeps in the kernel until woken: a futex on its own word, because both
// standard ways to wait (std::binary_semaphore, std::atomic::wait) spin with sched_yield in
// libstdc++ first (measured: four yields a call, more client CPU than batching saved), and a
// mutex with a condition variable adds the mutex's own contention (3.5 futex calls a call).
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected) {
  // EINTR, EAGAIN (the word changed) and spurious wake-ups all return; the caller re-checks.
  (void)::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word),  // NOLINT
                  FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

void futex_wake(std::atomic<std::uint32_t>& word) {
  (void)::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word),  // NOLINT
                  FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

// Counts a call in Pipelines::reopen() for as long as it is there.
class Counted {
 public:
  explicit Counted(std::atomic<std::size_t>& count) : count_(count) { count_.fetch_add(1); }
  ~Counted() { count_.fetch_sub(1); }
  Counted(const Counted&) = delete;
  Counted& operator=(const Counted&) = delete;

 private:
  std::atomic<std::size_t>& count_;
};

}  // namespace

// One call in a pipeline, on its caller's stack. Whoever ends it (with its reply, a failure,
// or the reader role) fills `outcome` and then calls wake(), after which it must not touch the
// Pending again: the caller may have returned.
struct Pipeline::Pending {
  enum : std::uint32_t { kWaiting, kSleeping, kDone, kRead };

  // Returns kDone or kRead.
  std::uint32_t wait() {
    std::uint32_t s = state.load(std::memory_order_acquire);
    while (s < kDone) {
      if (s == kWaiting && !state.compare_exchange_weak(s, kSleeping, std::memory_order_acquire)) {
        continue;
      }
      futex_wait(state, kSleeping);
      s = state.load(std::memory_order_acquire);
    }
    return s;
  }

  void wake(std::uint32_t how) {
    // Only a sleeper needs the system call. A wake on the address of a caller that has
    // already returned is harmless: a futex is keyed by address, and any waiter re-checks.
    auto& word = state;
    if (word.exchange(how, std::memory_order_acq_rel) == kSleeping) futex_wake(word);
  }

  std::atomic<std::uint32_t> state{kWaiting};
  std::uintptr_t next = kReading;  // while queued: the call queued before this one, or kReading
  Pending* after = nullptr;        // while in flight: the call sent after this one
  std::string formatted;           // the command, in RESP (after those of `before`'s chain)
  Preceding* before = nullptr;     // the next command sent ahead of this one still unanswered
  PipelineOutcome outcome;
};

Pipeline::Pending* Pipeline::pending_at(std::uintptr_t at) noexcept {
  return reinterpret_cast<Pending*>(at);  // NOLINT(performance-no-int-to-ptr)
}

Pipeline::Pipeline(ConnectionPtr connection) : connection_(std::move(connection)) {}

Pipeline::~Pipeline() = default;

std::size_t Pipeline::queued() const noexcept {
  // For tests only: walks the queue while no call in it can end (the reader is blocked).
  std::size_t n = 0;
  for (std::uintptr_t at = head_.load(std::memory_order_acquire); at > kBroken;
       at = pending_at(at)->next) {
    ++n;
  }
  return n;
}

PipelineOutcome Pipeline::call(const std::vector<std::string_view>& args, Preceding* before) {
  Pending me;
  me.before = before;
  for (const Preceding* b = before; b != nullptr; b = b->next) {
    if (!Connection::format(b->args, me.formatted)) {
      return {.failure = IoFailure::kError, .error = "redis: out of memory"};
    }
  }
  if (!Connection::format(args, me.formatted)) {
    return {.failure = IoFailure::kError, .error = "redis: out of memory"};
  }
  const auto self = reinterpret_cast<std::uintptr_t>(&me);  // NOLINT
  std::uintptr_t head = head_.load(std::memory_order_acquire);
  for (;;) {
    if (head == kBroken) {
      return {.failure = IoFailure::kClosed, .maybe_sent = false, .error = unsent_error_};
    }
    const bool idle = head == kIdle;
    me.next = idle ? kReading : head;
    if (!head_.compare_exchange_weak(head, self, std::memory_order_acq_rel)) continue;
    // Queued onto an idle pipeline: the reader role is ours, and our call goes out first.
    if (idle || me.wait() == Pending::kRead) break;
    return std::move(me.outcome);
  }
  try {
    read_until(me);
  } catch (...) {
    // Even a failure to build an error message (std::bad_alloc) must end every call: an
    // exception leaving the reader role would leave the others asleep for good.
    own_failure_ = IoFailure::kError;
    fail_all();
  }
  return std::move(me.outcome);
}

void Pipeline::read_until(Pending& me) {
  for (;;) {
    // Every reply already read goes to its caller, in order.
    while (in_flight_front_ != nullptr) {
      ReplyPtr reply = connection_->take_reply();
      if (!reply) break;
      Pending* owner = in_flight_front_;
      if (owner->before != nullptr) {  // the reply to a command sent ahead of its own
        owner->before->reply = std::move(reply);
        owner->before = owner->before->next;
        continue;
      }
      in_flight_front_ = owner->after;
      if (in_flight_front_ == nullptr) in_flight_back_ = nullptr;
      owner->outcome.reply = std::move(reply);
      if (owner != &me) owner->wake(Pending::kDone);
    }
    if (connection_->failure() != IoFailure::kNone) {
      fail_all();
      return;
    }
    if (me.outcome.reply) {
      hand_over();
      return;
    }
    // What queued meanwhile goes out before we block, so it waits at most one round trip.
    if (!flush() || !connection_->receive()) {
      fail_all();
      return;
    }
  }
}

bool Pipeline::flush() {
  // The queue is newest first: reversed, it goes in flight oldest first, in the order sent.
  Pending* first = nullptr;
  Pending* last = nullptr;
  for (std::uintptr_t at = head_.exchange(kReading, std::memory_order_acq_rel); at > kBroken;) {
    Pending* p = pending_at(at);
    at = p->next;
    p->after = first;
    first = p;
    if (last == nullptr) last = p;
  }
  if (first == nullptr) return true;
  (in_flight_back_ != nullptr ? in_flight_back_->after : in_flight_front_) = first;
  in_flight_back_ = last;
  try {
    for (const Pending* p = first; p != nullptr; p = p->after) batch_.append(p->formatted);
  } catch (const std::bad_alloc&) {
    own_failure_ = IoFailure::kError;
    return false;
  }
  const bool sent = connection_->send(batch_);
  batch_.clear();
  writes_.fetch_add(1, std::memory_order_relaxed);
  return sent;
}

void Pipeline::hand_over() {
  for (;;) {
    if (!flush()) {
      fail_all();
      return;
    }
    if (in_flight_back_ != nullptr) {
      // The last call in flight: its reader hands every reply before its own to its caller,
      // so the role changes hands about once per batch rather than once per reply.
      in_flight_back_->wake(Pending::kRead);
      return;
    }
    std::uintptr_t expected = kReading;
    if (head_.compare_exchange_strong(expected, kIdle, std::memory_order_acq_rel)) return;
    // A call queued since the flush: send it before letting go.
  }
}

void Pipeline::fail_all() {
  const bool own = own_failure_ != IoFailure::kNone;
  const IoFailure failure = own ? own_failure_ : connection_->failure();
  try {
    broken_error_ = own ? "redis: out of memory" : connection_->error();
    // A call that never left says so: it failed because the connection had.
    constexpr std::string_view kPrefix = "redis: ";
    unsent_error_ = "redis: not sent, the shared connection failed first: " +
                    broken_error_.substr(broken_error_.starts_with(kPrefix) ? kPrefix.size() : 0);
  } catch (const std::bad_alloc&) {  // NOLINT(bugprone-empty-catch): the messages stay empty
  }
  batch_.clear();
  std::uintptr_t queued = head_.exchange(kBroken, std::memory_order_acq_rel);
  auto end = [&](Pending* p, bool maybe_sent) noexcept {
    p->outcome.failure = failure;
    p->outcome.maybe_sent = maybe_sent;
    try {
      p->outcome.error = maybe_sent ? broken_error_ : unsent_error_;
    } catch (const std::bad_alloc&) {  // NOLINT(bugprone-empty-catch): ended without a message
    }
    p->wake(Pending::kDone);  // harmless for the reader's own call, which is not waiting
  };
  for (Pending* p = std::exchange(in_flight_front_, nullptr); p != nullptr;) {
    Pending* after = p->after;  // read before wake(): the caller may return at once
    end(p, true);
    p = after;
  }
  in_flight_back_ = nullptr;
  while (queued > kBroken) {
    Pending* p = pending_at(queued);
    queued = p->next;
    end(p, false);
  }
}

Pipelines::Pipelines(std::size_t count, Connect connect)
    : connect_(std::move(connect)), slots_(std::max<std::size_t>(count, 1)) {}

PipelineOutcome Pipelines::call(const std::vector<std::string_view>& args, bool& fresh,
                                std::size_t& at, Preceding* before) {
  if (at >= slots_.size()) at = next_.fetch_add(1, std::memory_order_relaxed) % slots_.size();
  Slot& slot = slots_[at];
  fresh = false;
  std::shared_ptr<Pipeline> pipeline;
  {
    const std::shared_lock lock(slot.mutex);
    pipeline = slot.pipeline;
  }
  if (!pipeline || pipeline->broken()) pipeline = reopen(slot, fresh);
  return pipeline->call(args, before);
}

std::shared_ptr<Pipeline> Pipelines::reopen(Slot& slot, bool& fresh) {
  // Read before waiting: a failure counted after this is the connect this call waited for.
  const std::uint64_t failed_before = slot.failed_connects.load(std::memory_order_acquire);
  const Counted counted(slot.reopening);
  const std::lock_guard connecting(slot.connecting);
  {
    const std::shared_lock lock(slot.mutex);
    if (slot.pipeline && !slot.pipeline->broken()) {
      fresh = true;  // opened by the call this one waited for
      return slot.pipeline;
    }
  }
  if (slot.failed_connects.load(std::memory_order_acquire) != failed_before) {
    throw StoreError(slot.connect_error);
  }
  std::shared_ptr<Pipeline> opened;
  try {
    // Without the slot's mutex (a connect may take connect_timeout): only callers that found
    // the slot broken too wait, on `connecting`.
    opened = std::make_shared<Pipeline>(connect_());
  } catch (const StoreError& e) {
    slot.connect_error = e.what();
    slot.failed_connects.fetch_add(1, std::memory_order_acq_rel);
    throw;
  }
  const std::lock_guard lock(slot.mutex);
  // Callers still in the broken one keep it alive until they have their outcome.
  slot.pipeline = opened;
  fresh = true;
  return opened;
}

std::size_t Pipelines::reopening(std::size_t slot) const { return slots_[slot].reopening.load(); }

ReplyPtr call_pipelined(Pipelines& pipelines, const std::vector<std::string_view>& args,
                        const Script* script, PipelinedCall& call) {
  call.fresh = false;
  call.unreachable = false;
  auto command = [&](const std::vector<std::string_view>& a) -> ReplyPtr {
    PipelineOutcome o;
    try {
      o = pipelines.call(a, call.fresh, call.slot);
    } catch (const StoreError& e) {  // refused: the server may be down, or restarting
      call.failed = {.failure = IoFailure::kClosed, .maybe_sent = false, .error = e.what()};
      call.unreachable = true;
      return nullptr;
    }
    ReplyPtr reply = std::move(o.reply);
    if (!reply) call.failed = std::move(o);
    return reply;
  };
  return script != nullptr ? evalsha(command, args, *script) : command(args);
}

}  // namespace idempotency::redis_detail
