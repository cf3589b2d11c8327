// lock() and mutex() on the in-memory backend, with faults injected by FaultyBackend: the
// seed's three catch points exactly, and everything else propagating.
#include "idempotency/guard.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>

#include "idempotency/errors.h"
#include "idempotency/memory_lock.h"
#include "support/claim_matchers.h"
#include "support/faulty_backend.h"
#include "support/log_capture.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;

class GuardTest : public ::testing::Test {
 protected:
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  InMemoryLock store_{BackendOptions{.clock = clock_}};
  FaultyBackend backend_{store_};
  LogCapture logs_;
};

TEST_F(GuardTest, ScopeExitCompletesAndStoresNothingByDefault) {
  { auto held = lock("k", backend_); }
  EXPECT_EQ(backend_.completes, 1);
  try {
    auto again = lock("k", backend_);
    FAIL() << "expected Duplicate";
  } catch (const Duplicate& d) {
    EXPECT_EQ(d.result(), std::nullopt);
  }
}

TEST_F(GuardTest, ExplicitCompleteStoresTheResultForDuplicates) {
  {
    auto held = lock("k", backend_);
    EXPECT_EQ(held.complete("receipt"), CompleteStatus::kCompleted);
    EXPECT_EQ(held.complete("again"), CompleteStatus::kNotHeld);
  }
  EXPECT_EQ(backend_.completes, 1) << "the destructor must not complete twice";
  try {
    (void)lock("k", backend_);
    FAIL() << "expected Duplicate";
  } catch (const Duplicate& d) {
    EXPECT_EQ(d.result(), std::optional<std::string>("receipt"));
  }
}

TEST_F(GuardTest, AnExceptionInFlightReleasesAndPropagates) {
  EXPECT_THROW(
      {
        auto held = lock("k", backend_);
        throw std::runtime_error("work failed");
      },
      std::runtime_error);
  EXPECT_EQ(backend_.completes, 0);
  EXPECT_EQ(backend_.releases, 1);
  auto retry = lock("k", backend_);  // the redelivery runs
  EXPECT_EQ(retry.fence(), 3);       // fence 1 released to 2, reclaimed as 3
}

TEST_F(GuardTest, CompleteThrowingAfterTheWorkIsLoggedNotRethrown) {
  backend_.fail_complete = true;
  EXPECT_NO_THROW({ auto held = lock("k", backend_); });
  EXPECT_EQ(logs_.count("complete_failed"), 1);
  EXPECT_EQ(logs_.records().back().severity, Severity::kError);
}

TEST_F(GuardTest, ExplicitCompleteReportsAStoreFailure) {
  backend_.fail_complete = true;
  auto held = lock("k", backend_);
  EXPECT_EQ(held.complete(), CompleteStatus::kStoreFailed);
}

TEST_F(GuardTest, FencedOutAfterTheWorkIsAnAlertableErrorNotAnException) {
  {
    auto zombie = lock("k", backend_, LockOptions{.lease = milliseconds(100)});
    clock_->advance(milliseconds(100));
    std::jthread redelivery([&] {  // another worker reclaims the lapsed key
      auto reclaimer = lock("k", backend_);
      EXPECT_EQ(reclaimer.fence(), zombie.fence() + 1);
      EXPECT_EQ(zombie.complete(), CompleteStatus::kFencedOut);
    });
  }
  EXPECT_EQ(logs_.count("fenced_out"), 1);
  const auto records = logs_.records();
  EXPECT_EQ(records.front().severity, Severity::kError);
}

TEST_F(GuardTest, FencedOutOnScopeExitIsLoggedToo) {
  backend_.fence_out_complete = true;
  EXPECT_NO_THROW({ auto held = lock("k", backend_); });
  EXPECT_EQ(logs_.count("fenced_out"), 1);
}

TEST_F(GuardTest, AStoreErrorAtClaimPropagates) {
  backend_.fail_claim = true;
  EXPECT_THROW((void)lock("k", backend_), StoreError);
  EXPECT_THROW((void)mutex("k", backend_), StoreError);
}

TEST_F(GuardTest, ALiveHolderIsInProgressWithItsLeaseExpiry) {
  auto held = lock("k", backend_, LockOptions{.lease = milliseconds(500)});
  std::jthread other_worker([&] {
    try {
      (void)lock("k", backend_);
      ADD_FAILURE() << "expected InProgress";
    } catch (const InProgress& e) {
      EXPECT_EQ(e.lease_expiry(), held.claim().lease_expiry);
    }
  });
}

TEST_F(GuardTest, WorkThatOutrunsAnUnreclaimedLeaseStillCompletes) {
  {
    auto held = lock("k", backend_, LockOptions{.lease = milliseconds(100)});
    clock_->advance(milliseconds(5000));
  }
  EXPECT_THROW((void)lock("k", backend_), Duplicate);
  EXPECT_EQ(logs_.count("fenced_out"), 0);
}

TEST_F(GuardTest, ReleaseFailingInTheDestructorIsLoggedAndTheKeySelfHeals) {
  backend_.fail_release = true;
  EXPECT_THROW(
      {
        auto held = lock("k", backend_, LockOptions{.lease = milliseconds(100)});
        throw std::runtime_error("work failed");
      },
      std::runtime_error);
  EXPECT_EQ(logs_.count("release_failed"), 1);
  backend_.fail_release = false;
  EXPECT_THROW((void)lock("k", backend_), InProgress);
  clock_->advance(milliseconds(100));
  EXPECT_NO_THROW({ auto held = lock("k", backend_); });
}

TEST_F(GuardTest, ExplicitReleasePropagatesAStoreError) {
  backend_.fail_release = true;
  auto held = mutex("k", backend_);
  EXPECT_THROW(held.release(), StoreError);
}

TEST_F(GuardTest, MutexAlwaysReleasesAndNeverCompletes) {
  for (int i = 0; i < 3; ++i) {
    auto held = mutex("po:1", backend_);
  }
  EXPECT_EQ(backend_.completes, 0);
  EXPECT_EQ(backend_.releases, 3);
}

// The seed's mutex never completes: DONE, the key would turn every later holder away for the
// ttl (mutex() InProgress, lock() Duplicate).
TEST_F(GuardTest, AMutexGuardRefusesCompleteAndIsStillReleased) {
  {
    auto held = mutex("po:1", backend_);
    EXPECT_EQ(held.complete(std::string("r")), CompleteStatus::kMutexNeverCompletes);
  }
  EXPECT_EQ(backend_.completes, 0);
  EXPECT_EQ(backend_.releases, 1);
  auto again = mutex("po:1", backend_);  // free again, not DONE
  EXPECT_EQ(again.fence(), 3);
}

TEST_F(GuardTest, AMovedGuardFinishesOnce) {
  {
    auto first = lock("k", backend_);
    Guard second(std::move(first));
    EXPECT_EQ(second.fence(), 1);
  }
  EXPECT_EQ(backend_.completes, 1);
}

TEST_F(GuardTest, AGuardMadeDuringUnwindingStillCompletesWhenItsOwnScopeEndsCleanly) {
  // A guard made inside a destructor that runs during unwinding must judge "exception in
  // flight" against the count when it was made, not against zero.
  struct MakesAGuardWhileUnwinding {
    FaultyBackend* backend;
    ~MakesAGuardWhileUnwinding() { auto held = lock("inner", *backend); }
  };
  try {
    MakesAGuardWhileUnwinding m{&backend_};
    throw std::runtime_error("outer");
  } catch (const std::runtime_error&) {
  }
  EXPECT_THROW((void)lock("inner", backend_), Duplicate);
}

}  // namespace
}  // namespace idempotency::testing
