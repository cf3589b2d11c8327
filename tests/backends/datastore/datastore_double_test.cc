// The Datastore REST double's own tests: it must keep the semantics the backend relies on
// (versions, optimistic transactions that ABORT, lookups, keys-only queries on an indexed
// property, deletes) and inject the faults the backend tests script.
#include "backends/datastore/datastore_double.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <string>
#include <vector>

namespace idempotency::testing {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;

class DatastoreDoubleTest : public ::testing::Test {
 protected:
  struct Result {
    int status = 0;
    Json body;
  };

  Result call(const std::string& method, const Json& body) {
    httplib::Client client(server_.endpoint());
    client.set_read_timeout(5, 0);
    auto r = client.Post("/v1/projects/p:" + method, body.dump(), "application/json");
    if (!r) return Result{0, Json()};
    return Result{r->status, Json::parse(r->body)};
  }

  static Json key(const std::string& name, const std::string& kind = "K") {
    return {{"partitionId", {{"projectId", "p"}}}, {"path", {{{"kind", kind}, {"name", name}}}}};
  }
  static Json entity(const std::string& name, const std::string& ts, bool indexed = true) {
    Json v = {{"timestampValue", ts}};
    if (!indexed) v["excludeFromIndexes"] = true;
    return {{"key", key(name)}, {"properties", {{"expires_at", v}}}};
  }
  std::string begin() { return call("beginTransaction", Json::object()).body["transaction"]; }
  Result lookup(const std::string& tx, const std::string& name) {
    return call("lookup", {{"readOptions", {{"transaction", tx}}}, {"keys", {key(name)}}});
  }
  Result commit(const std::string& tx, const Json& mutations) {
    return call("commit",
                {{"mode", "TRANSACTIONAL"}, {"transaction", tx}, {"mutations", mutations}});
  }
  Result upsert(const Json& e) { return commit(begin(), {{{"upsert", e}}}); }
  Result query(const std::string& ts, int limit, const std::string& cursor = "") {
    Json q = {{"kind", {{{"name", "K"}}}},
              {"projection", {{{"property", {{"name", "__key__"}}}}}},
              {"filter",
               {{"propertyFilter",
                 {{"property", {{"name", "expires_at"}}},
                  {"op", "LESS_THAN_OR_EQUAL"},
                  {"value", {{"timestampValue", ts}}}}}}},
              {"limit", limit}};
    if (!cursor.empty()) q["startCursor"] = cursor;
    return call("runQuery", {{"partitionId", {{"projectId", "p"}}}, {"query", q}});
  }

  DatastoreDouble server_;
};

TEST_F(DatastoreDoubleTest, LookupFindsWhatACommitWroteWithARisingVersion) {
  const std::string tx = begin();
  Result miss = lookup(tx, "a");
  ASSERT_EQ(miss.status, 200);
  EXPECT_EQ(miss.body["missing"].size(), 1U);
  ASSERT_EQ(commit(tx, {{{"upsert", entity("a", "2026-01-01T00:00:00.000Z")}}}).status, 200);
  Result hit = lookup(begin(), "a");
  ASSERT_EQ(hit.body["found"].size(), 1U);
  const auto v1 = std::stoll(hit.body["found"][0]["version"].get<std::string>());
  ASSERT_EQ(upsert(entity("a", "2026-01-02T00:00:00.000Z")).status, 200);
  const auto v2 = std::stoll(lookup(begin(), "a").body["found"][0]["version"].get<std::string>());
  EXPECT_GT(v2, v1);
}

TEST_F(DatastoreDoubleTest, AConflictingConcurrentCommitIsAborted) {
  const std::string t1 = begin();
  const std::string t2 = begin();
  (void)lookup(t1, "a");
  (void)lookup(t2, "a");
  EXPECT_EQ(commit(t1, {{{"upsert", entity("a", "2026-01-01T00:00:00Z")}}}).status, 200);
  Result lost = commit(t2, {{{"upsert", entity("a", "2026-01-01T00:00:00Z")}}});
  EXPECT_EQ(lost.status, 409);
  EXPECT_EQ(lost.body["error"]["status"], "ABORTED");
}

TEST_F(DatastoreDoubleTest, TransactionsOnDifferentEntitiesBothCommit) {
  const std::string t1 = begin();
  const std::string t2 = begin();
  (void)lookup(t1, "a");
  (void)lookup(t2, "b");
  EXPECT_EQ(commit(t1, {{{"upsert", entity("a", "2026-01-01T00:00:00Z")}}}).status, 200);
  EXPECT_EQ(commit(t2, {{{"upsert", entity("b", "2026-01-01T00:00:00Z")}}}).status, 200);
}

TEST_F(DatastoreDoubleTest, ARolledBackOrCommittedTransactionCannotCommit) {
  const std::string tx = begin();
  EXPECT_EQ(call("rollback", {{"transaction", tx}}).status, 200);
  EXPECT_EQ(commit(tx, Json::array()).status, 400);
  const std::string done = begin();
  EXPECT_EQ(commit(done, Json::array()).status, 200);
  EXPECT_EQ(commit(done, Json::array()).status, 400);
}

TEST_F(DatastoreDoubleTest, DeletesRemoveEntities) {
  ASSERT_EQ(upsert(entity("a", "2026-01-01T00:00:00Z")).status, 200);
  ASSERT_EQ(commit(begin(), {{{"delete", key("a")}}}).status, 200);
  EXPECT_EQ(server_.entity_count("K"), 0U);
}

TEST_F(DatastoreDoubleTest, KeysOnlyQueriesFilterPageAndSkipUnindexedProperties) {
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(upsert(entity("old" + std::to_string(i), "2026-01-01T00:00:00.5Z")).status, 200);
  }
  ASSERT_EQ(upsert(entity("new", "2026-06-01T00:00:00Z")).status, 200);
  ASSERT_EQ(upsert(entity("hidden", "2020-01-01T00:00:00Z", /*indexed=*/false)).status, 200);
  Result page1 = query("2026-01-01T00:00:00.500Z", 3);
  ASSERT_EQ(page1.status, 200);
  EXPECT_EQ(page1.body["batch"]["entityResults"].size(), 3U);
  EXPECT_FALSE(page1.body["batch"]["entityResults"][0]["entity"].contains("properties"));
  EXPECT_EQ(page1.body["batch"]["moreResults"], "MORE_RESULTS_AFTER_LIMIT");
  Result page2 = query("2026-01-01T00:00:00.500Z", 3, page1.body["batch"]["endCursor"]);
  EXPECT_EQ(page2.body["batch"]["entityResults"].size(), 2U);
  EXPECT_EQ(page2.body["batch"]["moreResults"], "NO_MORE_RESULTS");
  EXPECT_EQ(query("2026-01-01T00:00:00.499Z", 10).body["batch"]["entityResults"].size(), 0U);
}

TEST_F(DatastoreDoubleTest, CappedAndScanLimitedQueriesStopEarlyButPageThroughEverything) {
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(upsert(entity("a" + std::to_string(i), "2026-06-01T00:00:00Z")).status, 200);
  }
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(upsert(entity("b" + std::to_string(i), "2026-01-01T00:00:00Z")).status, 200);
  }
  server_.set_query_batch_cap(2);
  server_.set_query_scan_limit(3);
  Result first = query("2026-01-02T00:00:00Z", 10);  // a0..a2 examined, none match
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(first.body["batch"]["entityResults"].size(), 0U);
  EXPECT_EQ(first.body["batch"]["moreResults"], "NOT_FINISHED");
  std::vector<std::string> seen;
  std::string cursor = first.body["batch"]["endCursor"];
  for (int page = 0; page < 10; ++page) {
    const Json batch = query("2026-01-02T00:00:00Z", 10, cursor).body["batch"];
    EXPECT_LE(batch["entityResults"].size(), 2U);
    for (const auto& r : batch["entityResults"])
      seen.push_back(r["entity"]["key"]["path"][0]["name"]);
    if (batch["moreResults"] == "NO_MORE_RESULTS") break;
    EXPECT_EQ(batch["moreResults"], "NOT_FINISHED");
    ASSERT_NE(batch["endCursor"], cursor);
    cursor = batch["endCursor"];
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"b0", "b1", "b2", "b3", "b4"}));
  server_.set_query_stalled(true);
  const Json stalled = query("2026-01-02T00:00:00Z", 10, cursor).body["batch"];
  EXPECT_EQ(stalled.value("entityResults", Json::array()).size(), 0U);
  EXPECT_EQ(stalled["moreResults"], "NOT_FINISHED");
  EXPECT_EQ(stalled["endCursor"], cursor);
}

TEST_F(DatastoreDoubleTest, TheEmulatorsEntityGroupLimitRefusesLargeTransactions) {
  server_.set_transaction_entity_group_limit(3);
  auto keys = [](int from, int to) {
    Json out = Json::array();
    for (int i = from; i < to; ++i) out.push_back(key("k" + std::to_string(i)));
    return out;
  };
  const std::string small = begin();
  EXPECT_EQ(
      call("lookup", {{"readOptions", {{"transaction", small}}}, {"keys", keys(0, 3)}}).status,
      200);
  EXPECT_EQ(commit(small, {{{"delete", key("k0")}}}).status, 200);
  Result big = call("lookup", {{"readOptions", {{"transaction", begin()}}}, {"keys", keys(0, 4)}});
  EXPECT_EQ(big.status, 400);
  EXPECT_EQ(big.body["error"]["status"], "INVALID_ARGUMENT");
  EXPECT_EQ(big.body["error"]["message"],
            "operating on too many entity groups in a single transaction.");
  const std::string reads = begin();
  ASSERT_EQ(
      call("lookup", {{"readOptions", {{"transaction", reads}}}, {"keys", keys(0, 2)}}).status,
      200);
  EXPECT_EQ(commit(reads, {{{"delete", key("k2")}}, {{"delete", key("k3")}}}).status, 400);
  EXPECT_EQ(call("lookup", {{"keys", keys(0, 10)}}).status, 200);  // outside a transaction
}

TEST_F(DatastoreDoubleTest, BeginTransactionRecordsThePreviousTransaction) {
  (void)begin();
  (void)call("beginTransaction",
             {{"transactionOptions", {{"readWrite", {{"previousTransaction", "tx1"}}}}}});
  EXPECT_EQ(server_.previous_transactions(), (std::vector<std::string>{"", "tx1"}));
}

TEST_F(DatastoreDoubleTest, LookupsCanServeBlobsUrlSafeAndUnpadded) {
  Json e = entity("a", "2026-01-01T00:00:00Z");
  e["properties"]["b"] = {{"blobValue", "+/+//g=="}, {"excludeFromIndexes", true}};
  ASSERT_EQ(upsert(e).status, 200);
  EXPECT_EQ(lookup(begin(), "a").body["found"][0]["entity"]["properties"]["b"]["blobValue"],
            "+/+//g==");
  server_.serve_url_safe_blobs(true);
  EXPECT_EQ(lookup(begin(), "a").body["found"][0]["entity"]["properties"]["b"]["blobValue"],
            "-_-__g");
}

TEST_F(DatastoreDoubleTest, LookupsCanDeferKeysBeyondAFew) {
  ASSERT_EQ(upsert(entity("a", "2026-01-01T00:00:00Z")).status, 200);
  server_.set_lookup_defer_beyond(1);
  const Result r = call("lookup", {{"keys", {key("a"), key("b"), key("c")}}});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body["found"].size(), 1U);
  EXPECT_FALSE(r.body.contains("missing"));
  ASSERT_EQ(r.body["deferred"].size(), 2U);
  EXPECT_EQ(r.body["deferred"][0], key("b"));
}

TEST_F(DatastoreDoubleTest, KeysWithAnIdAreStoredApartFromNames) {
  server_.put(
      {{"key", {{"partitionId", {{"projectId", "p"}}}, {"path", {{{"kind", "K"}, {"id", "7"}}}}}},
       {"properties", Json::object()}});
  EXPECT_EQ(server_.entity_count("K"), 1U);
  EXPECT_FALSE(server_.entity("K", "7").has_value());
  EXPECT_EQ(lookup(begin(), "7").body["missing"].size(), 1U);
}

TEST_F(DatastoreDoubleTest, IndexedValuesOver1500BytesAreRefused) {
  Json e = entity("a", "2026-01-01T00:00:00Z");
  e["properties"]["big"] = {{"blobValue", std::string(2000, 'A')}};
  EXPECT_EQ(upsert(e).status, 400);
  e["properties"]["big"]["excludeFromIndexes"] = true;
  EXPECT_EQ(upsert(e).status, 200);
}

TEST_F(DatastoreDoubleTest, ReservedAndEmptyKeyNamesAreRefused) {
  EXPECT_EQ(upsert({{"key", key("__x__")}}).status, 400);
  EXPECT_EQ(upsert({{"key", key("")}}).status, 400);
}

TEST_F(DatastoreDoubleTest, AFaultBeforeApplyingChangesNothing) {
  server_.inject(DatastoreDouble::Fault{.method = "commit"});
  Result r = upsert(entity("a", "2026-01-01T00:00:00Z"));
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body["error"]["status"], "UNAVAILABLE");
  EXPECT_EQ(server_.entity_count("K"), 0U);
  EXPECT_EQ(upsert(entity("a", "2026-01-01T00:00:00Z")).status, 200);  // consumed
}

TEST_F(DatastoreDoubleTest, AFaultAfterApplyingLosesOnlyTheReply) {
  server_.inject(DatastoreDouble::Fault{.method = "commit", .after_apply = true});
  EXPECT_EQ(upsert(entity("a", "2026-01-01T00:00:00Z")).status, 503);
  EXPECT_EQ(server_.entity_count("K"), 1U);
}

TEST_F(DatastoreDoubleTest, ADelayedReplyAfterApplyingLooksLikeADroppedConnection) {
  server_.inject(
      DatastoreDouble::Fault{.method = "commit", .after_apply = true, .delay = milliseconds(1500)});
  const std::string tx = begin();
  httplib::Client client(server_.endpoint());
  client.set_read_timeout(0, 200'000);
  auto r = client.Post("/v1/projects/p:commit",
                       Json{{"mode", "TRANSACTIONAL"},
                            {"transaction", tx},
                            {"mutations", {{{"upsert", entity("a", "2026-01-01T00:00:00Z")}}}}}
                           .dump(),
                       "application/json");
  EXPECT_FALSE(r);  // the client gave up
  EXPECT_EQ(server_.entity_count("K"), 1U);
}

TEST_F(DatastoreDoubleTest, LatencyAndCountsAndTokens) {
  server_.set_latency(milliseconds(50));
  const auto start = std::chrono::steady_clock::now();
  (void)begin();
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(50));
  EXPECT_EQ(server_.calls("beginTransaction"), 1);
  server_.set_latency(milliseconds(0));
  server_.require_token("t");
  EXPECT_EQ(call("beginTransaction", Json::object()).status, 401);
  httplib::Client client(server_.endpoint());
  auto r = client.Post("/v1/projects/p:beginTransaction", {{"Authorization", "Bearer t"}}, "{}",
                       "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

}  // namespace
}  // namespace idempotency::testing
