// DoneCache: a burst of duplicates reaches the store once; a CLAIMED record is never answered
// from a copy, nor a DONE one at or past its expiry (less the margin); the copies stay within
// their capacity. A memory store on a manual clock underneath, behind a counter of its claims.
#include "idempotency/done_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <variant>

#include "idempotency/memory_lock.h"
#include "support/claim_matchers.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kLease{1000};
constexpr milliseconds kTtl = std::chrono::hours(2);  // lease + ttl above the sizing warning

// Counts the claims that reach the store.
class CountingStore final : public ForwardingBackend {
 public:
  explicit CountingStore(std::shared_ptr<LockBackend> inner)
      : ForwardingBackend(std::move(inner)) {}
  std::atomic<int> claims{0};

 protected:
  ClaimResult do_claim(std::string_view key, milliseconds lease,
                       const ClaimRequest& request) override {
    ++claims;
    return ForwardingBackend::do_claim(key, lease, request);
  }
};

// A store that does not say when a DONE record expires (a backend from elsewhere).
class SilentExpiryStore final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;

 protected:
  ClaimResult do_claim(std::string_view key, milliseconds lease,
                       const ClaimRequest& request) override {
    ClaimResult r = ForwardingBackend::do_claim(key, lease, request);
    if (auto* done = std::get_if<AlreadyDone>(&r)) done->expires_at.reset();
    return r;
  }
};

class DoneCacheTest : public ::testing::Test {
 protected:
  DoneCache cache(DoneCacheOptions options = {}) {
    options.clock = clock_;
    return DoneCache(store_, std::move(options));
  }

  // Claims and completes `key` in the store, storing `result`.
  void complete(const std::string& key, const std::string& result = "r") {
    EXPECT_TRUE(store_->complete(won(store_->claim(key, kLease)), result));
  }

  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  std::shared_ptr<CountingStore> store_ = std::make_shared<CountingStore>(
      std::make_shared<InMemoryLock>(BackendOptions{.ttl = kTtl, .clock = clock_}));
};

TEST_F(DoneCacheTest, ABurstOfDuplicatesReachesTheStoreOnce) {
  DoneCache cached = cache();
  complete("k", "receipt");
  const int before = store_->claims;
  for (int i = 0; i < 100; ++i) {
    AlreadyDone d = done(cached.claim("k", kLease));
    EXPECT_EQ(d.result, std::optional<std::string>("receipt"));
  }
  EXPECT_EQ(store_->claims - before, 1);
  EXPECT_EQ(cached.hits(), 99U);
  EXPECT_EQ(cached.cached_count(), 1U);
}

TEST_F(DoneCacheTest, AClaimedRecordIsNeverAnsweredFromACopy) {
  DoneCache cached = cache();
  Claim c = won(cached.claim("k", kLease));
  const int before = store_->claims;
  for (int i = 0; i < 3; ++i) (void)held(cached.claim("k", kLease));
  EXPECT_EQ(store_->claims - before, 3) << "every HeldByOther came from the store";
  cached.release(c);
  // Had the cache kept the HeldByOther, this would still be held.
  Claim again = won(cached.claim("k", kLease));
  EXPECT_EQ(again.fence, c.fence + 2);  // the release advanced the fence, the reclaim too
  EXPECT_EQ(cached.cached_count(), 0U);
  EXPECT_EQ(cached.hits(), 0U);
}

TEST_F(DoneCacheTest, ADoneRecordIsNeverAnsweredFromACopyAtOrPastItsExpiry) {
  DoneCache cached = cache(DoneCacheOptions{.clock_margin = milliseconds(0)});
  complete("k");
  const TimePoint expires_at = clock_->now() + kTtl;
  (void)done(cached.claim("k", kLease));  // the copy is made
  clock_->set(expires_at - milliseconds(1));
  (void)done(cached.claim("k", kLease));
  EXPECT_EQ(cached.hits(), 1U);
  clock_->set(expires_at);
  // The store's record has expired: a claim now wins. A copy given out here would say done.
  Claim c = won(cached.claim("k", kLease));
  EXPECT_EQ(cached.hits(), 1U);
  EXPECT_TRUE(cached.complete(c, std::string("second")));
  EXPECT_EQ(done(cached.claim("k", kLease)).result, std::optional<std::string>("second"));
}

TEST_F(DoneCacheTest, TheMarginEndsACopyEarly) {
  DoneCache cached = cache(DoneCacheOptions{.clock_margin = milliseconds(500)});
  complete("k");
  const TimePoint expires_at = clock_->now() + kTtl;
  (void)done(cached.claim("k", kLease));
  clock_->set(expires_at - milliseconds(501));
  (void)done(cached.claim("k", kLease));
  EXPECT_EQ(cached.hits(), 1U);
  clock_->set(expires_at - milliseconds(500));
  const int before = store_->claims;
  (void)done(cached.claim("k", kLease));  // still DONE in the store, but asked there
  EXPECT_EQ(store_->claims - before, 1);
  EXPECT_EQ(cached.hits(), 1U);
  EXPECT_EQ(cached.cached_count(), 0U) << "an answer within the margin is not kept";
}

TEST_F(DoneCacheTest, AnAnswerWithoutAnExpiryIsNeverKept) {
  DoneCache cached(std::make_shared<SilentExpiryStore>(store_), DoneCacheOptions{.clock = clock_});
  complete("k");
  (void)done(cached.claim("k", kLease));
  (void)done(cached.claim("k", kLease));
  EXPECT_EQ(cached.cached_count(), 0U);
  EXPECT_EQ(cached.hits(), 0U);
}

TEST_F(DoneCacheTest, CopiesStayWithinTheCapacityOldestOut) {
  DoneCache cached = cache(DoneCacheOptions{.capacity = 32});
  for (int i = 0; i < 500; ++i) {
    complete("k" + std::to_string(i));
    (void)done(cached.claim("k" + std::to_string(i), kLease));
    ASSERT_LE(cached.cached_count(), 32U);
  }
  // Evicted or not, every key still answers as the store does.
  for (int i = 0; i < 500; ++i) (void)done(cached.claim("k" + std::to_string(i), kLease));
  EXPECT_LE(cached.cached_count(), 32U);
}

TEST_F(DoneCacheTest, InspectReadsTheStore) {
  DoneCache cached = cache();
  complete("k");
  (void)done(cached.claim("k", kLease));
  ASSERT_TRUE(cached.inspect("k").has_value());
  EXPECT_EQ(cached.inspect("k")->state, RecordState::kDone);
}

TEST_F(DoneCacheTest, BadOptionsAreRejected) {
  EXPECT_THROW(DoneCache(store_, DoneCacheOptions{.capacity = 0}), std::invalid_argument);
  EXPECT_THROW(DoneCache(store_, DoneCacheOptions{.clock_margin = milliseconds(-1)}),
               std::invalid_argument);
  // now + margin would overflow, and a copy be given out for ever.
  EXPECT_THROW(DoneCache(store_, DoneCacheOptions{.clock_margin = milliseconds::max()}),
               std::invalid_argument);
}

}  // namespace
}  // namespace idempotency::testing
