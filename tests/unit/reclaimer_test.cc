// Reclaimer: expired records go away in the background, live ones stay, failures are logged
// and retried, and destruction stops the thread.
#include "idempotency/reclaimer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "idempotency/errors.h"
#include "idempotency/forwarding_backend.h"
#include "idempotency/memory_lock.h"
#include "support/claim_matchers.h"
#include "support/eventually.h"
#include "support/log_capture.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kInterval{5};

// A store whose purge fails the first `failures` times, then purges through `inner`.
class FlakyPurge final : public ForwardingBackend {
 public:
  FlakyPurge(LockBackend& inner, int failures) : ForwardingBackend(inner), failures_(failures) {}

 protected:
  std::size_t do_purge_expired() override {
    if (failures_.fetch_sub(1) > 0) throw StoreError("injected: purge failed");
    return ForwardingBackend::do_purge_expired();
  }
  // Says nothing, as a store that cannot count would.
  std::optional<std::size_t> do_stored_records() override { return std::nullopt; }

 private:
  std::atomic<int> failures_;
};

TEST(Reclaimer, DeletesExpiredRecordsAndKeepsLiveOnes) {
  auto clock = std::make_shared<ManualClock>();
  auto backend =
      std::make_shared<InMemoryLock>(BackendOptions{.ttl = milliseconds(100), .clock = clock});
  for (int i = 0; i < 50; ++i) {
    EXPECT_TRUE(backend->complete(won(backend->claim("old" + std::to_string(i), kInterval))));
  }
  Claim live = won(backend->claim("live", milliseconds(1000)));
  // Every "old" record is past its expires_at. No write follows, so the memory store's own
  // sweep-on-write reclaims none of them: the reclaimer must.
  clock->advance(milliseconds(100));
  std::atomic<std::size_t> reported{0};
  std::atomic<std::size_t> last_stored{999};
  Reclaimer reclaimer(backend, {.interval = kInterval, .on_pass = [&](const PurgePass& pass) {
                                  EXPECT_TRUE(pass.error.empty());
                                  reported += pass.purged;
                                  // The memory store says how many records it holds.
                                  EXPECT_TRUE(pass.stored.has_value());
                                  if (pass.stored) last_stored = *pass.stored;
                                }});
  ASSERT_TRUE(eventually([&] { return reclaimer.purged() >= 50; }));
  EXPECT_EQ(reclaimer.purged(), 50U);
  EXPECT_TRUE(eventually([&] { return reported.load() == 50; }));
  EXPECT_EQ(backend->stored_count(), 1U);
  EXPECT_TRUE(eventually([&] { return last_stored.load() == 1; }));
  EXPECT_TRUE(backend->complete(live)) << "a live claim must survive every pass";
}

TEST(Reclaimer, AFailingPassIsLoggedAndTheNextOneRetries) {
  LogCapture logs;
  auto clock = std::make_shared<ManualClock>();
  InMemoryLock inner(BackendOptions{.ttl = milliseconds(100), .clock = clock});
  auto backend = std::make_shared<FlakyPurge>(inner, 2);
  EXPECT_TRUE(backend->complete(won(backend->claim("k", kInterval))));
  clock->advance(milliseconds(100));
  std::atomic<int> failed{0};
  std::atomic<int> counted{0};
  Reclaimer reclaimer(backend, {.interval = kInterval, .on_pass = [&](const PurgePass& pass) {
                                  if (!pass.error.empty()) ++failed;
                                  // A store that does not override stored_records() says nothing.
                                  if (pass.stored) ++counted;
                                }});
  ASSERT_TRUE(eventually([&] { return reclaimer.purged() == 1; }));
  EXPECT_EQ(failed.load(), 2);
  EXPECT_EQ(logs.count("purge_failed"), 2);
  EXPECT_EQ(counted.load(), 0);
  EXPECT_EQ(inner.stored_count(), 0U);
}

TEST(Reclaimer, DestructionStopsTheThreadBeforeTheFirstPass) {
  auto backend = std::make_shared<InMemoryLock>();
  std::atomic<int> passes{0};
  {
    Reclaimer reclaimer(backend, {.interval = std::chrono::hours(1),
                                  .on_pass = [&](const PurgePass&) { ++passes; }});
  }  // must not wait an hour
  EXPECT_EQ(passes.load(), 0);
}

TEST(Reclaimer, BadArgumentsAreRefused) {
  EXPECT_THROW(Reclaimer(nullptr), std::invalid_argument);
  EXPECT_THROW(Reclaimer(std::make_shared<InMemoryLock>(), {.interval = milliseconds(0)}),
               std::invalid_argument);
  // Its deadline in steady-clock nanoseconds would overflow into the past: a busy loop.
  EXPECT_THROW(Reclaimer(std::make_shared<InMemoryLock>(), {.interval = kMaxTtl + milliseconds(1)}),
               std::invalid_argument);
}

}  // namespace
}  // namespace idempotency::testing
