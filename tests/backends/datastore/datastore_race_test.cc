// DatastoreLock where a reply is lost or another client acts at an exact point of a call: a
// release whose reply never arrives, and purge_expired racing a reclaim of the same record
// from either side. The double's `after_next` plays the other client's operation between two
// REST calls of this one, so each interleaving is deterministic.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "backends/datastore/datastore_double.h"
#include "idempotency/datastore_lock.h"
#include "support/claim_matchers.h"
#include "support/test_servers.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;
using Fault = DatastoreDouble::Fault;

constexpr milliseconds kLease = std::chrono::minutes(15);

class DatastoreRaceTest : public ::testing::Test {
 protected:
  DatastoreOptions options() {
    return DatastoreOptions{.backend = {.ttl = milliseconds(1000), .clock = clock_},
                            .project = "proj",
                            .kind = kind_,
                            .endpoint = server_.endpoint(),
                            .initial_backoff = milliseconds(1),
                            .max_backoff = milliseconds(5),
                            // Generous: `after_next` runs the other client's whole operation
                            // inside this one's request, which must outlive it; a spurious
                            // timeout would add a retry and break the call counts.
                            .request_timeout = std::chrono::seconds(10)};
  }

  // A DONE record already past its expires_at: what purge_expired lists and a claim reclaims.
  void expired_record(DatastoreLock& backend, const std::string& key) {
    ASSERT_TRUE(backend.complete(won(backend.claim(key, milliseconds(100)))));
    clock_->advance(milliseconds(5000));
  }

  DatastoreDouble server_;
  std::string kind_ = unique_name("Races");
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
};

TEST_F(DatastoreRaceTest, ALostReleaseReplyIsRetriedAndAdvancesTheFenceOnce) {
  // A request timeout short enough to give up on the held reply, still far above what an
  // answered request takes; the reply is held three times as long.
  DatastoreOptions short_timeout = options();
  short_timeout.request_timeout = milliseconds(1000);
  DatastoreLock backend(short_timeout);
  // The release is applied, then its reply fails (503) or never comes (past the timeout).
  for (const Fault& lost :
       {Fault{.method = "commit", .after_apply = true},
        Fault{.method = "commit", .after_apply = true, .delay = milliseconds(3000)}}) {
    const std::string key = "orders:" + std::to_string(lost.delay.count());
    SCOPED_TRACE(key);
    const Claim claim = won(backend.claim(key, kLease));
    server_.reset_counts();
    server_.inject(lost);
    EXPECT_NO_THROW(backend.release(claim));
    EXPECT_EQ(server_.calls("commit"), 1) << "the retry found the release applied: no 2nd write";
    const auto record = backend.inspect(key);
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->state, RecordState::kClaimed);
    EXPECT_EQ(record->fence, claim.fence + 1) << "advanced once, not once per attempt";
    EXPECT_EQ(record->lease_expiry, to_millis(clock_->now())) << "the lease ended at release";
    EXPECT_FALSE(backend.complete(claim)) << "a released claim never completes";
    EXPECT_EQ(won(backend.claim(key, kLease)).fence, claim.fence + 2);
  }
}

TEST_F(DatastoreRaceTest, AReclaimBetweenThePurgesQueryAndItsDeleteSurvives) {
  DatastoreLock purger(options());
  DatastoreLock reclaimer(options());  // another instance
  expired_record(purger, "orders:1");
  std::optional<Claim> fresh;
  // The purge has listed the expired record; before it deletes, another instance reclaims it.
  server_.after_next("runQuery", [&] { fresh = won(reclaimer.claim("orders:1", kLease)); });
  EXPECT_EQ(purger.purge_expired(), 0U) << "re-checked in its transaction: not expired now";
  ASSERT_TRUE(fresh.has_value());
  EXPECT_EQ(fresh->fence, 2) << "a reclaim: fence + 1";
  held(purger.claim("orders:1", kLease));
  EXPECT_TRUE(reclaimer.complete(*fresh)) << "the reclaimed record was never deleted";
}

TEST_F(DatastoreRaceTest, AReclaimBetweenThePurgesReadAndItsCommitAbortsTheDelete) {
  DatastoreLock purger(options());
  DatastoreLock reclaimer(options());
  expired_record(purger, "orders:2");
  std::optional<Claim> fresh;
  // The purge's transaction has read the record as expired; the reclaim commits first, so
  // the purge's delete is ABORTED, and its retry reads the record live and leaves it.
  server_.after_next("lookup", [&] { fresh = won(reclaimer.claim("orders:2", kLease)); });
  server_.reset_counts();
  EXPECT_EQ(purger.purge_expired(), 0U);
  ASSERT_TRUE(fresh.has_value());
  EXPECT_EQ(fresh->fence, 2);
  EXPECT_EQ(server_.calls("beginTransaction"), 3) << "the purge's, the reclaim's, the retry's";
  held(purger.claim("orders:2", kLease));
  EXPECT_TRUE(reclaimer.complete(*fresh));
}

TEST_F(DatastoreRaceTest, APurgeBetweenAReclaimsReadAndItsCommitLeavesOneLiveClaim) {
  DatastoreLock purger(options());
  DatastoreLock reclaimer(options());
  expired_record(purger, "orders:3");
  std::size_t purged = 0;
  // The reclaim's transaction has read the expired record; the purge deletes it first, so the
  // reclaim's commit is ABORTED and its retry finds no record: a fresh one at fence 1.
  server_.after_next("lookup", [&] { purged = purger.purge_expired(); });
  const Claim claim = won(reclaimer.claim("orders:3", kLease));
  EXPECT_EQ(purged, 1U);
  EXPECT_EQ(claim.fence, 1) << "the record was gone: fence restarts (DECISIONS: timing rules)";
  const auto record = reclaimer.inspect("orders:3");
  ASSERT_TRUE(record.has_value()) << "the claim was not lost to the delete";
  EXPECT_EQ(record->state, RecordState::kClaimed);
  EXPECT_EQ(record->claim_token, claim.claim_token);
  held(purger.claim("orders:3", kLease));
  EXPECT_TRUE(reclaimer.complete(claim));
}

}  // namespace
}  // namespace idempotency::testing
