// LockBackend::claim_async and complete_async on a backend that does not override them (every
// backend but Redis on its shared connections): the blocking call runs, and `done` gets its
// outcome once, before the call returns; a store failure arrives as a StoreFailure, never as
// an exception; a bad key is refused before any store call, without calling `done`.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>

#include "idempotency/backend.h"
#include "idempotency/done_cache.h"
#include "idempotency/errors.h"
#include "idempotency/forwarding_backend.h"
#include "idempotency/memory_lock.h"
#include "support/sending_backend.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;

// A store that is down.
class FailingStore final : public ForwardingBackend {
 public:
  FailingStore() : ForwardingBackend(std::make_shared<InMemoryLock>()) {}

 protected:
  ClaimResult do_claim(std::string_view, milliseconds, const ClaimRequest&) override {
    throw StoreError("test: the store is down");
  }
  bool do_complete(const Claim&, std::optional<std::string>) override {
    throw StoreError("test: the store is down");
  }
};

TEST(AsyncBackend, OnlyABackendThatSendsItsCallsSaysSoAndADoneCacheSaysWhatItWraps) {
  auto memory = std::make_shared<InMemoryLock>();
  auto sending = std::make_shared<SendingBackend>(std::make_shared<InMemoryLock>());
  EXPECT_FALSE(memory->sends_async()) << "the default runs the blocking call";
  EXPECT_TRUE(sending->sends_async());
  EXPECT_FALSE(DoneCache(memory).sends_async());
  EXPECT_TRUE(DoneCache(sending).sends_async()) << "it forwards both calls asynchronously";
  // Another decorator takes the blocking path through its own do_claim, so it says no.
  EXPECT_FALSE(FailingStore().sends_async());
}

TEST(AsyncBackend, TheDefaultRunsTheBlockingCallAndAnswersBeforeReturning) {
  InMemoryLock lock;
  std::optional<AsyncClaimResult> first;
  lock.claim_async("k", milliseconds(60'000), {},
                   [&](AsyncClaimResult r) { first = std::move(r); });
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(std::holds_alternative<ClaimResult>(*first));
  const auto& won = std::get<ClaimResult>(*first);
  ASSERT_TRUE(std::holds_alternative<Won>(won));
  const Claim claim = std::get<Won>(won).claim;
  EXPECT_FALSE(claim.claim_token.empty()) << "a fresh token, as claim() makes";

  std::optional<AsyncCompleteResult> completed;
  lock.complete_async(claim, "r", [&](AsyncCompleteResult r) { completed = std::move(r); });
  ASSERT_TRUE(completed.has_value());
  ASSERT_TRUE(std::holds_alternative<bool>(*completed));
  EXPECT_TRUE(std::get<bool>(*completed));

  std::optional<AsyncClaimResult> again;
  lock.claim_async("k", milliseconds(60'000), {},
                   [&](AsyncClaimResult r) { again = std::move(r); });
  ASSERT_TRUE(again.has_value());
  const auto& done = std::get<ClaimResult>(*again);
  ASSERT_TRUE(std::holds_alternative<AlreadyDone>(done));
  EXPECT_EQ(std::get<AlreadyDone>(done).result, "r");
}

TEST(AsyncBackend, AStoreFailureArrivesAsAStoreFailureOnce) {
  FailingStore store;
  int calls = 0;
  std::string message;
  store.claim_async("k", milliseconds(60'000), {}, [&](AsyncClaimResult r) {
    ++calls;
    ASSERT_TRUE(std::holds_alternative<StoreFailure>(r));
    message = std::get<StoreFailure>(r).message;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(message, "test: the store is down");

  int completes = 0;
  store.complete_async(Claim{.key = "k", .fence = 1}, std::nullopt, [&](AsyncCompleteResult r) {
    ++completes;
    EXPECT_TRUE(std::holds_alternative<StoreFailure>(r));
  });
  EXPECT_EQ(completes, 1);
}

TEST(AsyncBackend, ABadKeyOrLeaseIsRefusedBeforeAnyCallAndDoneIsNotCalled) {
  InMemoryLock lock;
  int calls = 0;
  EXPECT_THROW(lock.claim_async("", milliseconds(60'000), {}, [&](AsyncClaimResult) { ++calls; }),
               std::invalid_argument);
  EXPECT_THROW(lock.claim_async("k", milliseconds(0), {}, [&](AsyncClaimResult) { ++calls; }),
               std::invalid_argument);
  EXPECT_THROW(lock.complete_async(Claim{}, std::nullopt, [&](AsyncCompleteResult) { ++calls; }),
               std::invalid_argument);
  EXPECT_EQ(calls, 0);
}

// A DoneCache answers claim_async of a key it holds a DONE copy of from the copy, and keeps the
// AlreadyDone answers that come back from the store through claim_async too.
TEST(AsyncBackend, ADoneCacheAnswersFromItsCopiesAndKeepsWhatComesBack) {
  auto store = std::make_shared<InMemoryLock>();
  DoneCache cache(store);
  std::optional<AsyncClaimResult> won;
  cache.claim_async("k", milliseconds(60'000), {}, [&](AsyncClaimResult r) { won = std::move(r); });
  const Claim claim = std::get<Won>(std::get<ClaimResult>(*won)).claim;
  std::optional<AsyncCompleteResult> completed;
  cache.complete_async(claim, "r", [&](AsyncCompleteResult r) { completed = std::move(r); });
  ASSERT_TRUE(std::get<bool>(*completed));

  for (int i = 0; i < 3; ++i) {
    std::optional<AsyncClaimResult> dup;
    cache.claim_async("k", milliseconds(60'000), {},
                      [&](AsyncClaimResult r) { dup = std::move(r); });
    ASSERT_TRUE(dup.has_value());
    const auto& done = std::get<ClaimResult>(*dup);
    ASSERT_TRUE(std::holds_alternative<AlreadyDone>(done));
    EXPECT_EQ(std::get<AlreadyDone>(done).result, "r");
  }
  // The first duplicate came from the store and was kept; the next two from the copy.
  EXPECT_EQ(cache.hits(), 2U);
  EXPECT_EQ(cache.cached_count(), 1U);
}

}  // namespace
}  // namespace idempotency::testing
