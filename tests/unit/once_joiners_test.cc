// once(): what joined and replayed callers receive and what they leave out — the owner's store
// failure reaches every joiner (the same exception, no claim of their own), and the events an
// execution logs are logged once, by the owner, never again by a joined or replayed call.
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "idempotency/errors.h"
#include "idempotency/memory_lock.h"
#include "idempotency/once.h"
#include "support/faulty_backend.h"
#include "support/joiners.h"
#include "support/log_capture.h"
#include "support/stalling_claim_backend.h"

namespace idempotency::testing {
namespace {

constexpr int kJoiners = 4;

TEST(OnceJoiners, AStoreErrorBeforeTheWorkReachesTheOwnerAndEveryJoiner) {
  InMemoryLock store;
  StallingClaimBackend backend(store);
  std::atomic<int> runs{0};
  auto op = [&] {
    ++runs;
    return std::string("payment-1");
  };
  std::mutex errors_mutex;
  std::vector<const void*> errors;  // the address of each caller's caught StoreError
  auto call = [&] {
    try {
      (void)once("create-payment:r-1", backend, op);
    } catch (const StoreError& e) {
      std::lock_guard l(errors_mutex);
      errors.push_back(&e);
    }
  };
  std::jthread owner(call);
  backend.claim_entered.wait();  // the owner's flight exists; its claim hangs in the store
  std::vector<std::jthread> joiners = start_joiners(call, kJoiners);
  backend.fail_claim.count_down();
  owner.join();
  joiners.clear();

  ASSERT_EQ(errors.size(), kJoiners + 1U) << "every caller received a StoreError";
  for (const void* e : errors) {
    EXPECT_EQ(e, errors.front()) << "the owner's exception object, rethrown to each joiner";
  }
  EXPECT_EQ(backend.claims, 1) << "no joiner went to the store on its own";
  EXPECT_EQ(runs, 0) << "the operation never ran";
  // Nothing was stored and nothing is held: the next call executes.
  auto later = once("create-payment:r-1", backend, op);
  EXPECT_EQ(later.status(), Status::kExecuted);
  EXPECT_EQ(runs, 1);
}

TEST(OnceJoiners, JoinedAndReplayedCallsEmitNoExecutionEvents) {
  LogCapture logs;
  InMemoryLock store;
  FaultyBackend backend(store);
  // The store records the success but its reply is lost: the owner's execution logs
  // complete_failed (and still returns its value), and the key is DONE for later callers.
  backend.drop_complete_reply = true;
  std::latch started(1);
  std::latch finish(1);
  std::atomic<int> runs{0};
  auto op = [&] {
    ++runs;
    started.count_down();
    finish.wait();
    return std::string("payment-1");
  };
  std::mutex outcomes_mutex;
  std::vector<Outcome<std::string>> outcomes;
  auto call = [&] {
    auto o = once("create-payment:r-2", backend, op);
    std::lock_guard l(outcomes_mutex);
    outcomes.push_back(o);
  };
  std::jthread owner(call);
  started.wait();
  std::vector<std::jthread> joiners = start_joiners(call, kJoiners);
  finish.count_down();
  owner.join();
  joiners.clear();

  ASSERT_EQ(outcomes.size(), kJoiners + 1U);
  int executed = 0;
  for (const auto& o : outcomes) {
    executed += o.status() == Status::kExecuted ? 1 : 0;
    EXPECT_TRUE(o.status() == Status::kExecuted || o.status() == Status::kJoined);
    EXPECT_EQ(o.value(), "payment-1");
    EXPECT_EQ(o.fence(), 1) << "a joined call carries the original execution's fence";
  }
  EXPECT_EQ(executed, 1);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(backend.completes, 1);
  ASSERT_EQ(logs.records().size(), 1U) << logs.all_text();
  EXPECT_EQ(logs.records().front().event, "complete_failed") << "the owner's, logged once";

  // Replayed calls, here and through another instance, read the stored result and log nothing.
  backend.drop_complete_reply = false;
  FaultyBackend other_instance(store);
  for (FaultyBackend* b : {&backend, &other_instance}) {
    auto replayed = once("create-payment:r-2", *b, op);
    EXPECT_EQ(replayed.status(), Status::kReplayed);
    EXPECT_EQ(replayed.value(), "payment-1");
  }
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(backend.completes + other_instance.completes, 1) << "replays complete nothing";
  EXPECT_EQ(backend.releases + other_instance.releases, 0);
  EXPECT_EQ(logs.records().size(), 1U) << logs.all_text();
}

}  // namespace
}  // namespace idempotency::testing
