// DatastoreLock: one Datastore read-write transaction around the core's transition function,
// with the REST calls and their retries (the entity mapping is datastore_entity.cc). Just over
// 400 lines: the calls, the retry loop and the transactions share one client, one set of options
// and the key scrubbing, and are read together when judging what a retry may repeat.
#include "idempotency/datastore_lock.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "auth/http_client.h"
#include "datastore_wire.h"
#include "idempotency/errors.h"

namespace idempotency {
namespace {

using auth::detail::HttpClient;
using auth::detail::HttpResponse;
using Json = nlohmann::json;
using datastore_detail::classify;
using datastore_detail::format_timestamp;
using datastore_detail::is_reserved_name;
using datastore_detail::kDefaultDatabaseName;
using datastore_detail::record_from_entity;
using datastore_detail::redact_keys;
using datastore_detail::RpcFailure;

constexpr const char* kProductionEndpoint = "https://datastore.googleapis.com";

std::string env(const char* name) {
  const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read-only use
  return v != nullptr ? std::string(v) : std::string();
}

}  // namespace

struct DatastoreLock::Impl {
  DatastoreOptions options;
  std::string project;
  std::string base_url;  // ".../v1/projects/P:"
  std::shared_ptr<auth::TokenSource> credentials;
  std::string quota_project;  // sent as x-goog-user-project when the credentials name one
  std::shared_ptr<const Clock> clock;
  HttpClient http;

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

  // One REST call; throws RpcFailure on any non-200 reply, StoreError when no token.
  Json call(const char* method, const Json& request) {
    std::vector<std::string> headers = {"Content-Type: application/json"};
    if (!options.database.empty()) {
      // A URL query string: domain-scoped project ids ("example.com:p") need encoding.
      headers.push_back("x-goog-request-params: project_id=" + auth::detail::url_encode(project) +
                        "&database_id=" + auth::detail::url_encode(options.database));
    }
    if (credentials) {
      if (!quota_project.empty()) headers.push_back("x-goog-user-project: " + quota_project);
      try {
        headers.push_back("Authorization: Bearer " + credentials->access_token());
      } catch (const auth::AuthError& e) {
        throw StoreError(std::string("datastore: no access token: ") + e.what());
      }
    }
    HttpResponse r =
        http.request("POST", base_url + method, headers, request.dump(), options.request_timeout);
    if (r.status == 200) {
      try {
        return Json::parse(r.body);
      } catch (const Json::exception&) {
        throw RpcFailure{200, "UNAVAILABLE", std::string(method) + ": unparsable reply", true};
      }
    }
    RpcFailure f = classify(r);
    f.message = std::string(method) + ": " + f.message;
    throw f;
  }

  // `previous`: the transaction an ABORTED attempt ran in, which this one retries.
  std::string begin(const std::string& previous) {
    Json read_write = Json::object();
    if (!previous.empty()) read_write["previousTransaction"] = previous;
    Json b = body();
    b["transactionOptions"] = {{"readWrite", std::move(read_write)}};
    Json r = call("beginTransaction", b);
    return r.at("transaction").get<std::string>();
  }

  void rollback(const std::string& tx) noexcept {
    try {
      Json b = body();
      b["transaction"] = tx;
      (void)call("rollback", b);
    } catch (...) {
      // best effort: an abandoned transaction expires on its own
    }
  }

  void commit(const std::string& tx, Json mutations) {
    Json b = body();
    b["mode"] = "TRANSACTIONAL";
    b["transaction"] = tx;
    b["mutations"] = std::move(mutations);
    (void)call("commit", b);
  }

  // Looks up `names`; returns the found entities by key name (absent: missing).
  std::map<std::string, Json> lookup(const std::vector<std::string>& names, const std::string& tx) {
    Json b = body();
    if (!tx.empty()) b["readOptions"] = {{"transaction", tx}};
    Json keys = Json::array();
    for (const auto& n : names) keys.push_back(key_json(n));
    b["keys"] = keys;
    Json r = call("lookup", b);
    if (r.contains("deferred") && !r["deferred"].empty()) {
      throw RpcFailure{200, "UNAVAILABLE", "lookup: keys deferred", true};
    }
    const auto name_of = [](const Json& entity) {
      return entity.at("key").at("path").at(0).at("name").get<std::string>();
    };
    std::map<std::string, Json> found;
    if (r.contains("found")) {
      for (auto& result : r["found"]) {
        Json& entity = result.at("entity");
        found.emplace(name_of(entity), std::move(entity));
      }
    }
    // A key the reply names neither found nor missing is not known to be absent: read as
    // absent, a claim would write a fresh record over a live one (a proxy's or an emulator's
    // reply of another shape). Google names every key it was asked for.
    std::set<std::string> missing;
    if (r.contains("missing")) {
      for (const auto& result : r["missing"]) missing.insert(name_of(result.at("entity")));
    }
    for (const auto& n : names) {
      if (!found.contains(n) && !missing.contains(n)) {
        throw RpcFailure{200, "UNAVAILABLE", "lookup: a key came back neither found nor missing",
                         true};
      }
    }
    return found;
  }

  Json to_entity(const std::string& name, const Record& r) const {
    return Json{{"key", key_json(name)}, {"properties", datastore_detail::entity_properties(r)}};
  }

  // Runs `attempt` until it succeeds, retrying ABORTED and transient failures with jittered
  // exponential back-off; a permanent failure or the last one becomes a StoreError. `secrets`:
  // the keys and entity names the call is about, kept out of its error message.
  template <class Attempt>
  auto with_retries(const char* what, std::span<const std::string_view> secrets, Attempt attempt) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    RpcFailure last;
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
          throw RpcFailure{200, "UNAVAILABLE", std::string(what) + ": unexpected reply", true};
        }
      } catch (RpcFailure& f) {
        // Google's messages may quote the key name; keys are customer data.
        f.message = redact_keys(std::move(f.message), secrets);
        if (!f.retryable) throw StoreError(std::string("datastore: ") + what + ": " + f.describe());
        last = std::move(f);
      }
    }
    throw StoreError(std::string("datastore: ") + what + ": gave up after " +
                     std::to_string(options.max_attempts) + " attempts; last: " + last.describe());
  }

  // Runs `body(tx, committing)` in a read-write transaction, retried by with_retries. A body
  // sets `committing` before it commits; a failure before that rolls the transaction back. The
  // retry of an ABORTED transaction names it as TransactionOptions.ReadWrite
  // .previousTransaction, as the v1 API asks of a retried transaction.
  template <class Body>
  auto in_transaction(const char* what, std::span<const std::string_view> secrets, Body body) {
    std::string aborted;
    return with_retries(what, secrets, [&] {
      const std::string tx = begin(aborted);
      bool committing = false;
      try {
        return body(tx, committing);
      } catch (const RpcFailure& f) {
        if (!committing) rollback(tx);
        if (f.status == "ABORTED") aborted = tx;
        throw;
      } catch (...) {
        if (!committing) rollback(tx);
        throw;
      }
    });
  }

  // One operation: begin, lookup, transition(), commit when changed else rollback.
  Transition apply(const char* what, std::string_view key, const Operation& op) {
    const std::string name = datastore_key_name(key);
    const std::array<std::string_view, 2> secrets{key, name};
    return in_transaction(what, secrets, [&](const std::string& tx, bool& committing) {
      auto found = lookup({name}, tx);
      std::optional<Record> current;
      if (auto it = found.find(name); it != found.end()) current = record_from_entity(it->second);
      Transition t = transition(std::move(current), op, now());
      if (!t.changed) {
        rollback(tx);
        return t;
      }
      Json mutation = t.record ? Json{{"upsert", to_entity(name, *t.record)}}
                               : Json{{"delete", key_json(name)}};
      committing = true;
      commit(tx, Json::array({std::move(mutation)}));
      return t;
    });
  }

  // Root entities one purge transaction looks up and deletes. Firestore in Datastore mode has
  // no entity-group limit; legacy Cloud Datastore and its emulator allow 25 entity groups per
  // transaction (more: 400 INVALID_ARGUMENT). 25 works on both (DECISIONS.md).
  static constexpr std::size_t kPurgeTransactionEntities = 25;

  // Deletes those of `names` still expired at `now`, in one transaction; returns how many.
  std::size_t delete_expired(const std::vector<std::string>& names, Millis at) {
    if (names.empty()) return 0;
    const std::vector<std::string_view> secrets(names.begin(), names.end());
    return in_transaction("purge_expired", secrets,
                          [&](const std::string& tx, bool& committing) -> std::size_t {
                            auto found = lookup(names, tx);
                            Json mutations = Json::array();
                            for (const auto& [name, entity] : found) {
                              // Re-checked in the transaction: a record reclaimed since the query
                              // must stay.
                              if (at >= record_from_entity(entity).expires_at) {
                                mutations.push_back({{"delete", key_json(name)}});
                              }
                            }
                            if (mutations.empty()) {
                              rollback(tx);
                              return 0;
                            }
                            const std::size_t n = mutations.size();
                            committing = true;
                            commit(tx, std::move(mutations));
                            return n;
                          });
  }

  // runQuery batches in a row whose endCursor did not move before the purge gives up.
  static constexpr int kMaxStalledBatches = 3;

  // Pages through the expired keys. Only NO_MORE_RESULTS ends the query: NOT_FINISHED batches
  // may be short or empty, and AFTER_LIMIT / AFTER_CURSOR mean there may be more past the
  // endCursor, so every other state continues from it (google/datastore/v1/query.proto).
  std::size_t purge() {
    const Millis at = now();
    std::size_t purged = 0;
    std::string cursor;
    int stalled = 0;
    for (;;) {
      Json query = {{"kind", Json::array({Json{{"name", options.kind}}})},
                    {"projection", Json::array({Json{{"property", {{"name", "__key__"}}}}})},
                    {"filter",
                     {{"propertyFilter",
                       {{"property", {{"name", "expires_at"}}},
                        {"op", "LESS_THAN_OR_EQUAL"},
                        {"value", {{"timestampValue", format_timestamp(at)}}}}}}},
                    {"limit", options.purge_batch_size}};
      if (!cursor.empty()) query["startCursor"] = cursor;
      Json b = body();
      b["partitionId"] = partition();
      b["query"] = query;
      const Json r = with_retries("purge_expired", {}, [&] { return call("runQuery", b); });
      std::vector<std::string> names;
      std::string more;
      std::string end;
      try {
        const Json& batch = r.at("batch");
        if (batch.contains("entityResults")) {
          for (const auto& er : batch["entityResults"]) {
            names.push_back(
                er.at("entity").at("key").at("path").at(0).at("name").get<std::string>());
          }
        }
        more = batch.value("moreResults", "");
        end = batch.value("endCursor", "");
      } catch (const Json::exception&) {
        throw StoreError("datastore: purge_expired: a malformed runQuery reply");
      }
      for (std::size_t i = 0; i < names.size(); i += kPurgeTransactionEntities) {
        const auto first = names.begin() + static_cast<std::ptrdiff_t>(i);
        const auto last = names.begin() + static_cast<std::ptrdiff_t>(std::min(
                                              names.size(), i + kPurgeTransactionEntities));
        purged += delete_expired(std::vector<std::string>(first, last), at);
      }
      if (more == "NO_MORE_RESULTS") break;
      if (more != "NOT_FINISHED" && more != "MORE_RESULTS_AFTER_LIMIT" &&
          more != "MORE_RESULTS_AFTER_CURSOR") {
        throw StoreError("datastore: purge_expired: runQuery answered moreResults \"" + more +
                         "\"");
      }
      if (end.empty()) {
        throw StoreError("datastore: purge_expired: runQuery answered " + more +
                         " without an endCursor");
      }
      if (end == cursor) {
        if (++stalled == kMaxStalledBatches) {
          throw StoreError("datastore: purge_expired: the query did not advance in " +
                           std::to_string(kMaxStalledBatches) + " batches");
        }
      } else {
        stalled = 0;
      }
      cursor = std::move(end);
    }
    return purged;
  }
};

DatastoreLock::DatastoreLock(DatastoreOptions options)
    : LockBackend(options.backend), impl_(std::make_unique<Impl>()) {
  if (options.kind.empty() || options.kind.size() > 1500 || is_reserved_name(options.kind)) {
    throw std::invalid_argument("datastore kind must be 1..1500 bytes and not match __.*__");
  }
  if (options.max_attempts < 1) throw std::invalid_argument("datastore max_attempts must be >= 1");
  if (options.purge_batch_size < 1 || options.purge_batch_size > 500) {
    throw std::invalid_argument("datastore purge_batch_size must be 1..500");
  }
  if (options.initial_backoff.count() < 0 || options.max_backoff.count() < 0 ||
      options.request_timeout.count() <= 0) {
    throw std::invalid_argument("datastore back-off must not be negative, timeout positive");
  }
  if (options.database == kDefaultDatabaseName) options.database.clear();
  Impl& d = *impl_;
  d.clock = options.backend.clock ? options.backend.clock : system_clock();
  std::string endpoint = options.endpoint;
  if (endpoint.empty()) {
    const std::string emulator = env("DATASTORE_EMULATOR_HOST");
    endpoint = emulator.empty() ? kProductionEndpoint : "http://" + emulator;
  }
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  const bool plain_http = endpoint.rfind("http://", 0) == 0;
  d.credentials = options.credentials;
  if (!d.credentials && !plain_http) {
    try {
      d.credentials = auth::google_default_credentials();
    } catch (const auth::AuthError& e) {
      throw StoreError(std::string("datastore: no credentials: ") + e.what());
    }
  }
  if (d.credentials) d.quota_project = d.credentials->quota_project();
  d.project = options.project;
  if (d.project.empty()) d.project = env("GOOGLE_CLOUD_PROJECT");
  if (d.project.empty() && plain_http) d.project = env("DATASTORE_PROJECT_ID");
  if (d.project.empty()) {
    try {
      d.project =
          auth::metadata_project_id(auth::CredentialsOptions{.timeout = std::chrono::seconds(5)});
    } catch (const auth::AuthError& e) {
      throw StoreError(std::string("datastore: no project: set DatastoreOptions::project or "
                                   "GOOGLE_CLOUD_PROJECT; ") +
                       e.what());
    }
  }
  d.base_url = endpoint + "/v1/projects/" + d.project + ":";
  d.options = std::move(options);
}

DatastoreLock::~DatastoreLock() = default;

const std::string& DatastoreLock::project() const noexcept { return impl_->project; }

ClaimResult DatastoreLock::do_claim(std::string_view key, std::chrono::milliseconds lease,
                                    const ClaimRequest& request) {
  // The same claim token on every internal retry: a lost commit reply re-affirms, never locks.
  Transition t =
      impl_->apply("claim", key,
                   ClaimOp{request.claim_token, lease.count(), ttl().count(), request.fingerprint});
  return claim_result(key, std::move(*t.record), *t.answer.claim);
}

bool DatastoreLock::do_complete(const Claim& claim, std::optional<std::string> result) {
  return impl_
      ->apply("complete", claim.key, CompleteOp{claim.fence, std::move(result), ttl().count()})
      .answer.ok;
}

void DatastoreLock::do_release(const Claim& claim) {
  (void)impl_->apply("release", claim.key, ReleaseOp{claim.fence, ttl().count()});
}

std::optional<TimePoint> DatastoreLock::do_extend(const Claim& claim,
                                                  std::chrono::milliseconds lease) {
  return extend_result(impl_->apply(
      "extend", claim.key, ExtendOp{claim.fence, claim.claim_token, lease.count(), ttl().count()}));
}

std::size_t DatastoreLock::do_purge_expired() { return impl_->purge(); }

std::optional<Record> DatastoreLock::do_inspect(std::string_view key) {
  const std::string name = datastore_key_name(key);
  const std::array<std::string_view, 2> secrets{key, name};
  return impl_->with_retries("record", secrets, [&]() -> std::optional<Record> {
    auto found = impl_->lookup({name}, "");
    if (auto it = found.find(name); it != found.end()) return record_from_entity(it->second);
    return std::nullopt;
  });
}

}  // namespace idempotency
