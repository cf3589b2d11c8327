// Threads racing keys on one backend: every key is won exactly once, and a lock body never
// runs twice or overlaps another run on its key.
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <string>
#include <thread>
#include <vector>

#include "contract/suites.h"
#include "idempotency/errors.h"
#include "idempotency/guard.h"

namespace idempotency::testing {
namespace {

constexpr int kThreads = 8;

TEST_P(Concurrency, ManyKeysRacedByManyThreadsAreEachWonExactlyOnce) {
  constexpr int kKeys = 200;
  std::vector<std::atomic<int>> wins(kKeys);
  std::barrier start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      for (int k = 0; k < kKeys; ++k) {
        ClaimResult r = backend_->claim("key-" + std::to_string(k), kDefaultLease);
        if (std::holds_alternative<Won>(r)) wins[k]++;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int k = 0; k < kKeys; ++k) EXPECT_EQ(wins[k], 1) << "key " << k;
}

TEST_P(Concurrency, LockBodyRunsAtMostOncePerKeyAcrossRedeliveriesAndRaces) {
  constexpr int kKeys = 50;
  std::vector<std::atomic<int>> runs(kKeys);
  std::atomic<int> duplicates{0};
  std::atomic<int> in_progress{0};
  std::barrier start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      for (int round = 0; round < 3; ++round) {  // every key delivered 3 times per thread
        for (int k = 0; k < kKeys; ++k) {
          try {
            auto held = lock("msg-" + std::to_string(k), *backend_);
            runs[k]++;
          } catch (const Duplicate&) {
            duplicates++;
          } catch (const InProgress&) {
            in_progress++;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int k = 0; k < kKeys; ++k) EXPECT_EQ(runs[k], 1) << "key " << k;
  EXPECT_EQ(duplicates + in_progress, kThreads * 3 * kKeys - kKeys);
}

TEST_P(Concurrency, MutexNeverLetsTwoBodiesOverlapAndNeverSuppresses) {
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> ran{0};
  std::barrier start(kThreads);
  std::vector<std::thread> threads;
  constexpr int kAttempts = 40;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      for (int i = 0; i < kAttempts; ++i) {
        try {
          auto held = mutex("po:42", *backend_);
          if (inside.fetch_add(1) != 0) overlaps++;
          std::this_thread::yield();
          inside.fetch_sub(1);
          ran++;
        } catch (const InProgress&) {
          // contention: a real consumer nacks and retries later
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(overlaps, 0);
  EXPECT_GE(ran, 1);
  for (int i = 0; i < 3; ++i) {
    auto held = mutex("po:42", *backend_);  // released each time: never suppressed
  }
}

}  // namespace
}  // namespace idempotency::testing
