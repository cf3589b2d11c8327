// Checks that the stores deciding on their own clock (Redis, PostgreSQL) run against a real
// server, beside the contract suite's injected-clock runs.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <variant>

#include "idempotency/backend.h"

namespace idempotency::testing {

/// expect_released_claim_not_reaffirmed() checks that a claim retried with the token of a
/// claim that was released is a reclaim (fence + 2, a fresh lease), never a re-affirm of the
/// released record, and that only the new claim can complete.
inline void expect_released_claim_not_reaffirmed(LockBackend& backend, const std::string& key) {
  using std::chrono::milliseconds;
  // std::get throws (and fails the test) on anything but Won; no matcher header needed, so
  // this works beside the Redis tests' own helpers.
  const ClaimRequest same{.claim_token = "released-token-0001"};
  const Claim first = std::get<Won>(backend.claim(key, milliseconds(60'000), same)).claim;
  backend.release(first);
  const Claim again = std::get<Won>(backend.claim(key, milliseconds(60'000), same)).claim;
  EXPECT_EQ(again.fence, first.fence + 2) << "a reclaim, not a re-affirm of the released record";
  EXPECT_GE(again.lease_expiry, first.lease_expiry) << "a fresh lease, not the released one";
  Claim dead = first;
  dead.fence = first.fence + 1;
  EXPECT_FALSE(backend.complete(dead));
  EXPECT_TRUE(backend.complete(again));
}

}  // namespace idempotency::testing
