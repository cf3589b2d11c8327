// DatastoreDouble: an in-process Datastore-mode REST server on 127.0.0.1 for tests.
//
// It speaks the slice of the Datastore v1 REST API the backend uses (beginTransaction, lookup,
// commit, rollback, runQuery) and keeps the semantics that matter: entity versions; optimistic
// read-write transactions whose commit is ABORTED (409) when an entity they read was changed by
// another commit since; lookups; keys-only queries with an inequality filter on an indexed
// property (excluded properties are not queryable, as in Datastore); inserts, upserts, deletes,
// baseVersion. Faults: error replies before applying, error replies or long delays AFTER a
// commit was applied (a lost commit response), and latency; `after_next` interleaves another
// client's operation at an exact point of a call. It is not Google's emulator:
// behaviour beyond this slice (indexes, limits, eventual consistency, lock waits) is not modelled.
//
// Thread safety: every member may be called from any thread while the server runs.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace httplib {
class Server;
class Request;
class Response;
}  // namespace httplib

namespace idempotency::testing {

class DatastoreDouble {
 public:
  using Json = nlohmann::json;

  /// A scripted fault for the next `count` calls of `method` ("commit", "lookup", … or "*").
  struct Fault {
    std::string method = "*";
    int count = 1;
    /// The reply: HTTP status and Google's status name and message.
    int http = 503;
    std::string status = "UNAVAILABLE";
    std::string message = "injected fault";
    /// True: apply the call first, then fail the reply (a lost response). Commit only.
    bool after_apply = false;
    /// After applying, hold the reply this long (longer than the client timeout: the client
    /// sees a dropped response) and then answer normally. Used with `after_apply`.
    std::chrono::milliseconds delay{0};
  };

  /// DatastoreDouble() binds 127.0.0.1 on a free port and starts serving.
  DatastoreDouble();
  /// ~DatastoreDouble() stops the server.
  ~DatastoreDouble();
  DatastoreDouble(const DatastoreDouble&) = delete;
  DatastoreDouble& operator=(const DatastoreDouble&) = delete;

  /// endpoint() returns "http://127.0.0.1:PORT".
  [[nodiscard]] std::string endpoint() const;
  /// inject() queues a fault; faults are consumed in order.
  void inject(Fault fault);
  /// after_next() runs `action` once, when the next call of `method` has been applied and
  /// before its reply is sent. It runs outside the double's lock, so it may use the double
  /// through another client: a race between two clients played out at an exact point.
  void after_next(std::string method, std::function<void()> action);
  /// set_latency() delays every reply by `latency`.
  void set_latency(std::chrono::milliseconds latency);
  /// require_token() makes every call without `Authorization: Bearer token` a 401.
  void require_token(std::string token);
  /// calls() counts calls of `method` so far (all methods for "*").
  [[nodiscard]] int calls(const std::string& method) const;
  /// reset_counts() zeroes the call counters.
  void reset_counts();
  /// last_header() is the value of header `name` (lower case) on the latest call, "" if absent.
  [[nodiscard]] std::string last_header(const std::string& name) const;
  /// entity() returns the stored entity `name` of `kind` (any partition), if any.
  [[nodiscard]] std::optional<Json> entity(const std::string& kind, const std::string& name) const;
  /// entity_count() counts the stored entities of `kind`.
  [[nodiscard]] std::size_t entity_count(const std::string& kind) const;
  /// put() stores `entity` (with its key, named or with an integer id) as a non-transactional
  /// upsert would.
  void put(const Json& entity);

  // Query paging as Datastore may do it: a batch can stop early with moreResults NOT_FINISHED
  // (short or empty), and the client continues from its endCursor. 0 turns a knob off.
  /// set_query_batch_cap() returns at most `n` results per runQuery batch, NOT_FINISHED when
  /// it stopped at the cap.
  void set_query_batch_cap(std::size_t n);
  /// set_query_scan_limit() examines at most `n` stored entities (any kind, in key order) per
  /// runQuery and answers NOT_FINISHED with the cursor after the last one examined: an empty
  /// batch when none of them matched.
  void set_query_scan_limit(std::size_t n);
  /// set_query_stalled() makes runQuery answer empty NOT_FINISHED batches whose endCursor is
  /// the startCursor it was given: a server that never advances.
  void set_query_stalled(bool stalled);
  /// set_transaction_entity_group_limit() refuses a transaction whose lookups and commit touch
  /// more than `n` entity groups (root keys), as the legacy Datastore emulator does with 25:
  /// 400 INVALID_ARGUMENT "operating on too many entity groups in a single transaction."
  /// 0 (the default) is no limit, as in Firestore in Datastore mode.
  void set_transaction_entity_group_limit(std::size_t n);
  /// previous_transactions() lists, per beginTransaction so far, the
  /// `transactionOptions.readWrite.previousTransaction` it named ("" when none).
  [[nodiscard]] std::vector<std::string> previous_transactions() const;
  /// serve_url_safe_blobs() makes lookups answer every blobValue in the URL-safe alphabet
  /// without padding, which the proto3 JSON mapping allows a writer to use for bytes.
  void serve_url_safe_blobs(bool on);
  /// set_lookup_defer_beyond() answers at most `n` keys per lookup and lists the rest as
  /// `deferred`, as Datastore may under resource constraints ("not looked up"). 0: off.
  void set_lookup_defer_beyond(std::size_t n);

 private:
  struct Stored {
    Json entity;
    std::int64_t version = 0;
  };
  struct Transaction {
    std::map<std::string, std::int64_t> reads;  // key id -> version read (0: missing)
  };
  struct Reply {
    int http = 200;
    Json body;
  };

  void handle(const httplib::Request& req, httplib::Response& res);
  Reply dispatch(const std::string& method, const Json& body);
  Reply begin_transaction(const Json& body);
  Reply lookup(const Json& body);
  Reply commit(const Json& body);
  Reply rollback(const Json& body);
  Reply run_query(const Json& body);
  static std::string key_id(const Json& key);
  static Reply error(int http, const std::string& status, const std::string& message);
  std::optional<Fault> take_fault(const std::string& method);
  std::int64_t current_version(const std::string& id) const;

  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::thread thread_;

  mutable std::mutex mutex_;
  std::map<std::string, Stored> entities_;  // key id -> entity
  std::map<std::string, Transaction> transactions_;
  std::int64_t version_ = 0;
  std::int64_t next_tx_ = 0;
  std::vector<Fault> faults_;
  std::vector<std::pair<std::string, std::function<void()>>> actions_;  // method -> action
  std::chrono::milliseconds latency_{0};
  std::string token_;
  std::map<std::string, int> calls_;
  std::map<std::string, std::string> last_headers_;  // lower-case name -> value
  std::size_t query_batch_cap_ = 0;
  std::size_t query_scan_limit_ = 0;
  bool query_stalled_ = false;
  std::size_t entity_group_limit_ = 0;
  std::vector<std::string> previous_transactions_;
  bool url_safe_blobs_ = false;
  std::size_t lookup_defer_beyond_ = 0;
};

}  // namespace idempotency::testing
