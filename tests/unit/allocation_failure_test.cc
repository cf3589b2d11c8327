// An allocation that fails anywhere in lock(), mutex() or once() must not leave the key held:
// the call throws std::bad_alloc and the key can be claimed again at once, as after any other
// failure, instead of staying CLAIMED until its lease lapses. Each test fails the first, second,
// third... allocation of one call in turn until a call makes no more, so every allocation the
// call makes, the ones after its claim is won among them, is made to fail once.
//
// The same sweep holds DoneCache to claim_async()'s rule that its callback must not throw: a copy
// it cannot keep is dropped, and the answer still reaches the caller.
//
// This program replaces the global operator new (its own program for that reason), counting
// only the allocations of the thread that arms it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

#include "idempotency/done_cache.h"
#include "idempotency/forwarding_backend.h"
#include "idempotency/guard.h"
#include "idempotency/memory_lock.h"
#include "idempotency/once.h"

namespace {

// Allocations to let through before one fails on this thread; negative: none fails.
thread_local long allocations_before_failure = -1;

}  // namespace

void* operator new(std::size_t size) {
  if (allocations_before_failure >= 0 && allocations_before_failure-- == 0) {
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;  // NOLINT(*-no-malloc)
  throw std::bad_alloc();
}

// GCC 12 takes the replacement's own free() for a delete of memory from malloc().
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }  // NOLINT(*-no-malloc)

void operator delete(void* p, std::size_t /*size*/) noexcept {
  std::free(p);
}  // NOLINT(*-no-malloc)
#pragma GCC diagnostic pop

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kLease = std::chrono::minutes(15);
constexpr milliseconds kHeartbeat = std::chrono::minutes(1);
// More than any call here makes; a sweep that reaches it has a call that never stops failing.
constexpr long kMostAllocations = 2000;

// Fails the call's `n`th allocation (from 0) while alive.
class FailingAllocation {
 public:
  explicit FailingAllocation(long n) { allocations_before_failure = n; }
  FailingAllocation(const FailingAllocation&) = delete;
  FailingAllocation& operator=(const FailingAllocation&) = delete;
  ~FailingAllocation() { allocations_before_failure = -1; }
};

// Runs `call(key)` with its nth allocation failing, for n = 0, 1, 2... until a run makes no
// allocation fail, and after each failure runs `call(key)` again, allocations unharmed: it must
// find the key free (or done, for once(), whose work may have run before the failure), not held
// (`InProgress`) nor this thread still marked as its holder (`ReentryError`).
template <class Call>
void sweep(const std::string& name, Call call) {
  long n = 0;
  for (; n < kMostAllocations; ++n) {
    const std::string key = name + "-" + std::to_string(n);
    bool failed = false;
    {
      const FailingAllocation failing(n);
      try {
        call(key);
      } catch (const std::bad_alloc&) {
        failed = true;
      }
    }
    if (!failed) break;
    try {
      call(key);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "after allocation " << n << " failed, the next call threw: " << e.what();
      return;
    }
  }
  EXPECT_GT(n, 0) << "the call allocated nothing: the sweep tested nothing";
  EXPECT_LT(n, kMostAllocations);
}

// sweep() of what takes a guard, `take(key)`: giving the key up after is not what is tested.
template <class Take>
void sweep_guard(const std::string& name, Take take) {
  sweep(name, [&](const std::string& key) {
    Guard guard = take(key);
    allocations_before_failure = -1;
    guard.release();
  });
}

TEST(AllocationFailure, ALockThatCannotStartGivesItsKeyUp) {
  InMemoryLock backend;
  sweep_guard("lock", [&](const std::string& key) {
    return lock(key, backend, LockOptions{.lease = kLease});
  });
}

TEST(AllocationFailure, ALockWithAHeartbeatThatCannotStartGivesItsKeyUp) {
  InMemoryLock backend;
  sweep_guard("heartbeat", [&](const std::string& key) {
    return lock(key, backend, LockOptions{.lease = kLease, .heartbeat = kHeartbeat});
  });
}

TEST(AllocationFailure, AMutexThatCannotStartGivesItsKeyUp) {
  InMemoryLock backend;
  sweep_guard("mutex", [&](const std::string& key) {
    return mutex(key, backend, LockOptions{.lease = kLease, .heartbeat = kHeartbeat});
  });
}

TEST(AllocationFailure, OnceThatCannotRunGivesItsKeyUpOrCompletesIt) {
  InMemoryLock backend;
  sweep("once", [&](const std::string& key) {
    const auto outcome = once(
        key, backend, [] { return std::string(64, 'r'); },
        OnceOptions{.lease = kLease, .heartbeat = kHeartbeat});
    if (outcome.status() == Status::kInProgress) throw std::runtime_error("the key is held");
  });
}

// Answers claim_async() with the wrapped backend's claim, calling `done` with the callback's
// `n`th allocation failing, as a backend's I/O thread would call back while memory runs out.
class CallsBackStarved final : public ForwardingBackend {
 public:
  CallsBackStarved(LockBackend& inner, long n) : ForwardingBackend(inner), n_(n) {}

  // Whether the last callback made its nth allocation (which then failed).
  [[nodiscard]] bool failed() const { return failed_; }

 protected:
  void do_claim_async(std::string_view key, std::chrono::milliseconds lease, ClaimRequest request,
                      ClaimDone done) override {
    AsyncClaimResult outcome(forward_claim(inner(), key, lease, request));
    const FailingAllocation failing(n_);
    done(std::move(outcome));
    failed_ = allocations_before_failure < 0;
  }

 private:
  long n_;
  bool failed_ = false;
};

TEST(AllocationFailure, ADoneCacheThatCannotKeepACopyStillAnswers) {
  InMemoryLock backend;
  // Long enough that the cache's copies of the key and result allocate.
  const std::string key = "a key long enough to live on the heap";
  const auto claim = std::get<Won>(backend.claim(key, kLease)).claim;
  ASSERT_TRUE(backend.complete(claim, std::string(64, 'r')));
  long n = 0;
  for (; n < kMostAllocations; ++n) {
    CallsBackStarved starved(backend, n);
    DoneCache cache(starved, DoneCacheOptions{.capacity = 16});
    int answers = 0;
    bool done = false;
    try {
      cache.claim_async(key, kLease, ClaimRequest{}, [&](AsyncClaimResult outcome) {
        ++answers;  // no allocation here: only the cache's own are swept
        const auto* result = std::get_if<ClaimResult>(&outcome);
        done = result != nullptr && std::holds_alternative<AlreadyDone>(*result);
      });
    } catch (const std::exception& e) {
      ADD_FAILURE() << "allocation " << n << " failed and the callback threw: " << e.what();
      return;
    }
    ASSERT_EQ(answers, 1) << "allocation " << n;
    EXPECT_TRUE(done) << "allocation " << n;
    EXPECT_LE(cache.cached_count(), 1U) << "allocation " << n;
    if (!starved.failed()) break;
  }
  EXPECT_GT(n, 0) << "the callback allocated nothing: the sweep tested nothing";
  EXPECT_LT(n, kMostAllocations);
}

}  // namespace
}  // namespace idempotency::testing
