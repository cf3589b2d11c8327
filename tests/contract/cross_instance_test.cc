// once() across instances that share one store, as processes do: a duplicate on another
// instance replays the stored result, and with `wait_for` it waits for a live holder instead
// of answering in_progress.
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <stdexcept>
#include <string>
#include <thread>
#include <variant>

#include "contract/suites.h"
#include "idempotency/errors.h"
#include "idempotency/guard.h"
#include "idempotency/once.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;

// A holder on instance A that runs until told to finish (or fail).
class Holder {
 public:
  Holder(LockBackend& backend, std::string key, bool fail = false)
      : thread_([this, &backend, key, fail] {
          try {
            outcome_status_ = once(key, backend, [this, fail] {
                                started_.count_down();
                                finish_.wait();
                                if (fail) throw std::runtime_error("holder failed");
                                return std::string("from-A");
                              }).status();
          } catch (const std::runtime_error&) {
            failed_ = true;
          }
        }) {
    started_.wait();
  }
  void finish() { finish_.count_down(); }
  ~Holder() { finish(); }

 private:
  std::latch started_{1};
  std::latch finish_{1};
  std::atomic<Status> outcome_status_{Status::kInProgress};
  std::atomic<bool> failed_{false};
  std::jthread thread_;
};

// The in-memory store cannot be shared by two instances, so its program does not instantiate
// this suite.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CrossInstance);

TEST_P(CrossInstance, ADuplicateOnAnotherInstanceReplaysTheStoredResult) {
  int runs = 0;
  auto op = [&] {
    ++runs;
    return std::string("receipt-9");
  };
  EXPECT_EQ(once("orders:9", *a_, op).status(), Status::kExecuted);
  auto replay = once("orders:9", *b_, op);
  EXPECT_EQ(replay.status(), Status::kReplayed);
  EXPECT_EQ(replay.value(), "receipt-9");
  EXPECT_EQ(runs, 1);
}

TEST_P(CrossInstance, AFailureOnOneInstanceIsNotStored) {
  EXPECT_THROW((void)once("k", *a_, []() -> std::string { throw std::runtime_error("x"); }),
               std::runtime_error);
  EXPECT_EQ(once("k", *b_, [] { return std::string("ok"); }).status(), Status::kExecuted);
}

TEST_P(CrossInstance, WithoutWaitForALiveHolderElsewhereIsInProgress) {
  Holder holder(*a_, "k");
  auto o = once("k", *b_, [] { return std::string("from-B"); });
  EXPECT_EQ(o.status(), Status::kInProgress);
  EXPECT_TRUE(o.lease_expiry().has_value());
}

TEST_P(CrossInstance, WaitForReplaysOnceTheHolderElsewhereFinishes) {
  Holder holder(*a_, "k");
  std::atomic<bool> b_started{false};
  std::jthread finisher([&] {
    while (!b_started) std::this_thread::yield();
    std::this_thread::sleep_for(milliseconds(100));  // let B find the key held and wait
    holder.finish();
  });
  b_started = true;
  auto o = once(
      "k", *b_, [] { return std::string("from-B"); },
      OnceOptions{.wait_for = std::chrono::seconds(30)});
  EXPECT_EQ(o.status(), Status::kReplayed);
  EXPECT_EQ(o.value(), "from-A");
}

// milliseconds::max(), "for ever", once overflowed the deadline into the past: in_progress at once.
TEST_P(CrossInstance, WaitForTheLongestDurationWaitsForTheHolder) {
  Holder holder(*a_, "k");
  std::jthread finisher([&] {
    std::this_thread::sleep_for(milliseconds(100));  // let B find the key held and wait
    holder.finish();
  });
  auto o = once(
      "k", *b_, [] { return std::string("from-B"); }, OnceOptions{.wait_for = milliseconds::max()});
  EXPECT_EQ(o.status(), Status::kReplayed);
  EXPECT_EQ(o.value(), "from-A");
}

TEST_P(CrossInstance, WaitForTakesOverWhenTheHolderElsewhereFails) {
  Holder holder(*a_, "k", /*fail=*/true);
  std::jthread finisher([&] {
    std::this_thread::sleep_for(milliseconds(100));
    holder.finish();
  });
  auto o = once(
      "k", *b_, [] { return std::string("from-B"); },
      OnceOptions{.wait_for = std::chrono::seconds(30)});
  EXPECT_EQ(o.status(), Status::kExecuted);
  EXPECT_EQ(o.value(), "from-B");
}

TEST_P(CrossInstance, WaitForThatRunsOutIsInProgress) {
  Holder holder(*a_, "k");
  auto o = once(
      "k", *b_, [] { return std::string("from-B"); }, OnceOptions{.wait_for = milliseconds(150)});
  EXPECT_EQ(o.status(), Status::kInProgress);
}

TEST_P(CrossInstance, AStoppedWaiterIsCancelled) {
  Holder holder(*a_, "k");
  std::stop_source stop;
  std::jthread canceller([&] {
    std::this_thread::sleep_for(milliseconds(100));
    stop.request_stop();
  });
  EXPECT_THROW((void)once(
                   "k", *b_, [] { return std::string("from-B"); },
                   OnceOptions{.wait_for = std::chrono::seconds(30), .stop = stop.get_token()}),
               Cancelled);
}

// Lease renewal across instances, on real time (the store's own clock): a guard on A whose
// work outlives three leases keeps the key against B's redeliveries because its heartbeat keeps
// renewing it, and completes; B then sees it done. The lease leaves a renewal 1.9 s to land
// (TSan; on SQLite it queues behind B's fsynced claims): B's win is a missing renewal, not a
// slow one, and without renewals B would win from the first lease's end on.
TEST_P(CrossInstance, AGuardWithAHeartbeatOutlivesThreeLeasesAgainstAnotherInstance) {
  constexpr auto kLease = std::chrono::seconds(2);
  auto twins = GetParam().make_twins(BackendOptions{});
  LockBackend& a = *twins.first;
  LockBackend& b = *twins.second;
  auto held = lock("k", a, LockOptions{.lease = kLease, .heartbeat = milliseconds(100)});
  int rival_wins = 0;
  const auto end = std::chrono::steady_clock::now() + 3 * kLease;
  while (std::chrono::steady_clock::now() < end) {
    ClaimResult r = b.claim("k", kLease);
    if (auto* won = std::get_if<Won>(&r)) {
      ++rival_wins;
      b.release(won->claim);
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(rival_wins, 0) << "B took a key whose holder on A was alive and renewing";
  EXPECT_FALSE(held.lost());
  EXPECT_EQ(held.complete(), CompleteStatus::kCompleted);
  EXPECT_TRUE(std::holds_alternative<AlreadyDone>(b.claim("k", kLease)));
}

}  // namespace
}  // namespace idempotency::testing
