// DatastoreLock: one Datastore read-write transaction around the core's transition function.
#include "idempotency/datastore_lock.h"

#include <openssl/evp.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "auth/http_client.h"
#include "idempotency/errors.h"

namespace idempotency {
namespace {

using auth::detail::HttpClient;
using auth::detail::HttpResponse;
using Json = nlohmann::json;

constexpr const char* kProductionEndpoint = "https://datastore.googleapis.com";
constexpr const char* kHashPrefix = "sha256:";

std::string env(const char* name) {
  const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read-only use
  return v != nullptr ? std::string(v) : std::string();
}

// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
bool is_valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated sequence
    for (std::size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000)) return false;
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(), nullptr) != 1) {
    throw std::bad_alloc();
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < size; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

bool is_reserved_name(std::string_view s) {
  return s.size() >= 4 && s.substr(0, 2) == "__" && s.substr(s.size() - 2) == "__";
}

// RFC 3339 with milliseconds, UTC; clamped to the years Datastore timestamps cover.
std::string format_timestamp(Millis ms) {
  constexpr Millis kMin = -62135596800000;  // 0001-01-01T00:00:00Z
  constexpr Millis kMax = 253402300799999;  // 9999-12-31T23:59:59.999Z
  return format_rfc3339(from_millis(std::clamp(ms, kMin, kMax)));
}

// Failures of one REST call, classified for the retry loop.
struct RpcFailure {
  long http = 0;
  std::string status;  // Google's canonical status, e.g. "ABORTED"
  std::string message;
  bool retryable = false;

  [[nodiscard]] std::string describe() const {
    std::string out = http != 0 ? std::to_string(http) + " " : std::string();
    return out + status + ": " + message;
  }
};

std::string replace_all(std::string text, std::string_view what, std::string_view with) {
  if (what.empty()) return text;
  for (std::size_t pos = text.find(what); pos != std::string::npos;
       pos = text.find(what, pos + with.size())) {
    text.replace(pos, what.size(), with);
  }
  return text;
}

RpcFailure classify(const HttpResponse& r) {
  RpcFailure f;
  f.http = r.status;
  if (!r.transport_error.empty()) {
    // No reply: the request may or may not have been applied; a retry of the whole
    // transaction finds out (a claim re-affirms itself by its token).
    f.status = "UNAVAILABLE";
    f.message = "transport: " + r.transport_error;
    f.retryable = true;
    return f;
  }
  try {
    const Json j = Json::parse(r.body);
    const Json& e = j.at("error");
    f.status = e.value("status", "");
    f.message = e.value("message", "");
  } catch (const Json::exception&) {
    f.message = "unparsable error reply";
  }
  if (f.status.empty()) {
    switch (r.status) {
      case 409:
        f.status = "ABORTED";
        break;
      case 429:
        f.status = "RESOURCE_EXHAUSTED";
        break;
      case 503:
        f.status = "UNAVAILABLE";
        break;
      case 504:
        f.status = "DEADLINE_EXCEEDED";
        break;
      case 500:
        f.status = "INTERNAL";
        break;
      default:
        f.status = "HTTP_" + std::to_string(r.status);
        break;
    }
  }
  f.retryable = f.status == "ABORTED" || f.status == "UNAVAILABLE" ||
                f.status == "DEADLINE_EXCEEDED" || f.status == "INTERNAL" ||
                f.status == "RESOURCE_EXHAUSTED" || r.status == 429 || r.status == 500 ||
                r.status == 502 || r.status == 503 || r.status == 504;
  return f;
}

// Decodes a blobValue. The proto3 JSON mapping writes bytes as standard base64 with padding
// but has readers accept the URL-safe alphabet and missing padding too, so this does.
// (auth::detail::base64_decode stays as it is: the tolerance is for this wire format.)
bool decode_blob(std::string text, std::string& out) {
  std::size_t padding = 0;
  while (!text.empty() && text.back() == '=') {
    text.pop_back();
    ++padding;
  }
  if (padding > 2 || text.size() % 4 == 1 || text.find('=') != std::string::npos) return false;
  for (char& c : text) {
    if (c == '-') c = '+';
    if (c == '_') c = '/';
  }
  return auth::detail::base64_decode(text, out);
}

std::int64_t json_int(const Json& v) {
  if (v.is_number_integer()) return v.get<std::int64_t>();
  const auto s = v.get<std::string>();
  std::int64_t out = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || p != s.data() + s.size()) throw std::invalid_argument("not an integer");
  return out;
}

}  // namespace

std::string datastore_key_name(std::string_view key) {
  const bool usable = !key.empty() && key.size() <= 1500 &&
                      key.find('\0') == std::string_view::npos && is_valid_utf8(key) &&
                      !is_reserved_name(key) && key.substr(0, 7) != kHashPrefix;
  if (usable) return std::string(key);
  return kHashPrefix + sha256_hex(key);
}

// The console's name for the default database; the API wants an empty databaseId instead and
// refuses this one ("'(default)' is not allowed; use empty string").
constexpr std::string_view kDefaultDatabaseName = "(default)";

DatastoreOptions parse_datastore_url(std::string_view url, DatastoreOptions base) {
  constexpr std::string_view kScheme = "datastore://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    throw std::invalid_argument("a Datastore URL starts with datastore://");
  }
  std::string_view rest = url.substr(kScheme.size());
  std::string_view query;
  if (const auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  const auto slash = rest.find('/');
  base.project = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) {
    std::string_view ns = rest.substr(slash + 1);
    if (!ns.empty() && ns.back() == '/') ns.remove_suffix(1);
    if (ns.find('/') != std::string_view::npos) {
      throw std::invalid_argument("a Datastore URL has at most one path segment (the namespace)");
    }
    base.namespace_id = std::string(ns);
  }
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const auto eq = pair.find('=');
    const std::string_view name = pair.substr(0, eq);
    const std::string value(eq == std::string_view::npos ? std::string_view()
                                                         : pair.substr(eq + 1));
    if (name == "kind") {
      base.kind = value;
    } else if (name == "database") {
      base.database = value == kDefaultDatabaseName ? std::string() : value;
    } else {
      throw std::invalid_argument("unknown Datastore URL parameter (expected kind or database)");
    }
  }
  return base;
}

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
    std::map<std::string, Json> found;
    if (r.contains("found")) {
      for (auto& result : r["found"]) {
        Json& entity = result.at("entity");
        found.emplace(entity.at("key").at("path").at(0).at("name").get<std::string>(),
                      std::move(entity));
      }
    }
    return found;
  }

  static Record to_record(const Json& entity) {
    try {
      const Json& p = entity.at("properties");
      Record r;
      const auto state = json_int(p.at("state").at("integerValue"));
      if (state != static_cast<int>(RecordState::kClaimed) &&
          state != static_cast<int>(RecordState::kDone)) {
        throw StoreError("datastore: a record has an unknown state " + std::to_string(state));
      }
      r.state = static_cast<RecordState>(state);
      r.fence = json_int(p.at("fence").at("integerValue"));
      r.lease_expiry = json_int(p.at("lease_expiry_ms").at("integerValue"));
      r.expires_at = json_int(p.at("expires_at_ms").at("integerValue"));
      auto blob = [&p](const char* name) -> std::optional<std::string> {
        if (!p.contains(name) || !p[name].contains("blobValue")) return std::nullopt;
        std::string out;
        if (!decode_blob(p[name]["blobValue"].get<std::string>(), out)) {
          throw StoreError(std::string("datastore: a record's ") + name + " is not base64");
        }
        return out;
      };
      r.claim_token = blob("claim_token").value_or("");
      r.result = blob("result");
      r.fingerprint = blob("fingerprint");
      return r;
    } catch (const Json::exception&) {
      throw StoreError("datastore: a record entity is malformed (missing or mistyped property)");
    } catch (const std::invalid_argument&) {
      throw StoreError("datastore: a record entity has a malformed integer property");
    }
  }

  Json to_entity(const std::string& name, const Record& r) const {
    auto integer = [](std::int64_t v) {
      return Json{{"integerValue", std::to_string(v)}, {"excludeFromIndexes", true}};
    };
    auto blob = [](const std::string& bytes) {
      return Json{{"blobValue", auth::detail::base64_encode(bytes)}, {"excludeFromIndexes", true}};
    };
    Json props = {
        {"state", integer(static_cast<int>(r.state))},
        {"fence", integer(r.fence)},
        {"lease_expiry_ms", integer(r.lease_expiry)},
        {"expires_at_ms", integer(r.expires_at)},
        // Indexed: the purge query and a Datastore TTL policy read it.
        {"expires_at", Json{{"timestampValue", format_timestamp(r.expires_at)}}},
        {"claim_token", blob(r.claim_token)},
    };
    if (r.result) props["result"] = blob(*r.result);
    if (r.fingerprint) props["fingerprint"] = blob(*r.fingerprint);
    return Json{{"key", key_json(name)}, {"properties", props}};
  }

  // Runs `attempt` until it succeeds, retrying ABORTED and transient failures with jittered
  // exponential back-off; a permanent failure or the last one becomes a StoreError.
  template <class Attempt>
  auto with_retries(const char* what, std::string_view key, const std::string& name,
                    Attempt attempt) {
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
        return attempt();
      } catch (RpcFailure& f) {
        // Google's messages may quote the key name; keys are customer data.
        if (!key.empty()) {
          f.message = replace_all(replace_all(std::move(f.message), name, "<key>"), key, "<key>");
        }
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
  auto in_transaction(const char* what, std::string_view key, const std::string& name, Body body) {
    std::string aborted;
    return with_retries(what, key, name, [&] {
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
    return in_transaction(what, key, name, [&](const std::string& tx, bool& committing) {
      auto found = lookup({name}, tx);
      std::optional<Record> current;
      if (auto it = found.find(name); it != found.end()) current = to_record(it->second);
      Transition t = transition(current, op, now());
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
    return in_transaction("purge_expired", {}, {},
                          [&](const std::string& tx, bool& committing) -> std::size_t {
                            auto found = lookup(names, tx);
                            Json mutations = Json::array();
                            for (const auto& [name, entity] : found) {
                              // Re-checked in the transaction: a record reclaimed since the query
                              // must stay.
                              if (at >= to_record(entity).expires_at) {
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
      const Json r = with_retries("purge_expired", {}, {}, [&] { return call("runQuery", b); });
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
  return claim_result(key, *t.record, *t.answer.claim);
}

bool DatastoreLock::do_complete(const Claim& claim, std::optional<std::string> result) {
  return impl_
      ->apply("complete", claim.key, CompleteOp{claim.fence, std::move(result), ttl().count()})
      .answer.ok;
}

void DatastoreLock::do_release(const Claim& claim) {
  (void)impl_->apply("release", claim.key, ReleaseOp{claim.fence, ttl().count()});
}

std::size_t DatastoreLock::do_purge_expired() { return impl_->purge(); }

std::optional<Record> DatastoreLock::record(std::string_view key) {
  const std::string name = datastore_key_name(key);
  return impl_->with_retries("record", key, name, [&]() -> std::optional<Record> {
    auto found = impl_->lookup({name}, "");
    if (auto it = found.find(name); it != found.end()) return Impl::to_record(it->second);
    return std::nullopt;
  });
}

}  // namespace idempotency
