// idempotent() over patterns of redelivery the seed names: one message fanned out to two
// subscriptions on one backend, and a poison message redelivered until the dead-letter policy
// takes it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "idempotency/memory_lock.h"
#include "idempotency/pubsub/idempotent.h"
#include "push_envelope.h"
#include "support/faulty_backend.h"
#include "support/log_capture.h"

namespace idempotency::pubsub {
namespace {

using idempotency::testing::FaultyBackend;
using idempotency::testing::LogCapture;
using testing::push;

constexpr char kSubscriptionA[] = "projects/p/subscriptions/orders-to-erp";
constexpr char kSubscriptionB[] = "projects/p/subscriptions/orders-to-erp-copy";

// The same message (one topic, one messageId) as each subscription delivers it.
PushRequest delivery(const std::string& subscription, const std::string& message_id) {
  return push(message_id, nullptr, 1, "order", subscription);
}

class RedeliveryTest : public ::testing::Test {
 protected:
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  std::shared_ptr<InMemoryLock> store_ =
      std::make_shared<InMemoryLock>(BackendOptions{.clock = clock_});
  LogCapture logs_;
};

// ---------------------------------------------------------------- double subscription

TEST_F(RedeliveryTest, OneMessageOnTwoSubscriptionsSharingABackendRunsOnce) {
  // The default key is the messageId alone, which Pub/Sub assigns per publish, not per
  // subscription: both subscriptions' deliveries carry the same key.
  std::atomic<int> runs{0};
  auto handler = [&](const Delivery&) { ++runs; };
  auto endpoint_a = idempotent({.backend = store_}, handler);
  auto endpoint_b = idempotent({.backend = store_}, handler);
  EXPECT_EQ(endpoint_a(delivery(kSubscriptionA, "m-1")).status, 200);
  EXPECT_EQ(endpoint_b(delivery(kSubscriptionB, "m-1")).status, 204);
  EXPECT_EQ(endpoint_a(delivery(kSubscriptionA, "m-1")).status, 204);
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(store_->inspect("m-1").has_value()) << "the subscription is not part of the key";
}

TEST_F(RedeliveryTest, TwoSubscriptionsRacingOneMessageOnTwoInstancesRunItOnce) {
  // Instance B is another LockBackend object over the same records, as a second process on
  // the same store is: it cannot join A's execution, it must meet A's claim in the store.
  auto instance_b = std::make_shared<FaultyBackend>(*store_);
  std::atomic<int> runs{0};
  std::latch inside(1);
  std::latch finish(1);
  auto endpoint_a = idempotent({.backend = store_}, [&](const Delivery&) {
    ++runs;
    inside.count_down();
    finish.wait();
  });
  auto endpoint_b = idempotent({.backend = instance_b}, [&](const Delivery&) { ++runs; });
  int first = 0;
  std::jthread a([&] { first = endpoint_a(delivery(kSubscriptionA, "m-2")).status; });
  inside.wait();
  EXPECT_EQ(endpoint_b(delivery(kSubscriptionB, "m-2")).status, 503) << "held on A: nack";
  finish.count_down();
  a.join();
  EXPECT_EQ(first, 200);
  EXPECT_EQ(endpoint_b(delivery(kSubscriptionB, "m-2")).status, 204) << "B's redelivery acks";
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(logs_.count("contention"), 1);
}

TEST_F(RedeliveryTest, SubscriptionsThatMustEachProcessTheMessageNeedTheirOwnKeyPrefix) {
  // Two consumers with different jobs (ship the order, bill it) on one backend: a prefix per
  // subscription gives each its own key, so neither suppresses the other.
  std::atomic<int> shipped{0};
  std::atomic<int> billed{0};
  auto ship = idempotent({.backend = store_, .key = key_from_message_id("ship:")},
                         [&](const Delivery&) { ++shipped; });
  auto bill = idempotent({.backend = store_, .key = key_from_message_id("bill:")},
                         [&](const Delivery&) { ++billed; });
  EXPECT_EQ(ship(delivery(kSubscriptionA, "m-3")).status, 200);
  EXPECT_EQ(bill(delivery(kSubscriptionB, "m-3")).status, 200);
  EXPECT_EQ(ship(delivery(kSubscriptionA, "m-3")).status, 204);
  EXPECT_EQ(bill(delivery(kSubscriptionB, "m-3")).status, 204);
  EXPECT_EQ(shipped, 1);
  EXPECT_EQ(billed, 1);
}

// ---------------------------------------------------------------- poison messages

TEST_F(RedeliveryTest, APoisonMessageIsNackedOnEveryDeliveryAndNeverAcked) {
  // Pub/Sub redelivers a nacked message until the subscription's max_delivery_attempts sends
  // it to the dead-letter topic; the wrapper must nack each attempt, never ack one.
  constexpr int kMaxDeliveryAttempts = 10;
  std::vector<std::int64_t> fences;
  auto handle = idempotent({.backend = store_}, [&](const Delivery& d) {
    fences.push_back(d.fence);
    throw std::invalid_argument("the order references a product that does not exist");
  });
  for (int attempt = 1; attempt <= kMaxDeliveryAttempts; ++attempt) {
    const PushResponse r = handle(push("m-poison", nullptr, attempt));
    EXPECT_EQ(r.status, 500) << "attempt " << attempt;
    EXPECT_FALSE(is_ack(r.status)) << "attempt " << attempt;
  }
  EXPECT_EQ(fences.size(), static_cast<std::size_t>(kMaxDeliveryAttempts))
      << "every redelivery ran the handler: a failure is never cached as a duplicate";
  for (std::size_t i = 1; i < fences.size(); ++i) {
    EXPECT_GT(fences[i], fences[i - 1]) << "each attempt reclaimed the released key";
  }
  EXPECT_EQ(logs_.count("handler_failed"), kMaxDeliveryAttempts);
  const auto record = store_->inspect("m-poison");
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->state, RecordState::kClaimed) << "never DONE: nothing was acked";
}

TEST_F(RedeliveryTest, AHandlerThatCatchesItsTerminalFailureAcksItOnce) {
  // The other way out of poison: the handler decides the failure is terminal, records it its
  // own way, and returns, so the key is DONE and the message acked and never retried.
  int attempts = 0;
  int parked = 0;
  auto handle = idempotent({.backend = store_}, [&](const Delivery&) {
    ++attempts;
    try {
      throw std::invalid_argument("the order references a product that does not exist");
    } catch (const std::invalid_argument&) {
      ++parked;  // e.g. write it to a table of rejected orders, raise a ticket
    }
  });
  EXPECT_EQ(handle(push("m-terminal", nullptr, 1)).status, 200);
  EXPECT_EQ(handle(push("m-terminal", nullptr, 2)).status, 204);
  EXPECT_EQ(attempts, 1);
  EXPECT_EQ(parked, 1);
  EXPECT_EQ(logs_.count("handler_failed"), 0);
}

}  // namespace
}  // namespace idempotency::pubsub
