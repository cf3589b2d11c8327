// ConnectionPool, the bounded pool PostgreSQL and Redis share: it never lends more than its
// size, gives up with StoreError after its wait, wakes a waiter when a connection comes back,
// serves waiters first come, first served, and never lends a broken connection again. Runs under
// TSan with the other unit tests.
#include "common/connection_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "idempotency/errors.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A stand-in for a driver connection: its id, and whether the server broke it.
struct FakeConnection {
  int id = 0;
  bool broken = false;
};
using FakePtr = std::unique_ptr<FakeConnection>;
using Pool = store_detail::ConnectionPool<FakePtr>;

// Opens numbered fake connections and counts them; the first `failures` attempts throw.
class Opener {
 public:
  explicit Opener(int failures = 0) : failures_(failures) {}

  Pool pool(std::size_t size, milliseconds wait) {
    return {"fake", size, wait, [this] { return open(); },
            [](const FakePtr& c) { return !c->broken; }};
  }
  [[nodiscard]] int opened() const { return opened_.load(); }

 private:
  FakePtr open() {
    if (failures_.fetch_sub(1) > 0) throw StoreError("fake: cannot connect");
    return std::make_unique<FakeConnection>(FakeConnection{.id = ++opened_});
  }

  std::atomic<int> failures_;
  std::atomic<int> opened_{0};
};

TEST(ConnectionPool, ReusesAReturnedConnectionInsteadOfOpeningAnother) {
  Opener opener;
  Pool pool = opener.pool(4, milliseconds(1000));
  int first = 0;
  {
    auto lease = pool.acquire();
    EXPECT_FALSE(lease.reused());
    first = lease.get()->id;
  }
  auto again = pool.acquire();
  EXPECT_TRUE(again.reused());
  EXPECT_EQ(again.get()->id, first);
  EXPECT_EQ(opener.opened(), 1);
}

TEST(ConnectionPool, GivesUpWithAOneLineStoreErrorWhenNoneIsFreeInTime) {
  Opener opener;
  Pool pool = opener.pool(2, milliseconds(30));
  auto a = pool.acquire();
  auto b = pool.acquire();
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    (void)pool.acquire();
  } catch (const StoreError& e) {
    message = e.what();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(30));
  EXPECT_THAT(message, AllOf(HasSubstr("fake: no pooled connection became free within 30 ms"),
                             HasSubstr("pool_size 2")));
  EXPECT_EQ(message.find('\n'), std::string::npos);
  EXPECT_EQ(opener.opened(), 2);
}

TEST(ConnectionPool, AWaiterGetsTheConnectionThatComesBack) {
  Opener opener;
  Pool pool = opener.pool(1, milliseconds(10'000));
  auto held = std::make_unique<Pool::Lease>(pool.acquire());
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    auto lease = pool.acquire();
    EXPECT_TRUE(lease.reused());
    got = true;
  });
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(got.load());
  held.reset();
  waiter.join();
  EXPECT_TRUE(got.load());
  EXPECT_EQ(opener.opened(), 1);
}

// waits until `n` callers are queued in the pool.
void until_waiting(Pool& pool, std::size_t n) {
  while (pool.waiting() != n) std::this_thread::yield();
}

// A returned connection goes to the caller that queued first, not back to the thread that
// returned it (barging let 64 threads convoy on 8 connections), nor to a later waiter.
TEST(ConnectionPool, WaitersAreServedInTheOrderTheyCameAndBeforeTheReturner) {
  Opener opener;
  Pool pool = opener.pool(1, milliseconds(10'000));
  auto held = std::make_unique<Pool::Lease>(pool.acquire());
  std::mutex mu;
  std::vector<int> order;
  auto take = [&](int who) {
    auto lease = pool.acquire();
    const std::lock_guard lock(mu);
    order.push_back(who);
  };
  std::vector<std::thread> waiters;
  for (int who = 1; who <= 3; ++who) {
    waiters.emplace_back(take, who);
    until_waiting(pool, static_cast<std::size_t>(who));
  }
  held.reset();
  take(0);  // the returner asks again at once: it queues behind the three
  for (auto& t : waiters) t.join();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 0}));
  EXPECT_EQ(opener.opened(), 1);
}

TEST(ConnectionPool, AWaiterThatGivesUpLeavesTheQueue) {
  Opener opener;
  Pool pool = opener.pool(1, milliseconds(30));
  auto held = std::make_unique<Pool::Lease>(pool.acquire());
  EXPECT_THROW((void)pool.acquire(), StoreError);
  EXPECT_EQ(pool.waiting(), 0U);
  held.reset();
  EXPECT_TRUE(pool.acquire().reused());
}

// A connection returned broken frees its slot for the first waiter, who opens a fresh one.
TEST(ConnectionPool, ABrokenReturnHandsTheWaiterASlot) {
  Opener opener;
  Pool pool = opener.pool(1, milliseconds(10'000));
  auto held = std::make_unique<Pool::Lease>(pool.acquire());
  std::thread waiter([&] {
    auto lease = pool.acquire();
    EXPECT_FALSE(lease.reused());
    EXPECT_EQ(lease.get()->id, 2);
  });
  until_waiting(pool, 1);
  held->get()->broken = true;
  held.reset();
  waiter.join();
  EXPECT_EQ(opener.opened(), 2);
}

TEST(ConnectionPool, AnUnlimitedWaitDoesNotOverflowTheClock) {
  Opener opener;
  Pool pool = opener.pool(1, milliseconds::max());
  auto held = std::make_unique<Pool::Lease>(pool.acquire());
  std::thread waiter([&] { EXPECT_EQ(pool.acquire().get()->id, 1); });
  std::this_thread::sleep_for(milliseconds(20));
  held.reset();
  waiter.join();
}

TEST(ConnectionPool, ABrokenConnectionIsClosedAndItsSlotFreed) {
  Opener opener;
  Pool pool = opener.pool(1, milliseconds(0));
  {
    auto lease = pool.acquire();
    lease.get()->broken = true;
  }
  auto fresh = pool.acquire();  // a zero wait: the broken one must not still hold the slot
  EXPECT_FALSE(fresh.reused());
  EXPECT_EQ(fresh.get()->id, 2);
  EXPECT_FALSE(fresh.get()->broken);
}

TEST(ConnectionPool, ADiscardedConnectionIsNotLentAgain) {
  Opener opener;
  Pool pool = opener.pool(1, milliseconds(0));
  {
    auto lease = pool.acquire();
    lease.discard();
  }
  auto fresh = pool.acquire();
  EXPECT_EQ(fresh.get()->id, 2);
}

TEST(ConnectionPool, AFailedConnectFreesItsSlot) {
  Opener opener(/*failures=*/1);
  Pool pool = opener.pool(1, milliseconds(0));
  EXPECT_THROW((void)pool.acquire(), StoreError);
  auto lease = pool.acquire();
  EXPECT_EQ(lease.get()->id, 1);
}

TEST(ConnectionPool, DropIdleClosesEveryIdleConnection) {
  Opener opener;
  Pool pool = opener.pool(2, milliseconds(0));
  {
    auto a = pool.acquire();
    auto b = pool.acquire();
  }
  pool.drop_idle();
  auto lease = pool.acquire();
  EXPECT_FALSE(lease.reused());
  EXPECT_EQ(opener.opened(), 3);
}

// A connection that failed takes the idle ones with it: after a restart they are all dead, and
// the retry must open a fresh one.
TEST(ConnectionPool, ABrokenLeaseClosesItselfAndEveryIdleConnection) {
  Opener opener;
  Pool pool = opener.pool(3, milliseconds(0));
  {
    auto a = pool.acquire();
    auto b = pool.acquire();
  }  // two idle
  {
    auto lease = pool.acquire();
    EXPECT_TRUE(lease.reused());
    lease.broken();
    EXPECT_EQ(lease.get(), nullptr);
  }
  auto first = pool.acquire();
  EXPECT_FALSE(first.reused());
  EXPECT_EQ(first.get()->id, 3);
  // Every slot is free again: the broken one and the dropped idle one were uncounted.
  auto second = pool.acquire();
  auto third = pool.acquire();
  EXPECT_EQ(opener.opened(), 5);
  EXPECT_THROW((void)pool.acquire(), StoreError);
}

TEST(ConnectionPool, AddedConnectionsCountAgainstTheBound) {
  Opener opener;
  Pool pool = opener.pool(1, milliseconds(0));
  pool.add(std::make_unique<FakeConnection>(FakeConnection{.id = 99}));
  auto lease = pool.acquire();
  EXPECT_EQ(lease.get()->id, 99);
  EXPECT_THROW((void)pool.acquire(), StoreError);
  EXPECT_EQ(opener.opened(), 0);
}

// Many threads borrowing at once: never more leases out than the bound, nothing lost.
TEST(ConnectionPool, ManyThreadsNeverHoldMoreThanTheBound) {
  constexpr std::size_t kSize = 3;
  constexpr int kThreads = 8;
  constexpr int kRounds = 200;
  Opener opener;
  Pool pool = opener.pool(kSize, milliseconds(10'000));
  std::atomic<int> out{0};
  std::atomic<int> most{0};
  std::atomic<int> broken{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        auto lease = pool.acquire();
        const int now = ++out;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        // Some threads break theirs, so closing and reopening races with lending too.
        if ((i + t) % 17 == 0) {
          lease.get()->broken = true;
          ++broken;
        }
        --out;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_LE(most.load(), static_cast<int>(kSize));
  EXPECT_GE(most.load(), 1);
  // Connections are lent again, not opened per borrow: one for each slot, and one more for
  // each connection given back broken.
  EXPECT_LE(opener.opened(), static_cast<int>(kSize) + broken.load());
}

}  // namespace
}  // namespace idempotency::testing
