// Lease renewal end to end in one process: a guard or a `once` with a heartbeat keeps its key
// far longer than its lease while a rival keeps trying to take it; without one it is reclaimed
// (pinned); a forced release makes the next renewal fail, which asks the work to stop, logs
// `lease_lost` and fences the late completion out. Real time on the in-memory backend: the
// waits below are bounded hang guards and paced rival attempts, never timing assertions.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <variant>

#include "idempotency/guard.h"
#include "idempotency/memory_lock.h"
#include "idempotency/once.h"
#include "support/eventually.h"
#include "support/log_capture.h"

namespace idempotency::testing {
namespace {

using namespace std::chrono_literals;

// A renewal may run late (the renewing threads under TSan, a loaded machine) by up to the
// lease less the heartbeat, 1.9 s, before the rival can take the key: a rival's win is a
// missing renewal, not a slow one. The work still outlives three leases (some sixty renewals),
// and without renewals the key is lost within the first (WithoutAHeartbeat... below).
constexpr auto kLease = 2s;
constexpr auto kHeartbeat = 100ms;
constexpr auto kWork = 3 * kLease;  // the work outlives three leases

// A rival (another instance's redelivery) tries to claim `key` every 50 ms while `work`
// lasts; returns how many of its attempts won.
int rival_wins_during(LockBackend& backend, const std::string& key,
                      std::chrono::milliseconds work) {
  int wins = 0;
  const auto end = std::chrono::steady_clock::now() + work;
  while (std::chrono::steady_clock::now() < end) {
    ClaimResult r = backend.claim(key, kLease);
    if (auto* won = std::get_if<Won>(&r)) {
      ++wins;
      backend.release(won->claim);  // give it back: count every lapse, not just the first
    }
    std::this_thread::sleep_for(50ms);
  }
  return wins;
}

TEST(LeaseRenewal, AGuardWithAHeartbeatStaysTheSoleOwnerForThreeLeasesAndCompletes) {
  InMemoryLock backend;
  auto held = lock("order-1", backend, LockOptions{.lease = kLease, .heartbeat = kHeartbeat});
  EXPECT_EQ(rival_wins_during(backend, "order-1", kWork), 0);
  EXPECT_FALSE(held.lost());
  EXPECT_EQ(held.complete("done"), CompleteStatus::kCompleted);
  EXPECT_TRUE(std::holds_alternative<AlreadyDone>(backend.claim("order-1", kLease)));
}

TEST(LeaseRenewal, WithoutAHeartbeatTheSameRunIsReclaimedAndFencedOut) {
  InMemoryLock backend;
  LogCapture logs;
  auto held = lock("order-1", backend, LockOptions{.lease = kLease});
  EXPECT_GT(rival_wins_during(backend, "order-1", kWork), 0) << "the lease lapsed mid-work";
  EXPECT_EQ(held.complete(), CompleteStatus::kFencedOut);
}

TEST(LeaseRenewal, ARefusedRenewalStopsTheWorkLogsLeaseLostAndFencesTheCompletionOut) {
  InMemoryLock backend;
  LogCapture logs;
  auto held = lock("order-1", backend, LockOptions{.lease = kLease, .heartbeat = kHeartbeat});
  backend.release(held.claim());  // an operator's forced release (`idem release`)
  ASSERT_TRUE(eventually([&] { return held.stop_token().stop_requested(); }));
  EXPECT_TRUE(held.lost());
  EXPECT_TRUE(eventually([&] { return logs.count("lease_lost") == 1; }));
  EXPECT_EQ(logs.all_text().find("order-1"), std::string::npos) << "a key reached a log line";
  EXPECT_EQ(held.complete(), CompleteStatus::kFencedOut);
}

TEST(LeaseRenewal, OnceWithAHeartbeatRunsThreeLeasesUnreclaimedAndUnstopped) {
  InMemoryLock backend;
  int rival_wins = -1;
  bool stopped = true;
  auto outcome = once(
      "order-1", backend,
      [&](const Claim&, const std::stop_token& stop) {
        rival_wins = rival_wins_during(backend, "order-1", kWork);
        stopped = stop.stop_requested();
        return std::string("42");
      },
      OnceOptions{.lease = kLease, .heartbeat = kHeartbeat});
  EXPECT_EQ(outcome.status(), Status::kExecuted);
  EXPECT_EQ(rival_wins, 0);
  EXPECT_FALSE(stopped);
  EXPECT_TRUE(std::holds_alternative<AlreadyDone>(backend.claim("order-1", kLease)));
}

TEST(LeaseRenewal, OnceWhoseClaimIsLostHasItsStopTokenRequested) {
  InMemoryLock backend;
  LogCapture logs;
  bool asked_to_stop = false;
  auto outcome = once(
      "order-1", backend,
      [&](const Claim& claim, const std::stop_token& stop) {
        backend.release(claim);  // taken away behind the work's back
        asked_to_stop = eventually([&] { return stop.stop_requested(); });
        return std::string("1");  // finishes anyway: the completion must be fenced out
      },
      OnceOptions{.lease = kLease, .heartbeat = kHeartbeat});
  EXPECT_TRUE(asked_to_stop);
  EXPECT_EQ(outcome.status(), Status::kExecuted);
  EXPECT_EQ(logs.count("lease_lost"), 1);
  EXPECT_EQ(logs.count("fenced_out"), 1);
  EXPECT_TRUE(std::holds_alternative<Won>(backend.claim("order-1", kLease)))
      << "a fenced-out completion must not mark the key done";
}

TEST(LeaseRenewal, AnExplicitExtendMovesTheGuardsLeaseUntilTheClaimIsGone) {
  InMemoryLock backend;
  auto held = lock("order-1", backend, LockOptions{.lease = kLease});
  const auto before = held.claim().lease_expiry;
  ASSERT_TRUE(held.extend(1h));
  EXPECT_GT(held.claim().lease_expiry, before + 30min);
  backend.release(held.claim());
  EXPECT_FALSE(held.extend(1h));
  EXPECT_EQ(held.complete(), CompleteStatus::kFencedOut);
}

TEST(LeaseRenewal, AHeartbeatNotShorterThanTheLeaseIsRefusedBeforeClaiming) {
  InMemoryLock backend;
  EXPECT_THROW((void)lock("order-1", backend, LockOptions{.lease = kLease, .heartbeat = kLease}),
               std::invalid_argument);
  EXPECT_THROW((void)mutex("order-1", backend, LockOptions{.lease = kLease, .heartbeat = -1ms}),
               std::invalid_argument);
  EXPECT_THROW((void)once(
                   "order-1", backend, [] { return std::string("1"); },
                   OnceOptions{.lease = kLease, .heartbeat = kLease}),
               std::invalid_argument);
  EXPECT_TRUE(std::holds_alternative<Won>(backend.claim("order-1", kLease)))
      << "a refused option must leave the key unclaimed";
}

}  // namespace
}  // namespace idempotency::testing
