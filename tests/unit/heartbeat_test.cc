// The heartbeat scheduler: renews at its interval on a few shared threads, declares a claim lost
// when a renewal is refused or failures outlast the lease, and never calls back once stopped.
#include "idempotency/detail/heartbeat.h"
#include "support/eventually.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace idempotency::detail {
namespace {

using namespace std::chrono_literals;
using idempotency::testing::eventually;

// A heartbeat the test can drop when it likes, as an owner's member would be dropped.
std::unique_ptr<Heartbeat> start_heartbeat(HeartbeatSpec spec) {
  return std::make_unique<Heartbeat>(std::move(spec));
}

TEST(Heartbeat, RenewsUntilDestroyedAndNeverAfter) {
  std::atomic<int> calls{0};
  auto beat = start_heartbeat(
      {.interval = 5ms, .lease = 1s, .renew = [&] { return ++calls, true; }, .on_lost = [] {}});
  ASSERT_TRUE(eventually([&] { return beat->renewals() >= 3; }));
  EXPECT_FALSE(beat->lost());
  beat.reset();
  const int after = calls.load();
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(calls.load(), after) << "a stopped heartbeat renewed again";
}

TEST(Heartbeat, ARefusedRenewalIsALostClaimToldOnce) {
  std::atomic<int> calls{0};
  std::atomic<int> lost{0};
  auto beat = start_heartbeat({.interval = 2ms,
                               .lease = 1s,
                               .renew = [&] { return ++calls, false; },
                               .on_lost = [&] { ++lost; }});
  ASSERT_TRUE(eventually([&] { return beat->lost(); }));
  EXPECT_TRUE(eventually([&] { return lost.load() == 1; }));
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(calls.load(), 1) << "no renewal after a refusal";
  EXPECT_EQ(lost.load(), 1);
  EXPECT_EQ(beat->renewals(), 0U);
}

TEST(Heartbeat, FailuresAreRetriedUntilTheLeaseWouldLapseThenTheClaimIsLost) {
  // A lease long enough that the scheduler, however late its first call (TSan, a
  // loaded machine), still has time to retry (every interval, at most 5 ms apart) before it
  // lapses; the loss is then due only once the lease has run out, never sooner.
  constexpr auto kLease = 1s;
  std::atomic<int> calls{0};
  std::atomic<int> lost{0};
  const auto started = std::chrono::steady_clock::now();
  auto beat = start_heartbeat({.interval = 5ms,
                               .lease = kLease,
                               .renew = [&]() -> bool {
                                 ++calls;
                                 throw std::runtime_error("store unavailable");
                               },
                               .on_lost = [&] { ++lost; }});
  ASSERT_TRUE(eventually([&] { return beat->lost(); }));
  EXPECT_GE(std::chrono::steady_clock::now() - started, kLease)
      << "declared lost before the lease could have lapsed";
  EXPECT_GE(calls.load(), 2) << "a failure is retried while the lease lasts";
  EXPECT_TRUE(eventually([&] { return lost.load() == 1; }));
}

TEST(Heartbeat, ATransientFailureIsNotALoss) {
  std::atomic<int> calls{0};
  auto beat = start_heartbeat({.interval = 5ms,
                               .lease = 10s,
                               .renew =
                                   [&] {
                                     if (++calls == 1) throw std::runtime_error("one hiccup");
                                     return true;
                                   },
                               .on_lost = [] {}});
  ASSERT_TRUE(eventually([&] { return beat->renewals() >= 2; }));
  EXPECT_FALSE(beat->lost());
}

TEST(Heartbeat, DestructionWaitsForARenewalInFlight) {
  std::atomic<bool> inside{false};
  std::atomic<bool> finished{false};
  auto beat = start_heartbeat({.interval = 1ms,
                               .lease = 10s,
                               .renew =
                                   [&] {
                                     inside = true;
                                     std::this_thread::sleep_for(50ms);
                                     finished = true;
                                     return true;
                                   },
                               .on_lost = [] {}});
  ASSERT_TRUE(eventually([&] { return inside.load(); }));
  beat.reset();
  EXPECT_TRUE(finished.load()) << "the destructor returned while its renewal still ran";
}

TEST(Heartbeat, OnLostMayStopItsOwnHeartbeatWithoutDeadlock) {
  // Shared with the callback, which may still be unwinding (unlocking) on its renewing thread
  // when this test sees `stopped` and returns: nothing it touches may live on this stack.
  struct Shared {
    std::mutex mutex;
    std::unique_ptr<Heartbeat> beat;
    std::atomic<bool> stopped{false};
  };
  auto shared = std::make_shared<Shared>();
  {
    std::lock_guard lock(shared->mutex);
    shared->beat = start_heartbeat({.interval = 1ms,
                                    .lease = 1s,
                                    .renew = [] { return false; },
                                    .on_lost =
                                        [shared] {
                                          std::lock_guard inner(shared->mutex);
                                          shared->beat.reset();  // on its renewing thread
                                          shared->stopped = true;
                                        }});
  }
  EXPECT_TRUE(eventually([&] { return shared->stopped.load(); }));
}

TEST(Heartbeat, EveryHeartbeatRunsOnAFewSharedThreadsNeverTheCallers) {
  std::mutex mutex;
  std::set<std::thread::id> threads;
  std::vector<std::unique_ptr<Heartbeat>> beats;
  for (int i = 0; i < 32; ++i) {
    beats.push_back(start_heartbeat({.interval = 2ms,
                                     .lease = 10s,
                                     .renew =
                                         [&] {
                                           std::lock_guard lock(mutex);
                                           threads.insert(std::this_thread::get_id());
                                           return true;
                                         },
                                     .on_lost = [] {}}));
  }
  ASSERT_TRUE(eventually([&] {
    for (const auto& beat : beats) {
      if (beat->renewals() < 2) return false;
    }
    return true;
  }));
  beats.clear();
  std::lock_guard lock(mutex);
  EXPECT_GE(threads.size(), 1U);
  EXPECT_LE(threads.size(), 4U) << "not a thread per claim: four at most for 32";
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0U);
}

TEST(Heartbeat, ARenewalStalledInItsStoreHoldsBackNoOtherHeartbeat) {
  // A renewal blocked (a store call waiting out its timeout) while another claim's renewals
  // fall due: another thread takes the watch and renews them meanwhile.
  std::promise<void> release;
  const std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> stalled{false};
  auto stuck = start_heartbeat({.interval = 1ms,
                                .lease = 10s,
                                .renew =
                                    [&stalled, released] {
                                      stalled = true;
                                      released.wait();
                                      return true;
                                    },
                                .on_lost = [] {}});
  ASSERT_TRUE(eventually([&] { return stalled.load(); }));
  auto other = start_heartbeat(
      {.interval = 2ms, .lease = 10s, .renew = [] { return true; }, .on_lost = [] {}});
  EXPECT_TRUE(eventually([&] { return other->renewals() >= 5; }))
      << "one stalled renewal held back another heartbeat's";
  EXPECT_EQ(stuck->renewals(), 0U) << "still stalled";
  release.set_value();
  stuck.reset();  // waits for its renewal to return
}

TEST(Heartbeat, EachIntervalAndEveryRetryKeepsItsOwnPaceBesideALongerOne) {
  // The scheduler queues each interval apart, and retries apart from both: the next renewal
  // due is the earliest of them all, whichever heartbeat was started first.
  std::atomic<int> failures{0};
  auto slow = start_heartbeat(
      {.interval = 5s, .lease = 10s, .renew = [] { return true; }, .on_lost = [] {}});
  auto failing = start_heartbeat({.interval = 3ms,
                                  .lease = 10s,
                                  .renew = [&]() -> bool {
                                    ++failures;
                                    throw std::runtime_error("store down");
                                  },
                                  .on_lost = [] {}});
  auto fast = start_heartbeat(
      {.interval = 2ms, .lease = 10s, .renew = [] { return true; }, .on_lost = [] {}});
  ASSERT_TRUE(eventually([&] { return fast->renewals() >= 5 && failures.load() >= 5; }));
  EXPECT_EQ(slow->renewals(), 0U) << "the 5 s heartbeat renewed before the others' fifth";
  EXPECT_FALSE(failing->lost()) << "retried while its lease lasts";
}

// A caller whose interval differs call by call (a third of a lease from a job's deadline) must
// not leave a queue behind for each: the scheduler would grow, and its watcher's scan with it.
TEST(Heartbeat, IntervalsThatComeAndGoLeaveABoundedNumberOfQueues) {
  for (int i = 0; i < 200; ++i) {
    const Heartbeat beat(HeartbeatSpec{.interval = std::chrono::milliseconds(600'000 + i),
                                       .lease = 1h,
                                       .renew = [] { return true; },
                                       .on_lost = [] {}});
  }
  EXPECT_LE(heartbeat_intervals_queued(), 32U);
}

TEST(Heartbeat, RefusesAnIntervalThatIsNotShorterThanTheLease) {
  auto yes = [] { return true; };
  auto nothing = [] {};
  EXPECT_THROW(
      (void)start_heartbeat({.interval = 1s, .lease = 1s, .renew = yes, .on_lost = nothing}),
      std::invalid_argument);
  EXPECT_THROW(
      (void)start_heartbeat({.interval = 0ms, .lease = 1s, .renew = yes, .on_lost = nothing}),
      std::invalid_argument);
  EXPECT_THROW((void)start_heartbeat({.interval = 1ms, .lease = 1s, .on_lost = nothing}),
               std::invalid_argument);
}

}  // namespace
}  // namespace idempotency::detail
