// DatastoreLock: one Datastore read-write transaction around the core's transition function,
// and the REST calls it is made of. The retry loop and the transaction wrapper are in
// datastore_impl.h, the entity mapping in datastore_entity.cc, purge_expired() in
// datastore_purge.cc.
#include "idempotency/datastore_lock.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <utility>
#include <variant>
#include <vector>

#include "auth/http_client.h"
#include "datastore_impl.h"
#include "datastore_wire.h"
#include "idempotency/errors.h"
#include "idempotency/key.h"
#include "idempotency/log.h"

namespace idempotency {
namespace {

using auth::detail::HttpResponse;
using Json = nlohmann::json;
using datastore_detail::classify;
using datastore_detail::is_reserved_name;
using datastore_detail::kDefaultDatabaseName;
using datastore_detail::record_from_entity;
using datastore_detail::RpcFailure;

constexpr const char* kProductionEndpoint = "https://datastore.googleapis.com";

std::string env(const char* name) {
  const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read-only use
  return v != nullptr ? std::string(v) : std::string();
}

}  // namespace

Json DatastoreLock::Impl::call(const char* method, const Json& request,
                               std::size_t max_reply_bytes) {
  std::vector<std::string> headers = {"Content-Type: application/json"};
  if (!options.database.empty()) {
    // A URL query string: domain-scoped project ids ("example.com:p") need encoding.
    headers.push_back("x-goog-request-params: project_id=" + auth::detail::url_encode(project) +
                      "&database_id=" + auth::detail::url_encode(options.database));
  }
  if (credentials && !quota_project.empty()) {
    headers.push_back("x-goog-user-project: " + quota_project);
  }
  const std::string payload = request.dump();
  HttpResponse r;
  for (int sent = 0;; ++sent) {
    std::vector<std::string> with_token = headers;
    std::string token;
    if (credentials) {
      try {
        token = credentials->access_token();
      } catch (const auth::AuthError& e) {
        throw StoreError(std::string("datastore: no access token: ") + e.what());
      }
      with_token.push_back("Authorization: Bearer " + token);
    }
    r = http.request("POST", base_url + method, with_token, payload, options.request_timeout,
                     max_reply_bytes);
    // A refused token (revoked, or judged expired by a clock that differs from Google's)
    // stays cached until its own expiry: drop it and send once more with a fresh one, as
    // Google's client libraries do. Safe to repeat: a 401 means nothing was done.
    if (r.status != 401 || !credentials || sent > 0) break;
    credentials->invalidate(token);
  }
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

std::string DatastoreLock::Impl::begin(const std::string& previous) {
  Json read_write = Json::object();
  if (!previous.empty()) read_write["previousTransaction"] = previous;
  Json b = body();
  b["transactionOptions"] = {{"readWrite", std::move(read_write)}};
  Json r = call("beginTransaction", b);
  return r.at("transaction").get<std::string>();
}

void DatastoreLock::Impl::rollback(const std::string& tx) noexcept {
  try {
    Json b = body();
    b["transaction"] = tx;
    (void)call("rollback", b);
  } catch (...) {
    // best effort: an abandoned transaction expires on its own
  }
}

void DatastoreLock::Impl::commit(const std::string& tx, Json mutations) {
  Json b = body();
  b["mode"] = "TRANSACTIONAL";
  b["transaction"] = tx;
  b["mutations"] = std::move(mutations);
  (void)call("commit", b);
}

std::map<std::string, Json> DatastoreLock::Impl::lookup(const std::vector<std::string>& names,
                                                        const std::string& tx) {
  const auto name_of = [](const Json& key) {
    return key.at("path").at(0).at("name").get<std::string>();
  };
  std::map<std::string, Json> found;
  std::set<std::string> missing;
  std::vector<std::string> pending = names;
  while (!pending.empty()) {
    Json b = body();
    if (!tx.empty()) b["readOptions"] = {{"transaction", tx}};
    Json keys = Json::array();
    for (const auto& n : pending) keys.push_back(key_json(n));
    b["keys"] = keys;
    Json r = call("lookup", b, pending.size() * kReplyBytesPerEntity);
    const std::size_t resolved = found.size() + missing.size();
    if (r.contains("found")) {
      for (auto& result : r["found"]) {
        Json& entity = result.at("entity");
        found.emplace(name_of(entity.at("key")), std::move(entity));
      }
    }
    if (r.contains("missing")) {
      for (const auto& result : r["missing"])
        missing.insert(name_of(result.at("entity").at("key")));
    }
    std::set<std::string> deferred;
    if (r.contains("deferred")) {
      for (const auto& key : r["deferred"]) deferred.insert(name_of(key));
    }
    std::vector<std::string> again;
    for (const auto& n : pending) {
      if (found.contains(n) || missing.contains(n)) continue;
      // A key the reply names neither found, missing nor deferred is not known to be
      // absent: read as absent, a claim would write a fresh record over a live one (a
      // proxy's or an emulator's reply of another shape). Google names every key it was
      // asked for.
      if (!deferred.contains(n)) {
        throw RpcFailure{200, "UNAVAILABLE", "lookup: a key came back neither found nor missing",
                         true};
      }
      again.push_back(n);
    }
    if (!again.empty() && found.size() + missing.size() == resolved) {
      throw RpcFailure{200, "UNAVAILABLE", "lookup: every key deferred", true};
    }
    pending = std::move(again);
  }
  return found;
}

Transition DatastoreLock::Impl::apply(const char* what, std::string_view key, const Operation& op) {
  const std::string name = datastore_key_name(key);
  const std::array<std::string_view, 2> secrets{key, name};
  std::optional<std::pair<std::size_t, std::size_t>> dropped;  // result bytes, room
  Transition done = in_transaction(what, secrets, [&](const std::string& tx, bool& committing) {
    dropped.reset();
    auto found = lookup({name}, tx);
    std::optional<Record> current;
    if (auto it = found.find(name); it != found.end()) current = record_from_entity(it->second);
    const Millis at = now();
    const auto* complete = std::get_if<CompleteOp>(&op);
    // A complete's input, kept to try once more without its result.
    std::optional<Record> input;
    if (complete != nullptr) input = current;
    Transition t = transition(std::move(current), op, at);
    if (!t.changed) {
      rollback(tx);
      return t;
    }
    Json entity = t.record ? to_entity(name, *t.record) : Json();
    if (complete != nullptr && t.record && t.record->result) {
      const std::size_t size = datastore_detail::entity_size(entity);
      const std::size_t budget = datastore_detail::kMaxEntityBytes - kEntitySizeMargin;
      if (size > budget) {
        const std::size_t bytes = t.record->result->size();
        dropped.emplace(bytes, bytes - std::min(bytes, size - budget));
        t = transition(std::move(input), CompleteOp{complete->fence, std::nullopt, complete->ttl},
                       at);
        entity = to_entity(name, *t.record);
      }
    }
    Json mutation =
        t.record ? Json{{"upsert", std::move(entity)}} : Json{{"delete", key_json(name)}};
    committing = true;
    commit(tx, Json::array({std::move(mutation)}));
    return t;
  });
  if (dropped) {
    log(LogRecord{Severity::kWarning,
                  "result_too_large",
                  "the result does not fit in the record's entity beside its key, claim token "
                  "and fingerprint; the key is completed without it, and later claims find it "
                  "done with no result",
                  {{"key_fingerprint", key_fingerprint(key)},
                   {"bytes", std::to_string(dropped->first)},
                   {"max_bytes", std::to_string(dropped->second)}}});
  }
  return done;
}

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
