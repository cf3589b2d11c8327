// InMemoryLock beyond the contract: lazy expiry, entry_count, purge.
#include "idempotency/memory_lock.h"

#include <gtest/gtest.h>

#include <string>

#include "support/claim_matchers.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;

TEST(InMemoryLock, EntryCountDropsExpiredRecordsLazily) {
  auto clock = std::make_shared<ManualClock>();
  InMemoryLock backend(BackendOptions{.ttl = milliseconds(100), .clock = clock});
  Claim a = won(backend.claim("a", milliseconds(50)));
  (void)won(backend.claim("b", milliseconds(50)));
  EXPECT_TRUE(backend.complete(a));
  EXPECT_EQ(backend.entry_count(), 2U);
  clock->advance(milliseconds(100));  // a's ttl (from success) is over; b lives to 150
  EXPECT_EQ(backend.entry_count(), 1U);
  EXPECT_FALSE(backend.inspect("a").has_value());
  clock->advance(milliseconds(50));
  EXPECT_EQ(backend.entry_count(), 0U);
}

// No purge is ever called: the writes themselves reclaim what expired, so a process that
// runs for months on distinct keys holds about its live records, not every key it ever saw.
TEST(InMemoryLock, WritesReclaimExpiredRecordsSoMemoryStaysBounded) {
  auto clock = std::make_shared<ManualClock>();
  InMemoryLock backend(BackendOptions{.ttl = milliseconds(1000), .clock = clock});
  constexpr int kPerRound = 2000;
  int next_key = 0;
  for (int round = 0; round < 10; ++round) {
    for (int i = 0; i < kPerRound; ++i) {
      EXPECT_TRUE(backend.complete(
          won(backend.claim("k" + std::to_string(next_key++), milliseconds(100)))));
    }
    // Everything written before this round has expired; at most this round's records live.
    EXPECT_LE(backend.stored_count(), 2U * kPerRound) << "round " << round;
    clock->advance(milliseconds(1000));  // this round's records expire
  }
  EXPECT_FALSE(backend.inspect("k0").has_value());
}

TEST(InMemoryLock, RecordShowsTheStoredState) {
  auto clock = std::make_shared<ManualClock>();
  InMemoryLock backend(BackendOptions{.ttl = milliseconds(1000), .clock = clock});
  Claim c = won(backend.claim("k", milliseconds(10), ClaimRequest{.fingerprint = "f"}));
  const Millis t0 = to_millis(clock->now());
  Record r = *backend.inspect("k");
  EXPECT_EQ(r.state, RecordState::kClaimed);
  EXPECT_EQ(r.fence, 1);
  EXPECT_EQ(r.lease_expiry, t0 + 10);
  EXPECT_EQ(r.expires_at, t0 + 1010);
  EXPECT_EQ(r.claim_token, c.claim_token);
  EXPECT_EQ(r.fingerprint, std::optional<std::string>("f"));
  EXPECT_TRUE(backend.complete(c, std::string("x")));
  r = *backend.inspect("k");
  EXPECT_EQ(r.state, RecordState::kDone);
  EXPECT_EQ(r.result, std::optional<std::string>("x"));
}

TEST(InMemoryLock, ManyClaimsOnOneKeyKeepOneRecord) {
  InMemoryLock backend;
  for (int i = 0; i < 100; ++i) (void)backend.claim("k", milliseconds(10));
  EXPECT_EQ(backend.entry_count(), 1U);
}

}  // namespace
}  // namespace idempotency::testing
