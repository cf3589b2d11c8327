// AsyncFlight: an owner with no thread to block, joined by blocking once() callers and by
// other asynchronous callers, who hear its outcome, its error, or (when it is dropped without
// either) that they must start over.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "idempotency/detail/once_engine.h"
#include "idempotency/errors.h"
#include "idempotency/memory_lock.h"
#include "idempotency/once.h"

namespace idempotency::detail {
namespace {

// What a joined asynchronous caller was told.
struct Told {
  std::optional<ErasedOutcome> outcome;
  std::exception_ptr error;
};

JoinCallback into(std::promise<Told>& told) {
  return [&told](std::optional<ErasedOutcome> outcome, std::exception_ptr error) {
    told.set_value(Told{std::move(outcome), std::move(error)});
  };
}

JoinCallback unexpected() {
  return
      [](std::optional<ErasedOutcome>, std::exception_ptr) { FAIL() << "no flight was running"; };
}

// An asynchronous owner of `key` (an int operation), with one asynchronous caller joined to it
// that is told into `joined`.
std::unique_ptr<AsyncFlight> owned_and_joined(InMemoryLock& backend, const std::string& key,
                                              std::promise<Told>& joined) {
  auto owner = begin_async_flight(key, backend, typeid(int), unexpected());
  EXPECT_NE(owner, nullptr);
  EXPECT_EQ(begin_async_flight(key, backend, typeid(int), into(joined)), nullptr) << "not joined";
  return owner;
}

// A blocking once() caller of `key` on a thread of its own; `runs` counts its operation's runs.
struct BlockingCaller {
  BlockingCaller(const std::string& key, InMemoryLock& backend)
      : thread([this, key, &backend] {
          auto outcome = once(key, backend, [this] { return std::to_string(++runs); });
          said.set_value(outcome.status());
        }) {}
  std::atomic<int> runs{0};
  std::promise<Status> said;
  std::future<Status> status = said.get_future();
  std::jthread thread;  // last: it starts once the rest exists
};

// After the owner settled, the caller joined it; or, had its thread started only after the
// settlement, it owned a new flight and ran.
void expect_joined_or_ran_after(BlockingCaller& caller) {
  const Status got = caller.status.get();
  EXPECT_TRUE(got == Status::kJoined || got == Status::kExecuted);
  EXPECT_EQ(caller.runs, got == Status::kJoined ? 0 : 1);
}

TEST(AsyncFlight, ASecondAsynchronousCallerJoinsAndHearsTheOutcomeAsJoined) {
  InMemoryLock backend;
  std::promise<Told> told;
  auto owner = owned_and_joined(backend, "k-1", told);
  ASSERT_NE(owner, nullptr);
  auto heard = told.get_future();
  EXPECT_EQ(heard.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  owner->settle(ErasedOutcome{Status::kExecuted, std::make_shared<const int>(7), 3, std::nullopt});
  const Told got = heard.get();
  ASSERT_TRUE(got.outcome.has_value());
  EXPECT_EQ(got.outcome->status, Status::kJoined);
  EXPECT_EQ(*std::static_pointer_cast<const int>(got.outcome->value), 7);
  EXPECT_EQ(got.outcome->fence, 3);
  // The flight is over: the next caller owns a new one.
  EXPECT_NE(begin_async_flight("k-1", backend, typeid(int), unexpected()), nullptr);
}

TEST(AsyncFlight, AJoinedCallerHearsTheOwnersError) {
  InMemoryLock backend;
  std::promise<Told> told;
  auto owner = owned_and_joined(backend, "k-2", told);
  ASSERT_NE(owner, nullptr);
  owner->fail(std::make_exception_ptr(std::runtime_error("owner failed")));
  const Told got = told.get_future().get();
  EXPECT_FALSE(got.outcome.has_value());
  ASSERT_TRUE(got.error);
  EXPECT_THROW(std::rethrow_exception(got.error), std::runtime_error);
}

TEST(AsyncFlight, AnOwnerDroppedWithoutAnOutcomeTellsItsJoinersToStartOver) {
  InMemoryLock backend;
  std::promise<Told> told;
  auto owner = owned_and_joined(backend, "k-3", told);
  ASSERT_NE(owner, nullptr);
  owner.reset();
  const Told got = told.get_future().get();
  EXPECT_FALSE(got.outcome.has_value());
  EXPECT_FALSE(got.error);
  EXPECT_NE(begin_async_flight("k-3", backend, typeid(int), unexpected()), nullptr);
}

TEST(AsyncFlight, ABlockingOnceCallerJoinsAnAsynchronousOwner) {
  InMemoryLock backend;
  auto owner = begin_async_flight("k-4", backend, typeid(std::string), unexpected());
  BlockingCaller joiner("k-4", backend);
  // Whether the joiner is already waiting or not, it must not run (or answer) while the owner
  // runs: neither a claim beside the owner's flight nor an answer before its outcome.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(joiner.runs, 0) << "ran beside the asynchronous owner";
  EXPECT_EQ(joiner.status.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout)
      << "answered before the owner settled";
  owner->settle(
      ErasedOutcome{Status::kExecuted, std::make_shared<const std::string>("41"), 1, std::nullopt});
  expect_joined_or_ran_after(joiner);
}

TEST(AsyncFlight, AnAsynchronousCallerJoinsABlockingOwner) {
  InMemoryLock backend;
  std::promise<void> running;
  std::promise<void> finish;
  std::jthread owner([&] {
    (void)once("k-5", backend, [&] {
      running.set_value();
      finish.get_future().wait();
      return std::string("5");
    });
  });
  running.get_future().wait();
  std::promise<Told> told;
  ASSERT_EQ(begin_async_flight("k-5", backend, typeid(std::string), into(told)), nullptr);
  finish.set_value();
  const Told got = told.get_future().get();
  ASSERT_TRUE(got.outcome.has_value());
  EXPECT_EQ(got.outcome->status, Status::kJoined);
  EXPECT_EQ(*std::static_pointer_cast<const std::string>(got.outcome->value), "5");
}

// decide(): the owner's outcome is out before its store write ends (an early answer).
TEST(AsyncFlight, ADecidedOutcomeReachesJoinersAtOnceAndLaterCallersAsDone) {
  InMemoryLock backend;
  std::promise<Told> early;
  auto owner = owned_and_joined(backend, "k-7", early);
  ASSERT_NE(owner, nullptr);
  auto value = std::make_shared<const int>(8);
  owner->decide(ErasedOutcome{Status::kExecuted, value, 4, std::nullopt});
  // Told now, not at settle(): as joined.
  auto heard = early.get_future();
  ASSERT_EQ(heard.wait_for(std::chrono::milliseconds(0)), std::future_status::ready);
  const Told joined = heard.get();
  ASSERT_TRUE(joined.outcome.has_value());
  EXPECT_EQ(joined.outcome->status, Status::kJoined);
  EXPECT_EQ(joined.outcome->fence, 4);
  // A caller arriving now is answered on its own thread, before begin_async_flight() returns,
  // as the store will answer it once the write lands.
  std::promise<Told> late;
  ASSERT_EQ(begin_async_flight("k-7", backend, typeid(int), into(late)), nullptr);
  auto late_heard = late.get_future();
  ASSERT_EQ(late_heard.wait_for(std::chrono::milliseconds(0)), std::future_status::ready);
  const Told done = late_heard.get();
  ASSERT_TRUE(done.outcome.has_value());
  EXPECT_EQ(done.outcome->status, Status::kReplayed);
  EXPECT_EQ(*std::static_pointer_cast<const int>(done.outcome->value), 8);
  // The flight lasts until settle(): only then does the next caller own a new one.
  owner->settle(ErasedOutcome{Status::kExecuted, value, 4, std::nullopt});
  EXPECT_NE(begin_async_flight("k-7", backend, typeid(int), unexpected()), nullptr);
}

TEST(AsyncFlight, ABlockingCallerWaitsPastADecisionForTheSettlement) {
  InMemoryLock backend;
  auto owner = begin_async_flight("k-8", backend, typeid(std::string), unexpected());
  auto value = std::make_shared<const std::string>("8");
  owner->decide(ErasedOutcome{Status::kExecuted, value, 1, std::nullopt});
  BlockingCaller joiner("k-8", backend);
  EXPECT_EQ(joiner.status.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout)
      << "a blocking caller does not take a decision for the store's answer";
  owner->settle(ErasedOutcome{Status::kExecuted, value, 1, std::nullopt});
  expect_joined_or_ran_after(joiner);
}

TEST(AsyncFlight, AnOwnerDroppedAfterADecisionLeavesNoDecisionBehind) {
  InMemoryLock backend;
  auto owner = begin_async_flight("k-9", backend, typeid(std::string), unexpected());
  owner->decide(
      ErasedOutcome{Status::kExecuted, std::make_shared<const std::string>("9"), 1, std::nullopt});
  std::promise<void> running;
  std::promise<void> finish;
  std::promise<Status> status;
  std::jthread blocking([&] {
    auto outcome = once("k-9", backend, [&] {
      running.set_value();
      finish.get_future().wait();
      return std::string("10");
    });
    status.set_value(outcome.status());
  });
  // Most often the blocking caller waits by now and takes the flight over; otherwise it
  // starts a new one. Either way it runs as the owner once `running` is set.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  owner.reset();  // dropped without a settlement
  running.get_future().wait();
  std::promise<Told> told;
  ASSERT_EQ(begin_async_flight("k-9", backend, typeid(std::string), into(told)), nullptr);
  auto heard = told.get_future();
  EXPECT_EQ(heard.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout)
      << "answered with the dropped owner's decision";
  finish.set_value();
  const Told got = heard.get();
  ASSERT_TRUE(got.outcome.has_value());
  EXPECT_EQ(got.outcome->status, Status::kJoined);
  EXPECT_EQ(*std::static_pointer_cast<const std::string>(got.outcome->value), "10");
  EXPECT_EQ(status.get_future().get(), Status::kExecuted);
}

// A blocking owner is cancelled with a blocking joiner waiting, so the flight is handed off;
// an asynchronous caller told to start over joins the handed-off flight again, and the
// blocking joiner, cancelled too, retires it. The asynchronous caller must hear of that (or
// own the key, or hear the outcome), never be dropped. The threads race, so many rounds.
TEST(AsyncFlight, AnAsynchronousCallerThatRejoinedAHandOffIsNeverDropped) {
  using namespace std::chrono_literals;
  InMemoryLock backend;
  for (int round = 0; round < 100; ++round) {
    const std::string key = "k-handoff-" + std::to_string(round);
    std::stop_source owner_stop;
    std::stop_source joiner_stop;
    std::promise<void> running;
    std::jthread owner([&] {
      try {
        (void)once(key, backend,
                   [&](const std::stop_token& token) -> std::string {
                     running.set_value();
                     while (!token.stop_requested()) std::this_thread::sleep_for(1ms);
                     throw Cancelled();
                   },
                   {.stop = owner_stop.get_token()});
      } catch (const Cancelled&) {
      }
    });
    running.get_future().wait();
    std::jthread joiner([&] {
      try {
        (void)once(key, backend, [] { return std::string("0"); },
                   {.stop = joiner_stop.get_token()});
      } catch (const Cancelled&) {
      }
    });
    std::atomic<int> heard{0};
    std::mutex owned_mutex;
    std::unique_ptr<AsyncFlight> owned;
    const JoinCallback again = [&](std::optional<ErasedOutcome>, std::exception_ptr) { ++heard; };
    ASSERT_EQ(begin_async_flight(key, backend, typeid(std::string),
                                 [&](std::optional<ErasedOutcome>, std::exception_ptr) {
                                   ++heard;
                                   joiner_stop.request_stop();
                                   auto flight =
                                       begin_async_flight(key, backend, typeid(std::string), again);
                                   std::lock_guard lock(owned_mutex);
                                   owned = std::move(flight);
                                 }),
              nullptr);
    std::this_thread::sleep_for(2ms);  // the blocking joiner waits by now, most rounds
    owner_stop.request_stop();
    owner.join();
    joiner.join();
    std::lock_guard lock(owned_mutex);
    EXPECT_TRUE(owned != nullptr || heard == 2)
        << "round " << round << ": the asynchronous caller was dropped";
  }
}

TEST(AsyncFlight, JoiningWithAnotherResultTypeIsALogicError) {
  InMemoryLock backend;
  auto owner = begin_async_flight("k-6", backend, typeid(int), unexpected());
  EXPECT_THROW((void)begin_async_flight("k-6", backend, typeid(std::string), unexpected()),
               std::logic_error);
}

}  // namespace
}  // namespace idempotency::detail
