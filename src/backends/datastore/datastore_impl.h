// DatastoreLock::Impl: what the backend's files share, one client and one set of options
// behind the REST calls, the retry loop and the transactions (datastore_lock.cc: the calls and
// the operations; datastore_purge.cc: purge_expired). Internal to the datastore component.
//
// Thread safety: every member may be called from any number of threads at once.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "auth/http_client.h"
#include "datastore_wire.h"
#include "idempotency/datastore_lock.h"
#include "idempotency/errors.h"
#include "idempotency/record.h"

namespace idempotency {

struct DatastoreLock::Impl {
  using Json = nlohmann::json;

  DatastoreOptions options;
  std::string project;
  std::string base_url;  // ".../v1/projects/P:"
  std::shared_ptr<auth::TokenSource> credentials;
  std::string quota_project;  // sent as x-goog-user-project when the credentials name one
  std::shared_ptr<const Clock> clock;
  auth::detail::HttpClient http;
  std::atomic<bool> foreign_logged{false};  // purge_skipped_foreign is logged once

  // The longest replies read. A lookup's found entities are each at most 1 MiB, which base64
  // and JSON make at most ~1.4 MB; the other replies (a transaction, a commit's versions, a
  // keys-only query batch of at most 500 key names) are far below 16 MiB.
  static constexpr std::size_t kReplyBytesPerEntity = std::size_t{2} << 20;
  static constexpr std::size_t kMaxReplyBytes = std::size_t{16} << 20;

  // Room kept free below Datastore's entity limit when judging whether a result fits:
  // Google documents how it counts an entity's size, not every byte of what it enforces.
  static constexpr std::size_t kEntitySizeMargin = 1024;

  [[nodiscard]] Millis now() const { return to_millis(clock->now()); }

  Json partition() const {
    Json p = {{"projectId", project}};
    if (!options.database.empty()) p["databaseId"] = options.database;
    if (!options.namespace_id.empty()) p["namespaceId"] = options.namespace_id;
    return p;
  }

  Json key_json(const std::string& name) const {
    return Json{{"partitionId", partition()},
                {"path", Json::array({Json{{"kind", options.kind}, {"name", name}}})}};
  }

  Json body() const {
    Json b = Json::object();
    if (!options.database.empty()) b["databaseId"] = options.database;
    return b;
  }

  // One REST call; throws RpcFailure on any non-200 reply, StoreError when no token. A reply
  // longer than `max_reply_bytes` is a failure that is not retried.
  Json call(const char* method, const Json& request, std::size_t max_reply_bytes = kMaxReplyBytes);

  // `previous`: the transaction an ABORTED attempt ran in, which this one retries.
  std::string begin(const std::string& previous);

  // Best effort: an abandoned transaction expires on its own.
  void rollback(const std::string& tx) noexcept;

  // Commits `mutations` in `tx` (TRANSACTIONAL: ABORTED when a read changed since).
  void commit(const std::string& tx, Json mutations);

  // Looks up `names`; returns the found entities by key name (absent: missing). Keys the
  // reply defers (Datastore's "not looked up due to resource constraints") are looked up again
  // in the same transaction, as Google's client libraries do, while each round resolves some:
  // at most names.size() rounds.
  std::map<std::string, Json> lookup(const std::vector<std::string>& names, const std::string& tx);

  Json to_entity(const std::string& name, const Record& r) const {
    return Json{{"key", key_json(name)}, {"properties", datastore_detail::entity_properties(r)}};
  }

  // Runs `attempt` until it succeeds, retrying ABORTED and transient failures with jittered
  // exponential back-off; a permanent failure or the last one becomes a StoreError. `secrets`:
  // the keys and entity names the call is about, kept out of its error message.
  template <class Attempt>
  auto with_retries(const char* what, std::span<const std::string_view> secrets, Attempt attempt) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    datastore_detail::RpcFailure last;
    for (int i = 0; i < options.max_attempts; ++i) {
      if (i > 0) {
        const auto cap = std::min<std::int64_t>(options.max_backoff.count(),
                                                options.initial_backoff.count() << std::min(i, 20));
        std::uniform_int_distribution<std::int64_t> jitter(0, std::max<std::int64_t>(cap, 0));
        std::this_thread::sleep_for(std::chrono::milliseconds(jitter(rng)));
      }
      try {
        try {
          return attempt();
        } catch (const Json::exception&) {
          // A 200 of the wrong shape (a proxy's, an emulator's): read like an unparsable one.
          // The parser's own words name only fields and types, never a value, but they tell
          // nothing an operator needs either.
          throw datastore_detail::RpcFailure{200, "UNAVAILABLE",
                                             std::string(what) + ": unexpected reply", true};
        }
      } catch (datastore_detail::RpcFailure& f) {
        // Google's messages may quote the key name; keys are customer data.
        f.message = datastore_detail::redact_keys(std::move(f.message), secrets);
        if (!f.retryable) throw StoreError(std::string("datastore: ") + what + ": " + f.describe());
        last = std::move(f);
      }
    }
    throw StoreError(std::string("datastore: ") + what + ": gave up after " +
                     std::to_string(options.max_attempts) + " attempts; last: " + last.describe());
  }

  // Runs `body(tx, committing)` in a read-write transaction, retried by with_retries. A body
  // sets `committing` before it commits. A failure rolls the transaction back unless its commit
  // was answered ABORTED, which ended it: a commit that failed otherwise (a reset connection, a
  // timeout, a 503) may leave it open, and under Firestore's pessimistic locking an open
  // transaction holds its locks until it idles out (60 s), stalling the retry and every other
  // caller of the key. Rolling back one that did commit is refused, harmlessly. The retry of an
  // ABORTED transaction names it as TransactionOptions.ReadWrite.previousTransaction, as the v1
  // API asks of a retried transaction.
  template <class Body>
  auto in_transaction(const char* what, std::span<const std::string_view> secrets, Body body) {
    std::string aborted;
    return with_retries(what, secrets, [&] {
      const std::string tx = begin(aborted);
      bool committing = false;
      try {
        return body(tx, committing);
      } catch (const datastore_detail::RpcFailure& f) {
        if (!committing || f.status != "ABORTED") rollback(tx);
        if (f.status == "ABORTED") aborted = tx;
        throw;
      } catch (...) {
        rollback(tx);
        throw;
      }
    });
  }

  // One operation: begin, lookup, transition(), commit when changed else rollback. A complete
  // whose record would not fit in an entity (a long fingerprint or claim token leaves less
  // room than kMaxResultBytes assumes) completes without its result, as the core's
  // fit_result() does for a result over the limit: refused by Datastore after the work ran,
  // the complete would fail and the key be claimed and the work run again after the lease.
  Transition apply(const char* what, std::string_view key, const Operation& op);

  // Root entities one purge transaction looks up and deletes. Firestore in Datastore mode has
  // no entity-group limit; legacy Cloud Datastore and its emulator allow 25 entity groups per
  // transaction (more: 400 INVALID_ARGUMENT). 25 works on both (DECISIONS.md).
  static constexpr std::size_t kPurgeTransactionEntities = 25;

  // Deletes those of `names` still expired at `at`, in one transaction; returns how many. An
  // entity that is not a readable record (another program's, in this kind) is left alone and
  // counted in `foreign`: one such entity must not stop every purge at it.
  std::size_t delete_expired(const std::vector<std::string>& names, Millis at,
                             std::size_t& foreign);

  // Says once per backend that the purge passes over entities that are not records, naming
  // none of them (their names may be keys, or another program's data).
  void log_foreign(std::size_t count);

  // runQuery batches in a row whose endCursor did not move before the purge gives up.
  static constexpr int kMaxStalledBatches = 3;

  // Pages through the expired keys. Only NO_MORE_RESULTS ends the query: NOT_FINISHED batches
  // may be short or empty, and AFTER_LIMIT / AFTER_CURSOR mean there may be more past the
  // endCursor, so every other state continues from it (google/datastore/v1/query.proto).
  std::size_t purge();
};

}  // namespace idempotency
