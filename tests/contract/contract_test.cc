// The contract every backend keeps: each row of the seed's transition table and each of its
// backend-level scenarios. Time moves through the injected ManualClock, never by sleeping.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "contract/suites.h"
#include "idempotency/errors.h"
#include "idempotency/guard.h"
#include "idempotency/key.h"
#include "support/claim_matchers.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::minutes;

constexpr milliseconds kLease = minutes(15);

// --- ABSENT -------------------------------------------------------------------------------

TEST_P(BackendContract, ClaimOnAbsentKeyWinsWithFenceOne) {
  Claim c = won(backend_->claim("orders:1", kLease));
  EXPECT_EQ(c.key, "orders:1");
  EXPECT_EQ(c.fence, 1);
  EXPECT_EQ(c.lease_expiry, clock_->now() + kLease);
  EXPECT_FALSE(c.claim_token.empty());
}

TEST_P(BackendContract, KeysAreIndependent) {
  Claim a = won(backend_->claim("orders:a", kLease));
  Claim b = won(backend_->claim("orders:b", kLease));
  EXPECT_EQ(a.fence, 1);
  EXPECT_EQ(b.fence, 1);
  EXPECT_TRUE(backend_->complete(a));
  held(backend_->claim("orders:b", kLease));
}

// --- CLAIMED ------------------------------------------------------------------------------

TEST_P(BackendContract, ClaimWhileLeaseLiveIsHeldByOtherAndChangesNothing) {
  Claim c = won(backend_->claim("k", kLease));
  clock_->advance(kLease - milliseconds(1));
  HeldByOther h = held(backend_->claim("k", kLease));
  EXPECT_EQ(h.lease_expiry, c.lease_expiry);
  EXPECT_TRUE(backend_->complete(c)) << "the holder's claim must be untouched";
}

TEST_P(BackendContract, CrashedHolderSelfHealsAfterLeaseExpiry) {
  Claim crashed = won(backend_->claim("k", kLease));
  clock_->advance(kLease);  // now == lease_expiry: the lease has lapsed
  Claim next = won(backend_->claim("k", kLease));
  EXPECT_EQ(next.fence, crashed.fence + 1);
  EXPECT_EQ(next.lease_expiry, clock_->now() + kLease);
}

TEST_P(BackendContract, CompleteOnFenceMatchMarksDone) {
  Claim c = won(backend_->claim("k", kLease));
  EXPECT_TRUE(backend_->complete(c, std::string("receipt-1")));
  AlreadyDone d = done(backend_->claim("k", kLease));
  EXPECT_EQ(d.result, std::optional<std::string>("receipt-1"));
}

TEST_P(BackendContract, CompleteCommitsOnFenceMatchEvenAfterTheLeaseLapsed) {
  Claim c = won(backend_->claim("k", kLease));
  clock_->advance(kLease + minutes(5));  // work outran the lease; nobody reclaimed
  EXPECT_TRUE(backend_->complete(c));
  done(backend_->claim("k", kLease));
}

TEST_P(BackendContract, ZombieCannotCompleteOverANewerClaim) {
  Claim zombie = won(backend_->claim("k", kLease));
  clock_->advance(kLease);
  Claim fresh = won(backend_->claim("k", kLease));
  EXPECT_FALSE(backend_->complete(zombie, std::string("zombie")));
  held(backend_->claim("k", kLease));
  EXPECT_TRUE(backend_->complete(fresh, std::string("fresh")));
  EXPECT_EQ(done(backend_->claim("k", kLease)).result, std::optional<std::string>("fresh"));
}

TEST_P(BackendContract, ZombieCannotReleaseOverANewerClaim) {
  Claim zombie = won(backend_->claim("k", kLease));
  clock_->advance(kLease);
  Claim fresh = won(backend_->claim("k", kLease));
  backend_->release(zombie);
  held(backend_->claim("k", kLease));  // the newer holder still holds
  EXPECT_TRUE(backend_->complete(fresh));
}

TEST_P(BackendContract, ReleaseExpiresTheLeaseAdvancesTheFenceAndKeepsTheRecord) {
  Claim c = won(backend_->claim("k", kLease));
  backend_->release(c);
  EXPECT_FALSE(backend_->complete(c)) << "a released claim is dead";
  Claim next = won(backend_->claim("k", kLease));
  // Released fence 1 became 2 in place; the reclaim makes it 3. A deleted record would give 1.
  EXPECT_EQ(next.fence, c.fence + 2);
}

TEST_P(BackendContract, ReleaseWithAStaleFenceIsANoOp) {
  Claim c = won(backend_->claim("k", kLease));
  Claim stale = c;
  stale.fence = c.fence + 7;
  backend_->release(stale);
  held(backend_->claim("k", kLease));
  EXPECT_TRUE(backend_->complete(c));
}

TEST_P(BackendContract, CompleteWithAStaleFenceIsRefusedAndChangesNothing) {
  Claim c = won(backend_->claim("k", kLease));
  Claim stale = c;
  stale.fence = c.fence - 1;
  EXPECT_FALSE(backend_->complete(stale));
  held(backend_->claim("k", kLease));
}

TEST_P(BackendContract, CompleteOnAnAbsentKeyIsRefused) {
  Claim ghost{"never-claimed", 1, clock_->now() + kLease, "token"};
  EXPECT_FALSE(backend_->complete(ghost));
  backend_->release(ghost);
  EXPECT_EQ(won(backend_->claim("never-claimed", kLease)).fence, 1);
}

// --- EXTEND (a heartbeat) -------------------------------------------------------------------

TEST_P(BackendContract, ExtendOnALiveClaimMovesTheLeaseAndTheHolderKeepsTheKey) {
  Claim c = won(backend_->claim("k", kLease));
  clock_->advance(kLease - minutes(1));
  const auto extended = backend_->extend(c, kLease);
  ASSERT_TRUE(extended.has_value());
  EXPECT_EQ(*extended, clock_->now() + kLease);
  clock_->advance(minutes(5));  // past the original lease: still held by the extension
  EXPECT_EQ(held(backend_->claim("k", kLease)).lease_expiry, *extended);
  EXPECT_TRUE(backend_->complete(c)) << "extending keeps the fence";
}

TEST_P(BackendContract, ExtendKeepsTheRecordAliveBeyondTheNewLease) {
  // ttl 1 min, lease 15 min: without the extension the record would expire at 16 min.
  backend_ = make(minutes(1));
  Claim c = won(backend_->claim("k", kLease));
  clock_->advance(kLease - minutes(1));
  ASSERT_TRUE(backend_->extend(c, kLease).has_value());
  clock_->advance(kLease - minutes(1));  // 28 min in: past the first claim's expires_at
  held(backend_->claim("k", kLease));
  EXPECT_TRUE(backend_->complete(c));
}

TEST_P(BackendContract, ExtendAfterTheLeaseLapsedHoldsWhileNobodyReclaimed) {
  Claim c = won(backend_->claim("k", kLease));
  clock_->advance(kLease + minutes(1));
  ASSERT_TRUE(backend_->extend(c, kLease).has_value());
  held(backend_->claim("k", kLease));
}

TEST_P(BackendContract, ExtendWithAStaleFenceIsRefusedAndChangesNothing) {
  Claim zombie = won(backend_->claim("k", kLease));
  clock_->advance(kLease);
  Claim fresh = won(backend_->claim("k", kLease));
  clock_->advance(minutes(1));
  EXPECT_FALSE(backend_->extend(zombie, kLease).has_value());
  EXPECT_EQ(held(backend_->claim("k", kLease)).lease_expiry, fresh.lease_expiry)
      << "a refused extend must not move the newer holder's lease";
  EXPECT_TRUE(backend_->complete(fresh));
}

TEST_P(BackendContract, ExtendWithAnotherClaimsTokenIsRefused) {
  Claim c = won(backend_->claim("k", kLease));
  Claim forged = c;
  forged.claim_token = "not-the-holders-token";
  EXPECT_FALSE(backend_->extend(forged, kLease).has_value());
  EXPECT_EQ(held(backend_->claim("k", kLease)).lease_expiry, c.lease_expiry);
}

TEST_P(BackendContract, ExtendAfterReleaseIsRefusedAndTheKeyStaysFree) {
  Claim c = won(backend_->claim("k", kLease));
  backend_->release(c);
  EXPECT_FALSE(backend_->extend(c, kLease).has_value());
  Claim next = won(backend_->claim("k", kLease));
  EXPECT_EQ(next.fence, c.fence + 2);
}

TEST_P(BackendContract, ExtendOnADoneKeyIsRefusedAndTheKeyStaysDone) {
  Claim c = won(backend_->claim("k", kLease));
  ASSERT_TRUE(backend_->complete(c, std::string("r")));
  EXPECT_FALSE(backend_->extend(c, kLease).has_value());
  EXPECT_EQ(done(backend_->claim("k", kLease)).result, std::optional<std::string>("r"));
}

TEST_P(BackendContract, ExtendAfterExpiryIsRefusedAndCreatesNothing) {
  backend_ = make(minutes(1));
  Claim c = won(backend_->claim("k", kLease));
  clock_->advance(kLease + minutes(1));  // at expires_at: gone, whether or not reaped
  EXPECT_FALSE(backend_->extend(c, kLease).has_value());
  Claim ghost{"never-claimed", 1, clock_->now() + kLease, "token"};
  EXPECT_FALSE(backend_->extend(ghost, kLease).has_value());
  EXPECT_EQ(won(backend_->claim("never-claimed", kLease)).fence, 1)
      << "a refused extend on an absent key must not create a record";
}

TEST_P(BackendContract, ARetriedExtendWhoseReplyWasLostExtendsAgain) {
  Claim c = won(backend_->claim("k", kLease));
  clock_->advance(minutes(1));
  ASSERT_TRUE(backend_->extend(c, kLease).has_value());  // its reply "lost": sent again
  const auto again = backend_->extend(c, kLease);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, clock_->now() + kLease);
  EXPECT_TRUE(backend_->complete(c));
}

TEST_P(BackendContract, ExtendRejectsABadLeaseBeforeAnyStoreCall) {
  Claim c = won(backend_->claim("k", kLease));
  EXPECT_THROW((void)backend_->extend(c, milliseconds(0)), std::invalid_argument);
  EXPECT_THROW((void)backend_->extend(c, kMaxLease + milliseconds(1)), std::invalid_argument);
  Claim bad = c;
  bad.key.clear();
  EXPECT_THROW((void)backend_->extend(bad, kLease), std::invalid_argument);
}

// --- DONE ---------------------------------------------------------------------------------

TEST_P(BackendContract, DoneWithinTtlAnswersAlreadyDoneWithResultAndFingerprint) {
  Claim c = won(backend_->claim("k", kLease, ClaimRequest{.fingerprint = "fp-1"}));
  EXPECT_TRUE(backend_->complete(c, std::string("result")));
  clock_->advance(backend_->ttl() - milliseconds(1));
  AlreadyDone d = done(backend_->claim("k", kLease));
  EXPECT_EQ(d.result, std::optional<std::string>("result"));
  EXPECT_EQ(d.fingerprint, std::optional<std::string>("fp-1"));
}

// Until when the answer holds: what a cache of DONE records (DoneCache) trusts.
TEST_P(BackendContract, AlreadyDoneSaysWhenTheRecordExpires) {
  Claim c = won(backend_->claim("k", kLease));
  clock_->advance(milliseconds(250));
  const TimePoint completed = clock_->now();
  EXPECT_TRUE(backend_->complete(c));
  clock_->advance(milliseconds(100));
  EXPECT_EQ(done(backend_->claim("k", kLease)).expires_at,
            std::optional<TimePoint>(completed + backend_->ttl()));
}

TEST_P(BackendContract, DoneAnswersCompleteTrueOnlyForItsOwnFence) {
  Claim c = won(backend_->claim("k", kLease));
  EXPECT_TRUE(backend_->complete(c, std::string("first")));
  EXPECT_TRUE(backend_->complete(c, std::string("second"))) << "idempotent for its own fence";
  Claim other = c;
  other.fence = c.fence + 1;
  EXPECT_FALSE(backend_->complete(other));
  EXPECT_EQ(done(backend_->claim("k", kLease)).result, std::optional<std::string>("first"));
}

TEST_P(BackendContract, DoneIgnoresRelease) {
  Claim c = won(backend_->claim("k", kLease));
  EXPECT_TRUE(backend_->complete(c));
  backend_->release(c);
  done(backend_->claim("k", kLease));
}

TEST_P(BackendContract, TtlIsMeasuredFromSuccess) {
  Claim c = won(backend_->claim("k", kLease));
  clock_->advance(minutes(10));
  EXPECT_TRUE(backend_->complete(c));
  clock_->advance(backend_->ttl() - milliseconds(1));
  done(backend_->claim("k", kLease));
  clock_->advance(milliseconds(1));  // exactly ttl after success
  won(backend_->claim("k", kLease));
}

TEST_P(BackendContract, TtlExpiryMakesADoneKeyReclaimableWithFencePlusOne) {
  Claim c = won(backend_->claim("k", kLease));
  EXPECT_TRUE(backend_->complete(c));
  clock_->advance(backend_->ttl());
  Claim next = won(backend_->claim("k", kLease));
  // A store that reaps exactly at expires_at (Redis, memory; any store with the reclaimer on)
  // starts a fresh record instead.
  EXPECT_EQ(next.fence, reaps_at_expiry() ? 1 : c.fence + 1);
  if (reaps_at_expiry()) {
    // The record was deleted, so the fence restarted at 1 and the old claim's fence 1 matches
    // again: exactly the zombie hazard the lease + ttl sizing invariant exists to rule out.
    EXPECT_TRUE(backend_->complete(c));
  } else {
    EXPECT_FALSE(backend_->complete(c)) << "the old claim is stale after the reclaim";
  }
}

TEST_P(BackendContract, APurgedRecordRestartsAtFenceOne) {
  Claim c = won(backend_->claim("k", kLease));
  EXPECT_TRUE(backend_->complete(c));
  Claim live = won(backend_->claim("live", kLease));
  const std::size_t reclaimed_before = reclaimer_purged();
  clock_->advance(backend_->ttl());
  const std::size_t purged = backend_->purge_expired();
  if (reclaimed()) {
    // The reclaimer deleted the record before advance() returned; nothing is left to purge.
    EXPECT_EQ(purged, 0U);
    if (!GetParam().reaps_at_expiry) {
      EXPECT_EQ(reclaimer_purged() - reclaimed_before, 1U);
    }
  } else if (!GetParam().reaps_at_expiry) {
    EXPECT_EQ(purged, 1U);
  }
  EXPECT_EQ(won(backend_->claim("k", kLease)).fence, 1);
  EXPECT_TRUE(backend_->complete(live)) << "purge must keep records within their retention";
}

TEST_P(BackendContract, AnAbandonedClaimIsKeptForLeasePlusTtl) {
  Claim c = won(backend_->claim("k", kLease));
  clock_->advance(kLease + backend_->ttl() - milliseconds(1));
  EXPECT_EQ(backend_->purge_expired(), 0U);
  EXPECT_EQ(reclaimer_purged(), 0U);
  EXPECT_EQ(won(backend_->claim("k", kLease)).fence, c.fence + 1);
}

// Issue 13: a purge — explicit, or the reclaimer's running hot — takes a record from its
// expires_at on, never a millisecond before, whatever state the record is in.
TEST_P(BackendContract, NoRecordIsPurgedBeforeItsExpiresAt) {
  constexpr int kDone = 5;
  const TimePoint expires_at = clock_->now() + kLease + backend_->ttl();
  // Abandoned and released at t0: both expire at t0 + lease + ttl.
  Claim abandoned = won(backend_->claim("abandoned", kLease));
  Claim released = won(backend_->claim("released", kLease));
  backend_->release(released);
  // DONE records completed 1 ms apart from t0 + lease: done:i expires at expires_at + i ms.
  clock_->advance(kLease);
  for (int i = 0; i < kDone; ++i) {
    const std::string key = "done:" + std::to_string(i);
    EXPECT_TRUE(backend_->complete(won(backend_->claim(key, kLease)), "receipt:" + key));
    clock_->advance(milliseconds(1));
  }
  auto answers_done_from = [&](int first) {
    for (int i = first; i < kDone; ++i) {
      const std::string key = "done:" + std::to_string(i);
      EXPECT_EQ(done(backend_->claim(key, kLease)).result,
                std::optional<std::string>("receipt:" + key));
    }
  };

  clock_->set(expires_at - milliseconds(1));
  let_reclaimers_run(20);  // running hot at expires_at - 1 ms
  EXPECT_EQ(backend_->purge_expired(), 0U);
  EXPECT_EQ(reclaimer_purged(), 0U);
  answers_done_from(0);
  // Still there: a purged record would restart at fence 1.
  EXPECT_EQ(won(backend_->claim("abandoned", kLease)).fence, abandoned.fence + 1);
  EXPECT_EQ(won(backend_->claim("released", kLease)).fence, released.fence + 2);

  // Step onto each DONE record's expires_at in turn: exactly that record goes.
  for (int i = 0; i < kDone; ++i) {
    SCOPED_TRACE("done:" + std::to_string(i) + " at its expires_at");
    clock_->set(expires_at + milliseconds(i));
    let_reclaimers_run(5);
    const std::size_t purged = backend_->purge_expired();
    if (reclaimed()) {
      EXPECT_EQ(purged, 0U) << "the reclaimer took it before the clock move returned";
      if (!GetParam().reaps_at_expiry) {
        EXPECT_EQ(reclaimer_purged(), static_cast<std::size_t>(i + 1));
      }
    } else if (!GetParam().reaps_at_expiry) {
      EXPECT_EQ(purged, 1U);
    }
    answers_done_from(i + 1);
    EXPECT_EQ(won(backend_->claim("done:" + std::to_string(i), kLease)).fence, 1);
  }
}

// --- claim token ----------------------------------------------------------------------------

TEST_P(BackendContract, ClaimIsRetrySafeViaClaimToken) {
  ClaimRequest retry{.claim_token = "call-1"};
  Claim first = won(backend_->claim("k", kLease, retry));
  clock_->advance(milliseconds(10));
  Claim again = won(backend_->claim("k", kLease, retry));  // the reply was lost; retried
  EXPECT_EQ(again.fence, first.fence);
  EXPECT_EQ(again.lease_expiry, first.lease_expiry);
  EXPECT_EQ(again.claim_token, "call-1");
  held(backend_->claim("k", kLease));  // any other call still finds it held
  EXPECT_TRUE(backend_->complete(again));
}

TEST_P(BackendContract, ClaimReaffirmUnderRetryOnTheReclaimPath) {
  Claim crashed = won(backend_->claim("k", kLease));
  clock_->advance(kLease);
  ClaimRequest retry{.claim_token = "call-2"};
  Claim reclaimed = won(backend_->claim("k", kLease, retry));
  Claim again = won(backend_->claim("k", kLease, retry));
  EXPECT_EQ(reclaimed.fence, crashed.fence + 1);
  EXPECT_EQ(again.fence, reclaimed.fence) << "a retried reclaim must not bump the fence twice";
  EXPECT_FALSE(backend_->complete(crashed));
  EXPECT_TRUE(backend_->complete(again));
}

// Issue 11, defect 1: a token re-affirms only its own live claim; otherwise a claim carrying
// it takes the normal path (reclaim with fence + 1, or held).

TEST_P(BackendContract, AReleasedClaimIsNotReaffirmedByItsToken) {
  const ClaimRequest same{.claim_token = "call-r"};
  Claim first = won(backend_->claim("k", kLease, same));
  backend_->release(first);
  Claim dead = first;
  dead.fence = first.fence + 1;  // the fence the release left on the record
  Claim again = won(backend_->claim("k", kLease, same));
  EXPECT_EQ(again.fence, first.fence + 2) << "a reclaim, not a re-affirm of the released record";
  EXPECT_EQ(again.lease_expiry, clock_->now() + kLease) << "a live lease, not the released one";
  EXPECT_FALSE(backend_->complete(dead));
  EXPECT_FALSE(backend_->complete(first));
  held(backend_->claim("k", kLease));
  EXPECT_TRUE(backend_->complete(again));
}

TEST_P(BackendContract, ATokenWhoseLeaseLapsedReclaimsWithFencePlusOne) {
  const ClaimRequest same{.claim_token = "call-l"};
  Claim first = won(backend_->claim("k", kLease, same));
  clock_->advance(kLease);  // now == lease_expiry
  Claim again = won(backend_->claim("k", kLease, same));
  EXPECT_EQ(again.fence, first.fence + 1);
  EXPECT_EQ(again.lease_expiry, clock_->now() + kLease);
  EXPECT_FALSE(backend_->complete(first)) << "the lapsed claim is fenced out by the reclaim";
  held(backend_->claim("k", kLease));
  EXPECT_TRUE(backend_->complete(again));
}

TEST_P(BackendContract, ATokenPastExpiresAtStartsAFreshClaim) {
  const ClaimRequest same{.claim_token = "call-e"};
  Claim first = won(backend_->claim("k", kLease, same));
  clock_->advance(kLease + backend_->ttl());  // now == expires_at
  Claim again = won(backend_->claim("k", kLease, same));
  EXPECT_EQ(again.fence, reaps_at_expiry() ? 1 : first.fence + 1);
  EXPECT_EQ(again.lease_expiry, clock_->now() + kLease);
  held(backend_->claim("k", kLease));
  EXPECT_TRUE(backend_->complete(again));
}

TEST_P(BackendContract, AReusedTokenDoesNotReaffirmAnotherCallsClaim) {
  won(backend_->claim("k", kLease, ClaimRequest{.claim_token = "a"}));
  held(backend_->claim("k", kLease, ClaimRequest{.claim_token = "b"}));
}

// --- payloads -------------------------------------------------------------------------------

TEST_P(BackendContract, ResultBytesRoundTripExactly) {
  const std::string binary("\0\x01\xff\n\"'\\end", 10);
  Claim c = won(backend_->claim("bin", kLease));
  EXPECT_TRUE(backend_->complete(c, binary));
  EXPECT_EQ(done(backend_->claim("bin", kLease)).result, std::optional<std::string>(binary));

  Claim e = won(backend_->claim("empty", kLease));
  EXPECT_TRUE(backend_->complete(e, std::string()));
  EXPECT_EQ(done(backend_->claim("empty", kLease)).result, std::optional<std::string>(""));

  Claim n = won(backend_->claim("none", kLease));
  EXPECT_TRUE(backend_->complete(n));
  EXPECT_EQ(done(backend_->claim("none", kLease)).result, std::nullopt);
}

TEST_P(BackendContract, HeldByOtherCarriesTheHoldersFingerprint) {
  won(backend_->claim("k", kLease, ClaimRequest{.fingerprint = "body-sha"}));
  EXPECT_EQ(held(backend_->claim("k", kLease)).fingerprint, std::optional<std::string>("body-sha"));
}

TEST_P(BackendContract, KeysAreOpaqueBytes) {
  const std::string odd("a\0b:\xc3\xa9 'x\" ;--", 15);
  Claim c = won(backend_->claim(odd, kLease));
  EXPECT_EQ(c.key, odd);
  EXPECT_TRUE(backend_->complete(c));
  done(backend_->claim(odd, kLease));
  won(backend_->claim(std::string("a\0c", 3), kLease));
  won(backend_->claim(std::string(kMaxKeyBytes, 'x'), kLease));
}

// --- bad input ------------------------------------------------------------------------------

TEST_P(BackendContract, BadInputIsRejectedBeforeAnyStoreCall) {
  EXPECT_THROW((void)backend_->claim("", kLease), std::invalid_argument);
  EXPECT_THROW((void)backend_->claim(std::string(kMaxKeyBytes + 1, 'x'), kLease),
               std::invalid_argument);
  EXPECT_THROW((void)backend_->claim("k", milliseconds(0)), std::invalid_argument);
  EXPECT_THROW((void)backend_->claim("k", milliseconds(-5)), std::invalid_argument);
  EXPECT_THROW((void)backend_->claim("k", kMaxLease + milliseconds(1)), std::invalid_argument);
  EXPECT_EQ(won(backend_->claim("k", kLease)).fence, 1) << "nothing was stored";
}

TEST_P(BackendContract, ABlankKeyIsRejectedBeforeAnyStoreCall) {
  EXPECT_THROW((void)backend_->claim(" ", kLease), std::invalid_argument);
  EXPECT_THROW((void)backend_->claim("\t\r\n", kLease), std::invalid_argument);
  EXPECT_EQ(won(backend_->claim(" k ", kLease)).key, " k ") << "padding is kept, never trimmed";
}

// --- inspection ---------------------------------------------------------------------------

TEST_P(BackendContract, InspectReadsTheRecordAsStoredAndChangesNothing) {
  EXPECT_EQ(backend_->inspect("orders:1"), std::nullopt);
  const Claim c = won(backend_->claim("orders:1", kLease, {.fingerprint = "fp"}));
  const auto claimed = backend_->inspect("orders:1");
  ASSERT_TRUE(claimed.has_value());
  EXPECT_EQ(claimed->state, RecordState::kClaimed);
  EXPECT_EQ(claimed->fence, c.fence);
  EXPECT_EQ(claimed->lease_expiry, to_millis(c.lease_expiry));
  EXPECT_EQ(claimed->claim_token, c.claim_token);
  EXPECT_EQ(claimed->fingerprint, std::optional<std::string>("fp"));
  EXPECT_EQ(backend_->inspect("orders:1"), claimed) << "reading changed the record";
  held(backend_->claim("orders:1", kLease));
  ASSERT_TRUE(backend_->complete(c, std::string("result")));
  const auto completed = backend_->inspect("orders:1");
  ASSERT_TRUE(completed.has_value());
  EXPECT_EQ(completed->state, RecordState::kDone);
  EXPECT_EQ(completed->result, std::optional<std::string>("result"));
}

TEST_P(BackendContract, InspectRejectsABadKeyBeforeAnyStoreCall) {
  EXPECT_THROW((void)backend_->inspect(""), std::invalid_argument);
  EXPECT_THROW((void)backend_->inspect(" "), std::invalid_argument);
  EXPECT_THROW((void)backend_->inspect(std::string(kMaxKeyBytes + 1, 'x')), std::invalid_argument);
}

TEST_P(BackendContract, BadTtlIsRejectedAtConstruction) {
  EXPECT_THROW(make(milliseconds(0)), std::invalid_argument);
  EXPECT_THROW(make(milliseconds(-1)), std::invalid_argument);
  EXPECT_THROW(make(kMaxTtl + milliseconds(1)), std::invalid_argument);
}

// --- the guards on every backend ----------------------------------------------------------

TEST_P(BackendContract, LockRunsTheBodyOnceAndSuppressesTheRedelivery) {
  int runs = 0;
  {
    auto held_lock = lock("msg-1", *backend_);
    ++runs;
  }
  EXPECT_THROW(
      {
        auto again = lock("msg-1", *backend_);
        ++runs;
      },
      Duplicate);
  EXPECT_EQ(runs, 1);
}

TEST_P(BackendContract, LockReleasesOnExceptionSoTheRedeliveryRunsOnce) {
  int runs = 0;
  EXPECT_THROW(
      {
        auto g = lock("msg-2", *backend_);
        throw std::runtime_error("transient");
      },
      std::runtime_error);
  {
    auto g = lock("msg-2", *backend_);
    ++runs;
  }
  EXPECT_THROW((void)lock("msg-2", *backend_), Duplicate);
  EXPECT_EQ(runs, 1);
}

TEST_P(BackendContract, MutexCycleReclaimsWithoutEverCompleting) {
  std::int64_t last_fence = 0;
  for (int i = 0; i < 3; ++i) {
    auto g = mutex("po:7", *backend_);
    EXPECT_GT(g.fence(), last_fence) << "the fence rises on every cycle (no ABA)";
    last_fence = g.fence();
    std::thread([&] { EXPECT_THROW((void)mutex("po:7", *backend_), InProgress); }).join();
  }
  auto g = lock("po:7", *backend_);  // never DONE: a lock on the same key still runs
  EXPECT_GT(g.fence(), last_fence);
}

TEST_P(BackendContract, MutexOnADoneKeyIsInProgress) {
  { auto g = lock("done", *backend_); }
  EXPECT_THROW((void)mutex("done", *backend_), InProgress);
}

TEST_P(BackendContract, ConcurrentClaimsOnOneKeyAdmitExactlyOne) {
  constexpr int kThreads = 8;
  std::atomic<int> wins{0};
  std::atomic<int> others{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      ClaimResult r = backend_->claim("race", kLease);
      (std::holds_alternative<Won>(r) ? wins : others)++;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wins, 1);
  EXPECT_EQ(others, kThreads - 1);
}

}  // namespace
}  // namespace idempotency::testing
