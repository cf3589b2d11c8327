// AsyncFlight: an owner with no thread to block, joined by blocking once() callers and by
// other asynchronous callers, who hear its outcome, its error, or (when it is dropped without
// either) that they must start over.
#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "idempotency/detail/once_engine.h"
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

TEST(AsyncFlight, ASecondAsynchronousCallerJoinsAndHearsTheOutcomeAsJoined) {
  InMemoryLock backend;
  auto owner = begin_async_flight("k-1", backend, typeid(int), unexpected());
  ASSERT_NE(owner, nullptr);
  std::promise<Told> told;
  EXPECT_EQ(begin_async_flight("k-1", backend, typeid(int), into(told)), nullptr);
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
  auto owner = begin_async_flight("k-2", backend, typeid(int), unexpected());
  std::promise<Told> told;
  ASSERT_EQ(begin_async_flight("k-2", backend, typeid(int), into(told)), nullptr);
  owner->fail(std::make_exception_ptr(std::runtime_error("owner failed")));
  const Told got = told.get_future().get();
  EXPECT_FALSE(got.outcome.has_value());
  ASSERT_TRUE(got.error);
  EXPECT_THROW(std::rethrow_exception(got.error), std::runtime_error);
}

TEST(AsyncFlight, AnOwnerDroppedWithoutAnOutcomeTellsItsJoinersToStartOver) {
  InMemoryLock backend;
  auto owner = begin_async_flight("k-3", backend, typeid(int), unexpected());
  std::promise<Told> told;
  ASSERT_EQ(begin_async_flight("k-3", backend, typeid(int), into(told)), nullptr);
  owner.reset();
  const Told got = told.get_future().get();
  EXPECT_FALSE(got.outcome.has_value());
  EXPECT_FALSE(got.error);
  EXPECT_NE(begin_async_flight("k-3", backend, typeid(int), unexpected()), nullptr);
}

TEST(AsyncFlight, ABlockingOnceCallerJoinsAnAsynchronousOwner) {
  InMemoryLock backend;
  auto owner = begin_async_flight("k-4", backend, typeid(std::string), unexpected());
  int runs = 0;
  std::promise<Status> status;
  std::jthread joiner([&] {
    auto outcome = once("k-4", backend, [&runs] { return std::to_string(++runs); });
    status.set_value(outcome.status());
  });
  // Whether the joiner is already waiting or not, it must not run while the owner runs.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  owner->settle(
      ErasedOutcome{Status::kExecuted, std::make_shared<const std::string>("41"), 1, std::nullopt});
  const Status got = status.get_future().get();
  EXPECT_TRUE(got == Status::kJoined || got == Status::kExecuted);
  EXPECT_EQ(runs, got == Status::kJoined ? 0 : 1);
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
  auto owner = begin_async_flight("k-7", backend, typeid(int), unexpected());
  ASSERT_NE(owner, nullptr);
  std::promise<Told> early;
  ASSERT_EQ(begin_async_flight("k-7", backend, typeid(int), into(early)), nullptr);
  auto value = std::make_shared<const int>(8);
  owner->decide(ErasedOutcome{Status::kExecuted, value, 4, std::nullopt},
                ErasedOutcome{Status::kReplayed, value, 0, std::nullopt});
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
  owner->decide(ErasedOutcome{Status::kExecuted, value, 1, std::nullopt},
                ErasedOutcome{Status::kReplayed, value, 0, std::nullopt});
  int runs = 0;
  std::promise<Status> status;
  auto got = status.get_future();
  std::jthread joiner([&] {
    auto outcome = once("k-8", backend, [&runs] { return std::to_string(++runs); });
    status.set_value(outcome.status());
  });
  EXPECT_EQ(got.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout)
      << "a blocking caller does not take a decision for the store's answer";
  owner->settle(ErasedOutcome{Status::kExecuted, value, 1, std::nullopt});
  // Joined, or (had the thread started only after the settlement) the owner of a new flight.
  const Status joined = got.get();
  EXPECT_TRUE(joined == Status::kJoined || joined == Status::kExecuted);
  EXPECT_EQ(runs, joined == Status::kJoined ? 0 : 1);
}

TEST(AsyncFlight, AnOwnerDroppedAfterADecisionLeavesNoDecisionBehind) {
  InMemoryLock backend;
  auto owner = begin_async_flight("k-9", backend, typeid(std::string), unexpected());
  auto decided = std::make_shared<const std::string>("9");
  owner->decide(ErasedOutcome{Status::kExecuted, decided, 1, std::nullopt},
                ErasedOutcome{Status::kReplayed, decided, 0, std::nullopt});
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

TEST(AsyncFlight, JoiningWithAnotherResultTypeIsALogicError) {
  InMemoryLock backend;
  auto owner = begin_async_flight("k-6", backend, typeid(int), unexpected());
  EXPECT_THROW((void)begin_async_flight("k-6", backend, typeid(std::string), unexpected()),
               std::logic_error);
}

}  // namespace
}  // namespace idempotency::detail
