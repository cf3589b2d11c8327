// The pure transition function, row by row against the seed's transition table, with the
// whole resulting record checked (the contract suite checks backends through answers).
#include "idempotency/record.h"

#include <gtest/gtest.h>

namespace idempotency {
namespace {

constexpr Millis kNow = 1'000'000;
constexpr Millis kLease = 100;
constexpr Millis kTtl = 1000;

Record claimed(std::int64_t fence, Millis lease_expiry, Millis expires_at,
               std::string token = "t1") {
  Record r;
  r.state = RecordState::kClaimed;
  r.fence = fence;
  r.lease_expiry = lease_expiry;
  r.expires_at = expires_at;
  r.claim_token = std::move(token);
  return r;
}

Record done_record(std::int64_t fence, Millis expires_at, std::optional<std::string> result) {
  Record r = claimed(fence, kNow - 1, expires_at);
  r.state = RecordState::kDone;
  r.result = std::move(result);
  return r;
}

ClaimOp claim_op(std::string token = "t2") { return ClaimOp{std::move(token), kLease, kTtl, "fp"}; }

TEST(Transition, AbsentClaimWinsAtFenceOne) {
  Transition t = transition(std::nullopt, claim_op(), kNow);
  EXPECT_EQ(t.answer.claim, ClaimAnswer::kWon);
  EXPECT_TRUE(t.changed);
  Record want = claimed(1, kNow + kLease, kNow + kLease + kTtl, "t2");
  want.fingerprint = "fp";
  EXPECT_EQ(*t.record, want);
}

TEST(Transition, ClaimedLiveLeaseIsHeldByOtherUnchanged) {
  const Record r = claimed(3, kNow + 1, kNow + 5000);
  Transition t = transition(r, claim_op(), kNow);
  EXPECT_EQ(t.answer.claim, ClaimAnswer::kHeldByOther);
  EXPECT_FALSE(t.changed);
  EXPECT_EQ(*t.record, r);
}

TEST(Transition, ClaimedLapsedLeaseIsReclaimedWithFencePlusOne) {
  const Record r = claimed(3, kNow, kNow + 5000);
  Transition t = transition(r, claim_op(), kNow);
  EXPECT_EQ(t.answer.claim, ClaimAnswer::kWon);
  Record want = claimed(4, kNow + kLease, kNow + kLease + kTtl, "t2");
  want.fingerprint = "fp";
  EXPECT_EQ(*t.record, want);
}

TEST(Transition, CompleteWithMatchingFenceMarksDoneWithoutALeaseGuard) {
  const Record r = claimed(3, kNow - 500, kNow + 5000);  // lease long lapsed
  Transition t = transition(r, CompleteOp{3, "bytes", kTtl}, kNow);
  EXPECT_TRUE(t.answer.ok);
  Record want = r;
  want.state = RecordState::kDone;
  want.result = "bytes";
  want.expires_at = kNow + kTtl;
  EXPECT_EQ(*t.record, want);
}

TEST(Transition, CompleteWithStaleFenceIsRefusedUnchanged) {
  const Record r = claimed(3, kNow + 10, kNow + 5000);
  Transition t = transition(r, CompleteOp{2, "bytes", kTtl}, kNow);
  EXPECT_FALSE(t.answer.ok);
  EXPECT_FALSE(t.changed);
  EXPECT_EQ(*t.record, r);
}

TEST(Transition, ReleaseWithMatchingFenceExpiresLeaseAndAdvancesFence) {
  const Record r = claimed(3, kNow + 10, kNow + 5000);
  Transition t = transition(r, ReleaseOp{3, kTtl}, kNow);
  EXPECT_TRUE(t.answer.ok);
  Record want = r;
  want.fence = 4;
  want.lease_expiry = kNow;
  want.claim_token.clear();
  EXPECT_EQ(*t.record, want);
}

TEST(Transition, ReleaseKeepsTheRecordAtLeastATtlLonger) {
  const Record r = claimed(3, kNow - 10, kNow + 5);
  Transition t = transition(r, ReleaseOp{3, kTtl}, kNow);
  EXPECT_EQ(t.record->expires_at, kNow + kTtl);
}

TEST(Transition, ReleaseWithStaleFenceIsANoOp) {
  const Record r = claimed(3, kNow + 10, kNow + 5000);
  Transition t = transition(r, ReleaseOp{1, kTtl}, kNow);
  EXPECT_FALSE(t.changed);
  EXPECT_EQ(*t.record, r);
}

TEST(Transition, DoneWithinTtlIsAlreadyDoneUnchanged) {
  const Record r = done_record(3, kNow + 1, "bytes");
  Transition t = transition(r, claim_op(), kNow);
  EXPECT_EQ(t.answer.claim, ClaimAnswer::kAlreadyDone);
  EXPECT_FALSE(t.changed);
}

TEST(Transition, DonePastTtlIsReclaimedWithFencePlusOne) {
  const Record r = done_record(3, kNow, "bytes");
  Transition t = transition(r, claim_op(), kNow);
  EXPECT_EQ(t.answer.claim, ClaimAnswer::kWon);
  EXPECT_EQ(t.record->fence, 4);
  EXPECT_EQ(t.record->state, RecordState::kClaimed);
  EXPECT_EQ(t.record->result, std::nullopt) << "a new claim carries no old result";
}

TEST(Transition, DoneAnswersCompleteTrueForItsOwnFenceOnly) {
  const Record r = done_record(3, kNow + 100, "first");
  Transition own = transition(r, CompleteOp{3, "second", kTtl}, kNow);
  EXPECT_TRUE(own.answer.ok);
  EXPECT_FALSE(own.changed);
  EXPECT_EQ(own.record->result, std::optional<std::string>("first"));
  EXPECT_FALSE(transition(r, CompleteOp{4, "x", kTtl}, kNow).answer.ok);
}

TEST(Transition, DoneIgnoresRelease) {
  const Record r = done_record(3, kNow + 100, "first");
  Transition t = transition(r, ReleaseOp{3, kTtl}, kNow);
  EXPECT_FALSE(t.changed);
  EXPECT_EQ(*t.record, r);
}

TEST(Transition, ARetriedClaimWithItsOwnTokenReaffirms) {
  const Record r = claimed(3, kNow + 10, kNow + 5000, "mine");
  Transition t = transition(r, claim_op("mine"), kNow);
  EXPECT_EQ(t.answer.claim, ClaimAnswer::kWon);
  EXPECT_FALSE(t.changed);
  EXPECT_EQ(*t.record, r);
}

// Issue 11, defect 1: a token re-affirms only the live claim it made.

TEST(Transition, ATokenWhoseLeaseLapsedReclaimsWithFencePlusOneInsteadOfReaffirming) {
  const Record r = claimed(3, kNow, kNow + 5000, "mine");  // now == lease_expiry: lapsed
  Transition t = transition(r, claim_op("mine"), kNow);
  EXPECT_EQ(t.answer.claim, ClaimAnswer::kWon);
  EXPECT_TRUE(t.changed) << "a lapsed claim is reclaimed, not re-affirmed";
  Record want = claimed(4, kNow + kLease, kNow + kLease + kTtl, "mine");
  want.fingerprint = "fp";
  EXPECT_EQ(*t.record, want);
  EXPECT_FALSE(transition(*t.record, CompleteOp{3, std::nullopt, kTtl}, kNow).answer.ok);
}

TEST(Transition, ReleaseClearsTheClaimToken) {
  const Record r = claimed(3, kNow + 10, kNow + 5000, "mine");
  Transition t = transition(r, ReleaseOp{3, kTtl}, kNow);
  EXPECT_EQ(t.record->claim_token, "") << "a released claim has no token to re-affirm";
}

TEST(Transition, AReleasedClaimIsNeverReaffirmedByItsToken) {
  const Record released =
      *transition(claimed(3, kNow + 10, kNow + 5000, "mine"), ReleaseOp{3, kTtl}, kNow).record;
  // The same token after the release: the normal reclaim path, fence 4 -> 5, a live lease.
  Transition t = transition(released, claim_op("mine"), kNow);
  EXPECT_EQ(t.answer.claim, ClaimAnswer::kWon);
  EXPECT_TRUE(t.changed);
  EXPECT_EQ(t.record->fence, 5);
  EXPECT_EQ(t.record->lease_expiry, kNow + kLease);
  EXPECT_FALSE(transition(*t.record, CompleteOp{4, std::nullopt, kTtl}, kNow).answer.ok)
      << "the released record's fence must never complete";
  // Even a clock that stepped back before the release instant finds nothing to re-affirm.
  EXPECT_EQ(transition(released, claim_op("mine"), kNow - 1).answer.claim,
            ClaimAnswer::kHeldByOther);
}

TEST(Transition, ATokenPastExpiresAtReclaimsWithFencePlusOne) {
  const Record r = claimed(3, kNow - 10, kNow, "mine");
  Transition t = transition(r, claim_op("mine"), kNow);
  EXPECT_EQ(t.answer.claim, ClaimAnswer::kWon);
  EXPECT_TRUE(t.changed);
  EXPECT_EQ(t.record->fence, 4);
  EXPECT_EQ(t.record->lease_expiry, kNow + kLease);
}

TEST(Transition, AnEmptyTokenNeverReaffirms) {
  const Record r = claimed(3, kNow + 10, kNow + 5000, "");
  EXPECT_EQ(transition(r, claim_op(""), kNow).answer.claim, ClaimAnswer::kHeldByOther);
}

TEST(Transition, ARecordPastExpiresAtAnswersCompleteAndReleaseAsAbsent) {
  const Record r = claimed(3, kNow - 10, kNow);
  EXPECT_FALSE(transition(r, CompleteOp{3, std::nullopt, kTtl}, kNow).answer.ok);
  EXPECT_FALSE(transition(r, ReleaseOp{3, kTtl}, kNow).changed);
}

TEST(Transition, ExtendOnALiveClaimMovesTheLeaseAndKeepsTheRecordBeyondIt) {
  const Record r = claimed(3, kNow + 10, kNow + 50, "mine");
  Transition t = transition(r, ExtendOp{3, "mine", kLease, kTtl}, kNow);
  EXPECT_TRUE(t.answer.ok);
  EXPECT_TRUE(t.changed);
  Record want = r;
  want.lease_expiry = kNow + kLease;
  want.expires_at = kNow + kLease + kTtl;
  EXPECT_EQ(*t.record, want) << "only the two instants move: fence, token, state stay";
}

TEST(Transition, ExtendNeverShortensTheRecordsLife) {
  const Record r = claimed(3, kNow + 10, kNow + 50'000);
  Transition t = transition(r, ExtendOp{3, "t1", kLease, kTtl}, kNow);
  EXPECT_TRUE(t.answer.ok);
  EXPECT_EQ(t.record->expires_at, kNow + 50'000);
  EXPECT_EQ(t.record->lease_expiry, kNow + kLease);
}

TEST(Transition, ExtendAfterTheLeaseLapsedStillHoldsWhenNobodyReclaimed) {
  const Record r = claimed(3, kNow - 10, kNow + 5000);
  Transition t = transition(r, ExtendOp{3, "t1", kLease, kTtl}, kNow);
  EXPECT_TRUE(t.answer.ok) << "the fence says it is still the only holder";
  EXPECT_EQ(t.record->lease_expiry, kNow + kLease);
  EXPECT_EQ(transition(*t.record, claim_op(), kNow).answer.claim, ClaimAnswer::kHeldByOther);
}

TEST(Transition, ExtendWithAStaleFenceIsRefusedUnchanged) {
  const Record r = claimed(4, kNow + 10, kNow + 5000);
  Transition t = transition(r, ExtendOp{3, "t1", kLease, kTtl}, kNow);
  EXPECT_FALSE(t.answer.ok);
  EXPECT_FALSE(t.changed);
  EXPECT_EQ(*t.record, r);
}

TEST(Transition, ExtendWithAnotherClaimsTokenIsRefusedUnchanged) {
  const Record r = claimed(3, kNow + 10, kNow + 5000, "mine");
  EXPECT_FALSE(transition(r, ExtendOp{3, "theirs", kLease, kTtl}, kNow).answer.ok);
  EXPECT_FALSE(transition(r, ExtendOp{3, "", kLease, kTtl}, kNow).answer.ok);
  EXPECT_FALSE(transition(r, ExtendOp{3, "", kLease, kTtl}, kNow).changed);
}

TEST(Transition, ExtendAfterReleaseIsRefused) {
  const Record released =
      *transition(claimed(3, kNow + 10, kNow + 5000), ReleaseOp{3, kTtl}, kNow).record;
  EXPECT_FALSE(transition(released, ExtendOp{3, "t1", kLease, kTtl}, kNow).answer.ok);
  EXPECT_FALSE(transition(released, ExtendOp{4, "t1", kLease, kTtl}, kNow).answer.ok)
      << "nobody holds the fence a release advanced to";
}

TEST(Transition, ExtendOnDoneOrExpiredOrAbsentIsRefusedUnchanged) {
  const Record done = done_record(3, kNow + 5000, "r");
  EXPECT_FALSE(transition(done, ExtendOp{3, "t1", kLease, kTtl}, kNow).answer.ok);
  EXPECT_FALSE(transition(done, ExtendOp{3, "t1", kLease, kTtl}, kNow).changed);
  const Record expired = claimed(3, kNow - 10, kNow);
  EXPECT_FALSE(transition(expired, ExtendOp{3, "t1", kLease, kTtl}, kNow).answer.ok);
  EXPECT_FALSE(transition(expired, ExtendOp{3, "t1", kLease, kTtl}, kNow).changed);
  Transition absent = transition(std::nullopt, ExtendOp{1, "t1", kLease, kTtl}, kNow);
  EXPECT_FALSE(absent.answer.ok);
  EXPECT_FALSE(absent.record.has_value());
}

TEST(Transition, ARetriedExtendWhoseReplyWasLostSucceedsAgain) {
  const Record r = claimed(3, kNow + 10, kNow + 5000);
  const Record once = *transition(r, ExtendOp{3, "t1", kLease, kTtl}, kNow).record;
  Transition again = transition(once, ExtendOp{3, "t1", kLease, kTtl}, kNow);
  EXPECT_TRUE(again.answer.ok);
  EXPECT_FALSE(again.changed) << "the same instant: nothing left to write";
  EXPECT_TRUE(transition(once, ExtendOp{3, "t1", kLease, kTtl}, kNow + 5).answer.ok);
}

TEST(Transition, IsPure) {
  const Record r = claimed(3, kNow + 10, kNow + 5000);
  EXPECT_EQ(transition(r, claim_op(), kNow).record, transition(r, claim_op(), kNow).record);
}

}  // namespace
}  // namespace idempotency
