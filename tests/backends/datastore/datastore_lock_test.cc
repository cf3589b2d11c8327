// DatastoreLock beyond the contract, on the REST double: lost commit responses, ABORTED and
// transient retries, permanent errors, the key-name hash rule, the entity format, purge
// batches, the URL form, endpoint / project / token resolution.
#include "idempotency/datastore_lock.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "backends/datastore/datastore_double.h"
#include "idempotency/errors.h"
#include "idempotency/forwarding_backend.h"
#include "support/claim_matchers.h"
#include "support/log_capture.h"
#include "support/test_servers.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::Not;
using Fault = DatastoreDouble::Fault;

constexpr milliseconds kLease = std::chrono::minutes(15);

class DatastoreLockTest : public ::testing::Test {
 protected:
  DatastoreOptions options() {
    return DatastoreOptions{.backend = {.clock = clock_},
                            .project = "proj",
                            .kind = kind_,
                            .endpoint = server_.endpoint(),
                            .initial_backoff = milliseconds(1),
                            .max_backoff = milliseconds(5)};
  }
  std::unique_ptr<DatastoreLock> make() { return std::make_unique<DatastoreLock>(options()); }

  // A backend with a 1 s ttl holding `n` records named prefix + i, completed and then left
  // to expire (the clock moves 5 s on).
  std::unique_ptr<DatastoreLock> with_expired(int n, const std::string& prefix,
                                              std::size_t purge_batch_size = 500) {
    DatastoreOptions o = options();
    o.purge_batch_size = purge_batch_size;
    o.backend.ttl = milliseconds(1000);
    auto backend = std::make_unique<DatastoreLock>(o);
    for (int i = 0; i < n; ++i) {
      Claim c = won(backend->claim(prefix + std::to_string(i), milliseconds(100)));
      EXPECT_TRUE(backend->complete(c));
    }
    clock_->advance(milliseconds(5000));
    return backend;
  }

  DatastoreDouble server_;
  std::string kind_ = unique_name("Records");
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
};

// A fixed token for tests of the Authorization header.
class FixedToken final : public auth::TokenSource {
 public:
  std::string access_token() override { return "tok-123"; }
  std::string source() const override { return "fixed"; }
};

TEST_F(DatastoreLockTest, ALostCommitResponseMakesTheRetriedClaimReaffirmIt) {
  auto backend = make();
  server_.inject(Fault{.method = "commit", .after_apply = true});  // applied, reply lost (503)
  Claim c = won(backend->claim("orders:1", kLease, ClaimRequest{.claim_token = "call-1"}));
  EXPECT_EQ(c.fence, 1);
  EXPECT_EQ(c.claim_token, "call-1");
  EXPECT_EQ(server_.calls("commit"), 1);  // the retry re-affirmed: nothing written twice
  EXPECT_EQ(backend->inspect("orders:1")->fence, 1);
  held(backend->claim("orders:1", kLease));  // another call is still locked out
  EXPECT_TRUE(backend->complete(c, std::string("ok")));
}

TEST_F(DatastoreLockTest, ALostCommitResponseByTimeoutAlsoReaffirms) {
  DatastoreOptions o = options();
  o.request_timeout = milliseconds(300);
  DatastoreLock backend(o);
  server_.inject(
      Fault{.method = "commit", .after_apply = true, .delay = milliseconds(1500)});  // hangs
  Claim c = won(backend.claim("orders:2", kLease));  // a fresh token, reused internally
  EXPECT_EQ(c.fence, 1);
  EXPECT_EQ(backend.inspect("orders:2")->claim_token, c.claim_token);
}

TEST_F(DatastoreLockTest, ALostCommitResponseOnTheReclaimPathReaffirmsWithoutADoubleBump) {
  auto backend = make();
  Claim first = won(backend->claim("orders:3", milliseconds(100)));
  clock_->advance(milliseconds(200));  // the first holder's lease lapsed
  server_.inject(Fault{.method = "commit", .after_apply = true});
  Claim second = won(backend->claim("orders:3", kLease, ClaimRequest{.claim_token = "retry-me"}));
  EXPECT_EQ(second.fence, first.fence + 1);
  EXPECT_EQ(backend->inspect("orders:3")->fence, first.fence + 1);
  EXPECT_FALSE(backend->complete(first));
  EXPECT_TRUE(backend->complete(second));
}

TEST_F(DatastoreLockTest, ALostCompleteResponseStillReportsSuccess) {
  auto backend = make();
  Claim c = won(backend->claim("orders:4", kLease));
  server_.inject(Fault{.method = "commit", .after_apply = true});
  EXPECT_TRUE(backend->complete(c, std::string("receipt")));
  EXPECT_EQ(done(backend->claim("orders:4", kLease)).result, std::optional<std::string>("receipt"));
}

TEST_F(DatastoreLockTest, AnAbortedCommitIsRetried) {
  auto backend = make();
  server_.inject(Fault{.method = "commit", .count = 2, .http = 409, .status = "ABORTED"});
  Claim c = won(backend->claim("orders:5", kLease));
  EXPECT_EQ(c.fence, 1);
  EXPECT_EQ(server_.calls("beginTransaction"), 3);
  EXPECT_EQ(server_.calls("commit"), 3);
}

// TransactionOptions.ReadWrite.previousTransaction: the retry of an ABORTED transaction names
// it; a retry after another failure does not.
TEST_F(DatastoreLockTest, TheRetryOfAnAbortedTransactionNamesIt) {
  auto backend = make();
  server_.inject(Fault{.method = "commit", .count = 2, .http = 409, .status = "ABORTED"});
  (void)won(backend->claim("orders:10", kLease));
  EXPECT_EQ(server_.previous_transactions(), (std::vector<std::string>{"", "tx1", "tx2"}));
  server_.inject(Fault{.method = "commit", .http = 503, .status = "UNAVAILABLE"});
  (void)won(backend->claim("orders:11", kLease));
  EXPECT_EQ(server_.previous_transactions(), (std::vector<std::string>{"", "tx1", "tx2", "", ""}));
}

// A commit that failed may leave its transaction open, holding its locks (Firestore's
// pessimistic concurrency) until it idles out: it is rolled back, unless ABORTED ended it.
TEST_F(DatastoreLockTest, ATransactionWhoseCommitFailedIsRolledBackUnlessAborted) {
  auto backend = make();
  server_.inject(Fault{.method = "commit", .http = 503, .status = "UNAVAILABLE"});
  (void)won(backend->claim("orders:12", kLease));
  EXPECT_EQ(server_.calls("rollback"), 1);
  server_.inject(Fault{.method = "commit", .after_apply = true});  // applied, reply lost
  (void)won(backend->claim("orders:13", kLease));                  // re-affirmed on the retry
  EXPECT_EQ(server_.calls("rollback"), 3);  // the lost reply's, and the re-affirming claim's
  server_.inject(Fault{.method = "commit", .http = 409, .status = "ABORTED"});
  (void)won(backend->claim("orders:14", kLease));
  EXPECT_EQ(server_.calls("rollback"), 3);
}

TEST_F(DatastoreLockTest, TransientErrorsAreRetriedThenSucceed) {
  auto backend = make();
  server_.inject(Fault{.method = "beginTransaction", .http = 503, .status = "UNAVAILABLE"});
  server_.inject(Fault{.method = "lookup", .http = 504, .status = "DEADLINE_EXCEEDED"});
  server_.inject(Fault{.method = "lookup", .http = 500, .status = "INTERNAL"});
  server_.inject(Fault{.method = "commit", .http = 429, .status = "RESOURCE_EXHAUSTED"});
  (void)won(backend->claim("orders:6", kLease));
  EXPECT_EQ(server_.calls("commit"), 2);
}

TEST_F(DatastoreLockTest, RetriesAreBounded) {
  DatastoreOptions o = options();
  o.max_attempts = 3;
  DatastoreLock backend(o);
  server_.inject(Fault{.method = "beginTransaction", .count = 100, .message = "backend down"});
  try {
    (void)backend.claim("orders:7", kLease);
    FAIL() << "expected StoreError";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("gave up after 3 attempts"));
    EXPECT_THAT(e.what(), HasSubstr("UNAVAILABLE"));
  }
  EXPECT_EQ(server_.calls("beginTransaction"), 3);
}

TEST_F(DatastoreLockTest, AResultUpToTheLimitIsStoredAndALongerOneCompletesWithoutIt) {
  // The double refuses an entity over Datastore's 1,048,572 bytes, as Google does (400).
  auto backend = make();
  EXPECT_EQ(backend->max_result_bytes(), DatastoreLock::kMaxResultBytes);
  const std::string longest_key(1024, 'k');
  const std::string fingerprint(64, 'f');
  Claim c = won(backend->claim(longest_key, kLease, ClaimRequest{.fingerprint = fingerprint}));
  ASSERT_TRUE(backend->complete(c, std::string(DatastoreLock::kMaxResultBytes, 'r')));
  EXPECT_EQ(backend->inspect(longest_key)->result->size(), DatastoreLock::kMaxResultBytes);

  Claim big = won(backend->claim("orders:big", kLease));
  EXPECT_TRUE(backend->complete(big, std::string(DatastoreLock::kMaxResultBytes + 1, 'r')));
  const auto record = backend->inspect("orders:big");
  EXPECT_EQ(record->state, RecordState::kDone) << "done, so the work is not run again";
  EXPECT_EQ(record->result, std::nullopt);
  EXPECT_TRUE(std::holds_alternative<AlreadyDone>(backend->claim("orders:big", kLease)));
}

// A decorator that lifts the result limit, to reach the store with what it would refuse.
class Unlimited final : public ForwardingBackend {
 public:
  explicit Unlimited(LockBackend& inner) : ForwardingBackend(inner) {}

 protected:
  [[nodiscard]] std::size_t do_max_result_bytes() const noexcept override {
    return std::numeric_limits<std::size_t>::max();
  }
};

TEST_F(DatastoreLockTest, WithoutTheLimitTheEntityCountStillCompletesWithoutTheResult) {
  // What the limit guards against: Google refuses the entity (400), after the work ran, and
  // the key is claimed and the work run again after the lease. Past the core's limit, the
  // backend's own count of the entity still drops the result rather than fail the complete.
  auto backend = make();
  Unlimited unlimited(*backend);
  Claim c = won(unlimited.claim("orders:huge", kLease));
  EXPECT_TRUE(unlimited.complete(c, std::string(1'048'572, 'r')));
  const auto record = backend->inspect("orders:huge");
  EXPECT_EQ(record->state, RecordState::kDone);
  EXPECT_EQ(record->result, std::nullopt);
}

// kMaxResultBytes leaves 8 KiB for the key, claim token and fingerprint, but a fingerprint is
// the caller's and may be longer: the complete then stores the record without its result
// rather than failing after the work ran (and the work running again after the lease).
TEST_F(DatastoreLockTest, ALongFingerprintLeavesLessRoomAndTheResultIsDroppedNotTheComplete) {
  auto backend = make();
  LogCapture logs;
  const std::string fingerprint(9000, 'f');
  Claim c = won(backend->claim("orders:fp", kLease, ClaimRequest{.fingerprint = fingerprint}));
  EXPECT_TRUE(backend->complete(c, std::string(DatastoreLock::kMaxResultBytes, 'r')));
  const auto record = backend->inspect("orders:fp");
  EXPECT_EQ(record->state, RecordState::kDone) << "done, so the work is not run again";
  EXPECT_EQ(record->result, std::nullopt);
  EXPECT_EQ(record->fingerprint, std::optional<std::string>(fingerprint));
  EXPECT_EQ(logs.count("result_too_large"), 1);
  EXPECT_THAT(logs.all_text(), Not(HasSubstr("orders:fp")));
  // A result that fits beside the long fingerprint is still kept.
  Claim fits = won(backend->claim("orders:fp2", kLease, ClaimRequest{.fingerprint = fingerprint}));
  EXPECT_TRUE(backend->complete(fits, std::string(1'000'000, 'r')));
  EXPECT_EQ(backend->inspect("orders:fp2")->result->size(), 1'000'000U);
  EXPECT_EQ(logs.count("result_too_large"), 1);
}

TEST_F(DatastoreLockTest, AKeyGoogleQuotesWithEscapesNeverReachesTheMessage) {
  // Protobuf's text format, in which Google's messages may name a key: `\"`, and bytes from
  // 0x80 in octal or left as UTF-8.
  const std::string key = "orders:\"vip-42\"caf\xc3\xa9";
  for (const std::string quoted :
       {R"(orders:\"vip-42\"caf\303\251)", "orders:\\\"vip-42\\\"caf\xc3\xa9"}) {
    auto backend = make();
    server_.inject(Fault{.method = "lookup",
                         .http = 403,
                         .status = "PERMISSION_DENIED",
                         .message = "no access to name: \"" + quoted + "\"."});
    try {
      (void)backend->claim(key, kLease);
      FAIL() << "expected StoreError";
    } catch (const StoreError& e) {
      EXPECT_THAT(e.what(), HasSubstr("no access to name"));
      EXPECT_THAT(e.what(), Not(HasSubstr("vip-42")));
      EXPECT_THAT(e.what(), Not(HasSubstr("caf")));
    }
  }
}

TEST_F(DatastoreLockTest, AReplyOfTheWrongShapeIsRetriedAndThenAStoreError) {
  // A 200 whose JSON lacks what the call returns (here `transaction`): not a parser's
  // exception escaping as if the handler had failed.
  auto backend = make();
  server_.inject(Fault{.method = "beginTransaction", .http = 200});
  server_.inject(Fault{.method = "lookup", .http = 200});
  (void)won(backend->claim("orders:8", kLease));
  EXPECT_EQ(server_.calls("beginTransaction"), 3);
  DatastoreOptions o = options();
  o.max_attempts = 2;
  DatastoreLock bounded(o);
  server_.inject(Fault{.method = "beginTransaction", .count = 100, .http = 200});
  try {
    (void)bounded.claim("orders:9", kLease);
    FAIL() << "expected StoreError";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("gave up after 2 attempts"));
    EXPECT_THAT(e.what(), HasSubstr("unexpected reply"));
  }
}

TEST_F(DatastoreLockTest, ALookupReplyThatNamesNoKeyIsNeverReadAsAbsent) {
  // Read as "absent", a held key would be claimed again over its live owner.
  auto backend = make();
  (void)won(backend->claim("orders:10", kLease));
  DatastoreOptions o = options();
  o.max_attempts = 2;
  DatastoreLock other(o);
  server_.inject(Fault{.method = "lookup", .count = 100, .http = 200});
  EXPECT_THROW((void)other.claim("orders:10", kLease), StoreError);
  EXPECT_EQ(server_.calls("commit"), 1);  // the first claim's, and nothing since
}

TEST_F(DatastoreLockTest, APermanentErrorIsAStoreErrorWithGooglesStatusAndNoKey) {
  auto backend = make();
  server_.inject(Fault{.method = "lookup",
                       .http = 403,
                       .status = "PERMISSION_DENIED",
                       .message = "Missing permission on key orders:secret-42."});
  try {
    (void)backend->claim("orders:secret-42", kLease);
    FAIL() << "expected StoreError";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("403 PERMISSION_DENIED"));
    EXPECT_THAT(e.what(), HasSubstr("Missing permission on key"));
    EXPECT_THAT(e.what(), Not(HasSubstr("secret-42")));
  }
  EXPECT_EQ(server_.calls("beginTransaction"), 1);  // not retried
  EXPECT_EQ(server_.calls("rollback"), 1);          // the open transaction was abandoned
}

TEST_F(DatastoreLockTest, AnUnreachableServerIsAStoreError) {
  DatastoreOptions o = options();
  o.endpoint = "http://127.0.0.1:1";
  o.max_attempts = 2;
  DatastoreLock backend(o);
  EXPECT_THROW((void)backend.claim("k", kLease), StoreError);
}

TEST_F(DatastoreLockTest, KeysDatastoreWouldRefuseAreHashed) {
  EXPECT_EQ(datastore_key_name("orders:1"), "orders:1");
  EXPECT_EQ(datastore_key_name("üñí/ça va"), "üñí/ça va");
  for (const std::string& odd :
       {std::string("a\0b", 3), std::string("\xff\xfe"), std::string("\xc0\x80"),
        std::string("\xed\xa0\x80"), std::string("__reserved__"), std::string("sha256:x")}) {
    const std::string name = datastore_key_name(odd);
    EXPECT_EQ(name.size(), 7 + 64);
    EXPECT_EQ(name.rfind("sha256:", 0), 0U);
  }
  EXPECT_NE(datastore_key_name(std::string("a\0b", 3)), datastore_key_name(std::string("a\0c", 3)));
  EXPECT_EQ(datastore_key_name(std::string(1024, 'k')), std::string(1024, 'k'));
}

TEST_F(DatastoreLockTest, OddKeysRoundTripUnderTheirHashedName) {
  auto backend = make();
  const std::string key("order\0\xff__", 9);
  Claim c = won(backend->claim(key, kLease));
  EXPECT_TRUE(backend->complete(c, std::string("r")));
  EXPECT_TRUE(server_.entity(kind_, datastore_key_name(key)).has_value());
  EXPECT_EQ(done(backend->claim(key, kLease)).result, std::optional<std::string>("r"));
  (void)won(backend->claim("__x__", kLease));
  (void)won(backend->claim(std::string(1024, '\x80'), kLease));
}

TEST_F(DatastoreLockTest, TheEntityRoundTripsExactlyAndIndexesOnlyExpiresAt) {
  auto backend = make();
  const std::string bytes("\0\x01\xffresult", 9);
  Claim c = won(backend->claim("orders:8", kLease,
                               ClaimRequest{.claim_token = "tok\xff", .fingerprint = "fp"}));
  ASSERT_TRUE(backend->complete(c, bytes));
  const Record r = *backend->inspect("orders:8");
  EXPECT_EQ(r.state, RecordState::kDone);
  EXPECT_EQ(r.fence, 1);
  EXPECT_EQ(r.claim_token, "tok\xff");
  EXPECT_EQ(r.result, std::optional<std::string>(bytes));
  EXPECT_EQ(r.fingerprint, std::optional<std::string>("fp"));
  EXPECT_EQ(r.expires_at, to_millis(clock_->now()) + kDefaultTtl.count());
  const nlohmann::json e = *server_.entity(kind_, "orders:8");
  const auto& p = e["properties"];
  EXPECT_EQ(p["expires_at"]["timestampValue"], "2026-05-28T21:26:40.000Z");
  EXPECT_FALSE(p["expires_at"].contains("excludeFromIndexes"));
  for (const char* name : {"state", "fence", "lease_expiry_ms", "expires_at_ms", "claim_token",
                           "result", "fingerprint"}) {
    EXPECT_EQ(p[name]["excludeFromIndexes"], true) << name;
  }
  EXPECT_EQ(p["fence"]["integerValue"], "1");  // int64 travels as a JSON string
  // A result over Datastore's 1500-byte indexed limit is fine: it is not indexed.
  Claim big = won(backend->claim("orders:9", kLease));
  EXPECT_TRUE(backend->complete(big, std::string(100'000, 'x')));
}

// The proto3 JSON mapping lets bytes arrive URL-safe and unpadded; readers must accept both.
TEST_F(DatastoreLockTest, UrlSafeUnpaddedBlobValuesAreRead) {
  auto backend = make();
  const std::string bytes("\xfb\xff\xbf\xfe", 4);  // standard base64: "+/+//g=="
  Claim c = won(backend->claim("orders:12", kLease,
                               ClaimRequest{.claim_token = "t\xfb\xff", .fingerprint = bytes}));
  ASSERT_TRUE(backend->complete(c, bytes));
  server_.serve_url_safe_blobs(true);
  const Record r = *backend->inspect("orders:12");
  EXPECT_EQ(r.claim_token, "t\xfb\xff");
  EXPECT_EQ(r.result, std::optional<std::string>(bytes));
  EXPECT_EQ(r.fingerprint, std::optional<std::string>(bytes));
  EXPECT_EQ(done(backend->claim("orders:12", kLease)).result, std::optional<std::string>(bytes));
  server_.serve_url_safe_blobs(false);                           // served as stored from here on
  for (const char* bad : {"abcde", "ab=c", "a*bc", "abc==="}) {  // still not base64
    nlohmann::json e = *server_.entity(kind_, "orders:12");
    e["properties"]["result"]["blobValue"] = bad;
    server_.put(e);
    EXPECT_THROW((void)backend->inspect("orders:12"), StoreError) << bad;
  }
}

TEST_F(DatastoreLockTest, AMalformedEntityIsAStoreError) {
  auto backend = make();
  server_.put(
      {{"key",
        {{"partitionId", {{"projectId", "proj"}}}, {"path", {{{"kind", kind_}, {"name", "bad"}}}}}},
       {"properties", {{"state", {{"integerValue", "7"}}}}}});
  EXPECT_THROW((void)backend->claim("bad", kLease), StoreError);
}

TEST_F(DatastoreLockTest, PurgeDeletesExpiredRecordsInBatches) {
  auto owned = with_expired(5, "old-", 2);
  DatastoreLock& backend = *owned;
  (void)won(backend.claim("live", kLease));
  server_.reset_counts();
  EXPECT_EQ(backend.purge_expired(), 5U);
  EXPECT_EQ(server_.calls("commit"), 3);  // 2 + 2 + 1
  EXPECT_EQ(server_.entity_count(kind_), 1U);
  EXPECT_EQ(backend.purge_expired(), 0U);
  held(backend.claim("live", kLease));  // the live record survived the purge
}

// A purge is about many keys at once, and Google's errors may quote them: legacy Datastore's
// contention error lists the entity groups, a permission error the key. The purge's error
// (logged by the reclaimer every minute, printed by `idem purge-expired`) names none.
TEST_F(DatastoreLockTest, APurgesErrorNamesNoKey) {
  struct Case {
    int http;
    const char* status;
    const char* message;
  };
  for (const Case& c :
       {Case{409, "ABORTED",
             "too much contention on these datastore entities. please try again. entity groups: "
             "[(app=s~proj, Idem, \"secret-old-0\"), (app=s~proj, Idem, \"secret-old-1\")]"},
        Case{403, "PERMISSION_DENIED", "Missing permission on key secret-old-1."}}) {
    SCOPED_TRACE(c.status);
    auto owned = with_expired(2, "secret-old-");
    // As many as the purge's commits: every attempt of a retryable one, else the one.
    const int commits = c.http == 409 ? DatastoreOptions{}.max_attempts : 1;
    server_.inject(Fault{.method = "commit",
                         .count = commits,
                         .http = c.http,
                         .status = c.status,
                         .message = c.message});
    try {
      (void)owned->purge_expired();
      FAIL() << "expected StoreError";
    } catch (const StoreError& e) {
      EXPECT_THAT(e.what(), HasSubstr(c.status));
      EXPECT_THAT(e.what(), Not(HasSubstr("secret")));
    }
  }
}

// Datastore may end a batch early with moreResults NOT_FINISHED, short or empty; only
// NO_MORE_RESULTS ends the query. Here live records come first in key order, so the first
// batches are empty, and later ones stop at 3 results of the 10 asked for.
TEST_F(DatastoreLockTest, PurgePagesThroughShortAndEmptyNotFinishedBatches) {
  auto owned = with_expired(12, "b-old-", 10);
  DatastoreLock& backend = *owned;
  for (int i = 0; i < 6; ++i) (void)won(backend.claim("a-live-" + std::to_string(i), kLease));
  server_.set_query_batch_cap(3);
  server_.set_query_scan_limit(4);
  EXPECT_EQ(backend.purge_expired(), 12U);
  EXPECT_EQ(server_.entity_count(kind_), 6U);
  for (int i = 0; i < 12; ++i) EXPECT_FALSE(backend.inspect("b-old-" + std::to_string(i)));
  for (int i = 0; i < 6; ++i) held(backend.claim("a-live-" + std::to_string(i), kLease));
}

// A server whose cursor never moves would page forever; the purge gives up with a StoreError
// after a few batches that did not advance (what it deleted so far stays deleted).
TEST_F(DatastoreLockTest, PurgeGivesUpOnAQueryThatNeverAdvances) {
  DatastoreOptions o = options();
  o.backend.ttl = milliseconds(10);
  DatastoreLock backend(o);
  (void)won(backend.claim("k", milliseconds(10)));
  clock_->advance(milliseconds(100));
  server_.set_query_stalled(true);
  server_.reset_counts();
  try {
    (void)backend.purge_expired();
    FAIL() << "expected StoreError";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("did not advance"));
  }
  EXPECT_EQ(server_.calls("runQuery"), 4);  // the first batch, then 3 that did not move
  server_.set_query_stalled(false);
  EXPECT_EQ(backend.purge_expired(), 1U);
}

// The legacy Datastore emulator refuses a transaction over 25 entity groups (400, not
// retried); a purge of more expired records than that must still work there.
TEST_F(DatastoreLockTest, PurgeWorksUnderTheEmulatorsEntityGroupLimit) {
  server_.set_transaction_entity_group_limit(25);
  auto owned = with_expired(60, "old-");
  DatastoreLock& backend = *owned;
  (void)won(backend.claim("live", kLease));
  server_.reset_counts();
  EXPECT_EQ(backend.purge_expired(), 60U);
  EXPECT_EQ(server_.calls("commit"), 3);  // 25 + 25 + 10
  EXPECT_EQ(server_.entity_count(kind_), 1U);
  held(backend.claim("live", kLease));
}

TEST_F(DatastoreLockTest, PurgeLeavesOtherKindsAndNamespacesAlone) {
  DatastoreOptions o = options();
  o.backend.ttl = milliseconds(10);
  DatastoreLock a(o);
  o.namespace_id = "other";
  DatastoreLock b(o);
  Claim ca = won(a.claim("k", milliseconds(10)));
  Claim cb = won(b.claim("k", milliseconds(10)));
  clock_->advance(milliseconds(100));
  EXPECT_EQ(a.purge_expired(), 1U);
  EXPECT_TRUE(b.inspect("k").has_value());
  EXPECT_EQ(b.purge_expired(), 1U);
}

// Another program's entities in the kind (an auto-allocated id, another schema), expired by
// the same indexed property, are passed over: one of them must not stop every purge at it.
TEST_F(DatastoreLockTest, PurgePassesOverEntitiesThatAreNotRecords) {
  auto owned = with_expired(3, "old-");
  LogCapture logs;
  const nlohmann::json partition = {{"projectId", "proj"}};
  const nlohmann::json expired = {{"timestampValue", "2000-01-01T00:00:00Z"}};
  server_.put({{"key", {{"partitionId", partition}, {"path", {{{"kind", kind_}, {"id", "57"}}}}}},
               {"properties", {{"expires_at", expired}}}});
  server_.put(
      {{"key",
        {{"partitionId", partition}, {"path", {{{"kind", kind_}, {"name", "a-foreign-name"}}}}}},
       {"properties", {{"expires_at", expired}, {"note", {{"stringValue", "not a record"}}}}}});
  EXPECT_EQ(owned->purge_expired(), 3U);
  EXPECT_EQ(server_.entity_count(kind_), 2U);  // the foreign ones, left alone
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(owned->inspect("old-" + std::to_string(i)));
  EXPECT_EQ(logs.count("purge_skipped_foreign"), 1);
  EXPECT_THAT(logs.all_text(), Not(HasSubstr("a-foreign-name")));
  EXPECT_EQ(owned->purge_expired(), 0U);
  EXPECT_EQ(logs.count("purge_skipped_foreign"), 1);  // said once
}

// Datastore may defer keys of a lookup ("not looked up due to resource constraints"); they
// are looked up again in the same transaction, not the transaction retried until it gives up.
TEST_F(DatastoreLockTest, DeferredKeysAreLookedUpAgainInTheSameTransaction) {
  auto owned = with_expired(7, "old-");
  server_.set_lookup_defer_beyond(2);
  server_.reset_counts();
  EXPECT_EQ(owned->purge_expired(), 7U);
  EXPECT_EQ(server_.calls("beginTransaction"), 1);
  EXPECT_EQ(server_.calls("lookup"), 4);  // 2 + 2 + 2 + 1
  EXPECT_EQ(server_.calls("commit"), 1);
  EXPECT_EQ(server_.entity_count(kind_), 0U);
}

// A reply is read up to a bound (2 MiB per key looked up): a longer one is a StoreError at
// once, since it would be as long when asked again.
TEST_F(DatastoreLockTest, AnOverlongReplyIsAStoreErrorAndNotRetried) {
  auto backend = make();
  server_.inject(
      Fault{.method = "lookup", .http = 200, .message = std::string(std::size_t{3} << 20, 'x')});
  try {
    (void)backend->claim("orders:long", kLease);
    FAIL() << "expected StoreError";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("longer than"));
  }
  EXPECT_EQ(server_.calls("lookup"), 1);
}

TEST_F(DatastoreLockTest, TheUrlFormIsParsed) {
  DatastoreOptions o = parse_datastore_url("datastore://my-proj/tenant-a?kind=Orders&database=db2");
  EXPECT_EQ(o.project, "my-proj");
  EXPECT_EQ(o.namespace_id, "tenant-a");
  EXPECT_EQ(o.kind, "Orders");
  EXPECT_EQ(o.database, "db2");
  DatastoreOptions bare = parse_datastore_url("datastore://p");
  EXPECT_EQ(bare.project, "p");
  EXPECT_EQ(bare.namespace_id, "");
  EXPECT_EQ(bare.kind, "IdempotencyRecord");
  EXPECT_THROW((void)parse_datastore_url("redis://x"), std::invalid_argument);
  EXPECT_THROW((void)parse_datastore_url("datastore://p?colour=red"), std::invalid_argument);
  EXPECT_THROW((void)parse_datastore_url("datastore://p/a/b"), std::invalid_argument);
}

TEST_F(DatastoreLockTest, ANamedDatabaseIsAddressed) {
  DatastoreOptions o = options();
  o.database = "db2";
  DatastoreLock backend(o);
  (void)won(backend.claim("k", kLease));
  EXPECT_EQ((*server_.entity(kind_, "k"))["key"]["partitionId"]["databaseId"], "db2");
}

// Accepts one HTTP request on 127.0.0.1, keeps its head exactly as sent, and answers 400
// INVALID_ARGUMENT. (The double cannot show how a header value was encoded: cpp-httplib
// percent-decodes header values as it parses them.)
class RawRequestCapture {
 public:
  RawRequestCapture() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), size) != 0 ||
        ::listen(fd_, 1) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &size)) {
      throw std::runtime_error("RawRequestCapture: cannot listen");
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve_one(); });
  }
  ~RawRequestCapture() {
    ::shutdown(fd_, SHUT_RDWR);  // wakes accept() if no request came
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  RawRequestCapture(const RawRequestCapture&) = delete;
  RawRequestCapture& operator=(const RawRequestCapture&) = delete;

  [[nodiscard]] std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  /// head() waits for the request and returns its request line and header lines.
  std::string head() {
    if (thread_.joinable()) thread_.join();
    return head_;
  }

 private:
  void serve_one() {
    const int c = ::accept(fd_, nullptr, nullptr);
    if (c < 0) return;
    std::string got;
    char buf[4096];
    std::size_t end = std::string::npos;
    while ((end = got.find("\r\n\r\n")) == std::string::npos) {
      const auto n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<std::size_t>(n));
    }
    head_ = got.substr(0, end);
    const std::string body =
        R"({"error":{"code":400,"status":"INVALID_ARGUMENT","message":"captured"}})";
    const std::string reply =
        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    (void)::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
    ::shutdown(c, SHUT_WR);
    while (::recv(c, buf, sizeof buf, 0) > 0) {
    }
    ::close(c);
  }

  int fd_;
  int port_ = 0;
  std::thread thread_;
  std::string head_;
};

// x-goog-request-params is a URL query string: its values are percent-encoded (a
// domain-scoped project id such as "example.com:proj" holds a ':').
TEST_F(DatastoreLockTest, TheRoutingHeaderValuesArePercentEncoded) {
  RawRequestCapture capture;
  DatastoreOptions o = options();
  o.endpoint = capture.endpoint();
  o.project = "example.com:proj";
  o.database = "db-2";
  {
    DatastoreLock backend(o);
    EXPECT_THROW((void)backend.claim("k", kLease), StoreError);  // the capture answers 400
  }
  EXPECT_THAT(capture.head(), HasSubstr("\r\nx-goog-request-params: project_id=example.com%3Aproj"
                                        "&database_id=db-2\r\n"));
  // The double (which sees decoded values) serves such a project end to end.
  o.endpoint = server_.endpoint();
  DatastoreLock backend(o);
  (void)won(backend.claim("k", kLease));
  EXPECT_EQ(server_.last_header("x-goog-request-params"),
            "project_id=example.com:proj&database_id=db-2");
  EXPECT_EQ((*server_.entity(kind_, "k"))["key"]["partitionId"]["projectId"], "example.com:proj");
}

// The API refuses the default database's display name; the URL and the options accept it.
TEST_F(DatastoreLockTest, TheDefaultDatabaseByNameIsTheDefaultDatabase) {
  EXPECT_EQ(parse_datastore_url("datastore://p?database=(default)").database, "");
  DatastoreOptions o = options();
  o.database = "(default)";
  DatastoreLock backend(o);
  (void)won(backend.claim("k", kLease));
  const auto entity = server_.entity(kind_, "k");
  ASSERT_TRUE(entity.has_value());
  EXPECT_EQ((*entity)["key"]["partitionId"].value("databaseId", ""), "");
}

TEST_F(DatastoreLockTest, BadOptionsAreRejected) {
  DatastoreOptions o = options();
  o.kind = "__kind__";
  EXPECT_THROW(DatastoreLock{o}, std::invalid_argument);
  o = options();
  o.max_attempts = 0;
  EXPECT_THROW(DatastoreLock{o}, std::invalid_argument);
  o = options();
  o.purge_batch_size = 501;
  EXPECT_THROW(DatastoreLock{o}, std::invalid_argument);
}

TEST_F(DatastoreLockTest, CredentialsAreSentAsABearerToken) {
  server_.require_token("tok-123");
  DatastoreOptions o = options();
  o.max_attempts = 1;
  {
    DatastoreLock anonymous(o);
    try {
      (void)anonymous.claim("k", kLease);
      FAIL() << "expected StoreError";
    } catch (const StoreError& e) {
      EXPECT_THAT(e.what(), HasSubstr("401 UNAUTHENTICATED"));
    }
  }
  o.credentials = std::make_shared<FixedToken>();
  DatastoreLock authed(o);
  (void)won(authed.claim("k", kLease));
  EXPECT_EQ(server_.last_header("x-goog-user-project"), "");
}

// The first token it hands out is refused by the double, every later one accepted: a token
// revoked, or judged expired by a clock that differs from Google's, while still cached.
class FirstTokenRefused final : public auth::TokenSource {
 public:
  std::string access_token() override { return ++handed_out == 1 ? "tok-1" : "tok-2"; }
  std::string source() const override { return "first refused"; }
  std::atomic<int> handed_out{0};
};

TEST_F(DatastoreLockTest, ARefusedTokenIsReplacedAndTheCallSentOnceMore) {
  server_.require_token("tok-2");
  auto source = std::make_shared<FirstTokenRefused>();
  DatastoreOptions o = options();
  o.credentials = source;
  DatastoreLock backend(o);
  (void)won(backend.claim("orders:401", kLease));
  EXPECT_EQ(server_.calls("beginTransaction"), 2);  // the refused one, then once more
  EXPECT_EQ(server_.last_header("authorization"), "Bearer tok-2");
}

TEST_F(DatastoreLockTest, ATokenRefusedAgainIsAStoreErrorAfterOneRetry) {
  server_.require_token("tok-other");
  DatastoreOptions o = options();
  o.credentials = std::make_shared<FixedToken>();
  DatastoreLock backend(o);
  try {
    (void)backend.claim("k", kLease);
    FAIL() << "expected StoreError";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("401 UNAUTHENTICATED"));
  }
  EXPECT_EQ(server_.calls("beginTransaction"), 2);  // bounded: sent once more, no further
}

// Credentials that name a quota project (gcloud's user credentials) bill API calls to it.
TEST_F(DatastoreLockTest, AQuotaProjectIsSentAsXGoogUserProject) {
  class BilledToken final : public auth::TokenSource {
   public:
    std::string access_token() override { return "tok-123"; }
    std::string source() const override { return "billed"; }
    std::string quota_project() const override { return "billed-project"; }
  };
  DatastoreOptions o = options();
  o.credentials = std::make_shared<BilledToken>();
  DatastoreLock backend(o);
  (void)won(backend.claim("k", kLease));
  EXPECT_EQ(server_.last_header("x-goog-user-project"), "billed-project");
}

// Environment variables are process-wide; these tests set and restore them.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;  // NOLINT(concurrency-mt-unsafe)
    ::setenv(name, value.c_str(), 1);                     // NOLINT(concurrency-mt-unsafe)
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
    } else {
      ::unsetenv(name_);  // NOLINT(concurrency-mt-unsafe)
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST_F(DatastoreLockTest, TheEmulatorHostAndProjectComeFromTheEnvironment) {
  ScopedEnv host("DATASTORE_EMULATOR_HOST", server_.endpoint().substr(7));
  ScopedEnv project("GOOGLE_CLOUD_PROJECT", "env-proj");
  DatastoreLock backend(DatastoreOptions{.backend = {.clock = clock_}, .kind = kind_});
  EXPECT_EQ(backend.project(), "env-proj");
  (void)won(backend.claim("k", kLease));
  EXPECT_EQ((*server_.entity(kind_, "k"))["key"]["partitionId"]["projectId"], "env-proj");
}

TEST_F(DatastoreLockTest, NoProjectAnywhereIsAStoreErrorNamingTheSources) {
  ScopedEnv host("DATASTORE_EMULATOR_HOST", server_.endpoint().substr(7));
  ScopedEnv project("GOOGLE_CLOUD_PROJECT", "");
  ScopedEnv emulator_project("DATASTORE_PROJECT_ID", "");
  ScopedEnv metadata("GCE_METADATA_HOST", "127.0.0.1:1");
  try {
    DatastoreLock backend(DatastoreOptions{.kind = kind_});
    FAIL() << "expected StoreError";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("GOOGLE_CLOUD_PROJECT"));
    EXPECT_THAT(e.what(), HasSubstr("metadata server"));
  }
}

}  // namespace
}  // namespace idempotency::testing
