#include "backends/datastore/datastore_double.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <stdexcept>
#include <utility>

namespace idempotency::testing {
namespace {

using Json = nlohmann::json;

// Normalizes an RFC 3339 UTC timestamp to nanosecond width so strings compare as instants.
std::string normalize_timestamp(const std::string& ts) {
  if (ts.size() < 20 || ts.back() != 'Z') throw std::invalid_argument("timestamp");
  std::string head = ts.substr(0, 19);
  std::string frac;
  if (ts[19] == '.') frac = ts.substr(20, ts.size() - 21);
  if (frac.size() > 9) throw std::invalid_argument("timestamp");
  frac.resize(9, '0');
  return head + "." + frac + "Z";
}

// Orders two property values of one type; nullopt when they do not compare.
std::optional<int> compare(const Json& a, const Json& b) {
  if (a.contains("integerValue") && b.contains("integerValue")) {
    const auto x = std::stoll(a["integerValue"].get<std::string>());
    const auto y = std::stoll(b["integerValue"].get<std::string>());
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.contains("timestampValue") && b.contains("timestampValue")) {
    const auto x = normalize_timestamp(a["timestampValue"].get<std::string>());
    const auto y = normalize_timestamp(b["timestampValue"].get<std::string>());
    return x.compare(y) < 0 ? -1 : (x.compare(y) > 0 ? 1 : 0);
  }
  if (a.contains("stringValue") && b.contains("stringValue")) {
    const int c = a["stringValue"].get<std::string>().compare(b["stringValue"].get<std::string>());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  return std::nullopt;
}

bool matches(const std::string& op, int c) {
  if (op == "LESS_THAN") return c < 0;
  if (op == "LESS_THAN_OR_EQUAL") return c <= 0;
  if (op == "GREATER_THAN") return c > 0;
  if (op == "GREATER_THAN_OR_EQUAL") return c >= 0;
  if (op == "EQUAL") return c == 0;
  throw std::invalid_argument("unsupported filter op");
}

std::string hex(const std::string& s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

std::string unhex(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i + 1 < s.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(s.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// Datastore refuses indexed strings and blobs over 1500 bytes.
// Rewrites every top-level blobValue of `entity` in base64url without padding.
Json with_url_safe_blobs(Json entity) {
  if (!entity.contains("properties")) return entity;
  for (auto& [name, value] : entity["properties"].items()) {
    if (!value.contains("blobValue")) continue;
    std::string b = value["blobValue"];
    while (!b.empty() && b.back() == '=') b.pop_back();
    std::replace(b.begin(), b.end(), '+', '-');
    std::replace(b.begin(), b.end(), '/', '_');
    value["blobValue"] = b;
  }
  return entity;
}

// Datastore refuses an entity over 1,048,572 bytes, counted as Google documents (a string's
// UTF-8 bytes + 1, a blob's bytes, a property's name + value, the key's names, + 32 and 16).
constexpr std::size_t kMaxEntityBytes = 1'048'572;

void check_properties(const Json& entity) {
  std::size_t size = 32 + 16;
  for (const auto& element : entity.at("key").value("path", Json::array())) {
    size += element.value("kind", "").size() + 1 + element.value("name", "").size() + 1;
  }
  if (!entity.contains("properties")) return;
  for (const auto& [name, value] : entity["properties"].items()) {
    size += name.size() + 1 + 8;
    if (value.contains("stringValue")) size += value["stringValue"].get<std::string>().size() + 1;
    if (value.contains("blobValue")) size += value["blobValue"].get<std::string>().size() * 3 / 4;
    if (value.value("excludeFromIndexes", false)) continue;
    for (const char* type : {"stringValue", "blobValue"}) {
      if (value.contains(type) && value[type].get<std::string>().size() > 1500) {
        throw std::length_error("The value of property \"" + name +
                                "\" is longer than 1500 bytes.");
      }
    }
  }
  if (size > kMaxEntityBytes) throw std::length_error("entity is too big");
}

}  // namespace

DatastoreDouble::DatastoreDouble() : server_(std::make_unique<httplib::Server>()) {
  // Each keep-alive connection holds a worker; leave room for many clients.
  server_->new_task_queue = [] { return new httplib::ThreadPool(64); };
  server_->set_keep_alive_timeout(2);
  server_->set_tcp_nodelay(true);  // no Nagle + delayed-ACK stalls on small replies
  server_->Post(R"(/v1/projects/([^/]+):([A-Za-z]+))",  // domain-scoped ids hold a ':'

                [this](const httplib::Request& req, httplib::Response& res) { handle(req, res); });
  port_ = server_->bind_to_any_port("127.0.0.1");
  if (port_ <= 0) throw std::runtime_error("DatastoreDouble: cannot bind 127.0.0.1");
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // stop() before the accept loop runs would be lost, so wait until it does.
  while (!server_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

DatastoreDouble::~DatastoreDouble() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string DatastoreDouble::endpoint() const {
  return "http://127.0.0.1:" + std::to_string(port_);
}

void DatastoreDouble::inject(Fault fault) {
  std::lock_guard lock(mutex_);
  faults_.push_back(std::move(fault));
}

void DatastoreDouble::after_next(std::string method, std::function<void()> action) {
  std::lock_guard lock(mutex_);
  actions_.emplace_back(std::move(method), std::move(action));
}

void DatastoreDouble::set_latency(std::chrono::milliseconds latency) {
  std::lock_guard lock(mutex_);
  latency_ = latency;
}

void DatastoreDouble::require_token(std::string token) {
  std::lock_guard lock(mutex_);
  token_ = std::move(token);
}

std::string DatastoreDouble::last_header(const std::string& name) const {
  std::lock_guard lock(mutex_);
  const auto it = last_headers_.find(name);
  return it == last_headers_.end() ? std::string() : it->second;
}

int DatastoreDouble::calls(const std::string& method) const {
  std::lock_guard lock(mutex_);
  if (method == "*") {
    int total = 0;
    for (const auto& [m, n] : calls_) total += n;
    return total;
  }
  auto it = calls_.find(method);
  return it == calls_.end() ? 0 : it->second;
}

void DatastoreDouble::reset_counts() {
  std::lock_guard lock(mutex_);
  calls_.clear();
}

std::optional<Json> DatastoreDouble::entity(const std::string& kind,
                                            const std::string& name) const {
  std::lock_guard lock(mutex_);
  for (const auto& [id, stored] : entities_) {
    const Json& path = stored.entity["key"]["path"][0];
    if (path["kind"] == kind && path.value("name", "") == name) return stored.entity;
  }
  return std::nullopt;
}

std::size_t DatastoreDouble::entity_count(const std::string& kind) const {
  std::lock_guard lock(mutex_);
  return static_cast<std::size_t>(std::count_if(entities_.begin(), entities_.end(), [&](auto& e) {
    return e.second.entity["key"]["path"][0]["kind"] == kind;
  }));
}

void DatastoreDouble::put(const Json& entity) {
  std::lock_guard lock(mutex_);
  entities_[key_id(entity.at("key"))] = Stored{entity, ++version_};
}

void DatastoreDouble::set_query_batch_cap(std::size_t n) {
  std::lock_guard lock(mutex_);
  query_batch_cap_ = n;
}

void DatastoreDouble::set_query_scan_limit(std::size_t n) {
  std::lock_guard lock(mutex_);
  query_scan_limit_ = n;
}

void DatastoreDouble::set_query_stalled(bool stalled) {
  std::lock_guard lock(mutex_);
  query_stalled_ = stalled;
}

void DatastoreDouble::set_transaction_entity_group_limit(std::size_t n) {
  std::lock_guard lock(mutex_);
  entity_group_limit_ = n;
}

std::vector<std::string> DatastoreDouble::previous_transactions() const {
  std::lock_guard lock(mutex_);
  return previous_transactions_;
}

void DatastoreDouble::serve_url_safe_blobs(bool on) {
  std::lock_guard lock(mutex_);
  url_safe_blobs_ = on;
}

void DatastoreDouble::set_lookup_defer_beyond(std::size_t n) {
  std::lock_guard lock(mutex_);
  lookup_defer_beyond_ = n;
}

namespace {

constexpr const char* kTooManyEntityGroups =
    "operating on too many entity groups in a single transaction.";

// The API addresses the default database by an empty databaseId and refuses its display name.
void refuse_default_database_name(const nlohmann::json& partition) {
  if (partition.value("databaseId", "") == "(default)") {
    throw std::invalid_argument("'(default)' is not allowed; use empty string");
  }
}

}  // namespace

std::string DatastoreDouble::key_id(const Json& key) {
  const Json& p = key.at("partitionId");
  const Json& path = key.at("path").at(0);
  if (!path.contains("name") && !path.contains("id")) {
    throw std::invalid_argument("The key has no name or id.");
  }
  // An id (an auto-allocated key, another program's) sorts apart from every name.
  const std::string name =
      path.contains("name") ? path["name"].get<std::string>() : "#" + path["id"].get<std::string>();
  if (name.empty() || name.size() > 1500) throw std::invalid_argument("The key name is invalid.");
  if (name.size() >= 4 && name.rfind("__", 0) == 0 && name.substr(name.size() - 2) == "__") {
    throw std::invalid_argument("The key name matches the reserved pattern __.*__.");
  }
  refuse_default_database_name(p);
  const char sep = '\x1f';
  return p.value("projectId", "") + sep + p.value("databaseId", "") + sep +
         p.value("namespaceId", "") + sep + path.at("kind").get<std::string>() + sep + name;
}

DatastoreDouble::Reply DatastoreDouble::error(int http, const std::string& status,
                                              const std::string& message) {
  return Reply{http, Json{{"error", {{"code", http}, {"message", message}, {"status", status}}}}};
}

std::optional<DatastoreDouble::Fault> DatastoreDouble::take_fault(const std::string& method) {
  for (auto it = faults_.begin(); it != faults_.end(); ++it) {
    if (it->method != "*" && it->method != method) continue;
    Fault f = *it;
    if (--it->count <= 0) faults_.erase(it);
    return f;
  }
  return std::nullopt;
}

std::int64_t DatastoreDouble::current_version(const std::string& id) const {
  auto it = entities_.find(id);
  return it == entities_.end() ? 0 : it->second.version;
}

void DatastoreDouble::handle(const httplib::Request& req, httplib::Response& res) {
  const std::string method = req.matches[2];
  std::optional<Fault> fault;
  std::function<void()> action;
  std::chrono::milliseconds latency{0};
  Reply reply;
  {
    std::lock_guard lock(mutex_);
    calls_[method]++;
    last_headers_.clear();
    for (const auto& [name, value] : req.headers) {
      std::string lower = name;
      std::transform(lower.begin(), lower.end(), lower.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      last_headers_[lower] = value;
    }
    latency = latency_;
    if (!token_.empty() && req.get_header_value("Authorization") != "Bearer " + token_) {
      reply = error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.");
    } else {
      fault = take_fault(method);
      if (fault && !fault->after_apply) {
        reply = error(fault->http, fault->status, fault->message);
      } else {
        try {
          reply = dispatch(method, Json::parse(req.body));
        } catch (const std::exception& e) {
          reply = error(400, "INVALID_ARGUMENT", e.what());
        }
      }
      auto it = std::find_if(actions_.begin(), actions_.end(),
                             [&](const auto& a) { return a.first == method; });
      if (it != actions_.end()) {
        action = std::move(it->second);
        actions_.erase(it);
      }
    }
  }
  if (action) action();  // unlocked: it may call this double through another client
  if (latency.count() > 0) std::this_thread::sleep_for(latency);
  if (fault && fault->after_apply && reply.http == 200) {
    if (fault->delay.count() > 0) {
      std::this_thread::sleep_for(fault->delay);  // the client gave up long ago
    } else {
      reply = error(fault->http, fault->status, fault->message);
    }
  }
  res.status = reply.http;
  res.set_content(reply.body.dump(), "application/json");
}

DatastoreDouble::Reply DatastoreDouble::dispatch(const std::string& method, const Json& body) {
  if (method == "beginTransaction") return begin_transaction(body);
  if (method == "lookup") return lookup(body);
  if (method == "commit") return commit(body);
  if (method == "rollback") return rollback(body);
  if (method == "runQuery") return run_query(body);
  return error(404, "NOT_FOUND", "unknown method " + method);
}

DatastoreDouble::Reply DatastoreDouble::begin_transaction(const Json& body) {
  const Json options = body.value("transactionOptions", Json::object());
  previous_transactions_.push_back(
      options.value("readWrite", Json::object()).value("previousTransaction", ""));
  const std::string id = "tx" + std::to_string(++next_tx_);
  transactions_[id] = Transaction{};
  return Reply{200, Json{{"transaction", id}}};
}

DatastoreDouble::Reply DatastoreDouble::lookup(const Json& body) {
  Transaction* tx = nullptr;
  if (body.contains("readOptions") && body["readOptions"].contains("transaction")) {
    auto it = transactions_.find(body["readOptions"]["transaction"].get<std::string>());
    if (it == transactions_.end()) {
      return error(400, "INVALID_ARGUMENT", "The referenced transaction has expired.");
    }
    tx = &it->second;
  }
  Json found = Json::array();
  Json missing = Json::array();
  Json deferred = Json::array();
  std::size_t answered = 0;
  for (const auto& key : body.at("keys")) {
    if (lookup_defer_beyond_ != 0 && answered++ >= lookup_defer_beyond_) {
      deferred.push_back(key);
      continue;
    }
    const std::string id = key_id(key);
    auto it = entities_.find(id);
    if (tx != nullptr) tx->reads[id] = current_version(id);
    if (it == entities_.end()) {
      missing.push_back({{"entity", {{"key", key}}}, {"version", std::to_string(version_)}});
    } else {
      found.push_back(
          {{"entity", url_safe_blobs_ ? with_url_safe_blobs(it->second.entity) : it->second.entity},
           {"version", std::to_string(it->second.version)}});
    }
  }
  // Keys have one path element here, so a key id names its entity group.
  if (tx != nullptr && entity_group_limit_ != 0 && tx->reads.size() > entity_group_limit_) {
    return error(400, "INVALID_ARGUMENT", kTooManyEntityGroups);
  }
  Json out = Json::object();
  if (!found.empty()) out["found"] = found;
  if (!missing.empty()) out["missing"] = missing;
  if (!deferred.empty()) out["deferred"] = deferred;
  return Reply{200, out};
}

DatastoreDouble::Reply DatastoreDouble::commit(const Json& body) {
  const bool transactional = body.value("mode", "TRANSACTIONAL") == "TRANSACTIONAL";
  if (transactional) {
    auto it = transactions_.find(body.value("transaction", ""));
    if (it == transactions_.end()) {
      return error(400, "INVALID_ARGUMENT",
                   "The referenced transaction has expired or is no longer valid.");
    }
    const Transaction tx = it->second;
    transactions_.erase(it);
    for (const auto& [id, version] : tx.reads) {
      if (current_version(id) != version) {
        return error(409, "ABORTED",
                     "Aborted due to cross-transaction contention. This occurs when multiple "
                     "transactions attempt to access the same data.");
      }
    }
    if (entity_group_limit_ != 0) {
      std::set<std::string> groups;
      for (const auto& [id, version] : tx.reads) groups.insert(id);
      for (const auto& m : body.value("mutations", Json::array())) {
        for (const auto& [op, target] : m.items()) {
          if (op != "baseVersion")
            groups.insert(key_id(op == "delete" ? target : target.at("key")));
        }
      }
      if (groups.size() > entity_group_limit_) {
        return error(400, "INVALID_ARGUMENT", kTooManyEntityGroups);
      }
    }
  }
  // Validate every mutation before applying any: a commit is all or nothing.
  const Json& mutations = body.value("mutations", Json::array());
  for (const auto& m : mutations) {
    for (const auto& [op, target] : m.items()) {
      if (op == "baseVersion") continue;
      const Json& key = op == "delete" ? target : target.at("key");
      const std::string id = key_id(key);
      if (op != "delete") check_properties(target);
      if (m.contains("baseVersion") &&
          current_version(id) != std::stoll(m["baseVersion"].get<std::string>())) {
        if (transactional) return error(409, "ABORTED", "baseVersion mismatch");
      }
      if (op == "insert" && entities_.count(id) != 0) {
        return error(409, "ALREADY_EXISTS", "entity already exists");
      }
      if (op == "update" && entities_.count(id) == 0) {
        return error(404, "NOT_FOUND", "no entity to update");
      }
    }
  }
  Json results = Json::array();
  for (const auto& m : mutations) {
    for (const auto& [op, target] : m.items()) {
      if (op == "baseVersion") continue;
      const Json& key = op == "delete" ? target : target.at("key");
      const std::string id = key_id(key);
      if (!transactional && m.contains("baseVersion") &&
          current_version(id) != std::stoll(m["baseVersion"].get<std::string>())) {
        results.push_back(
            {{"version", std::to_string(current_version(id))}, {"conflictDetected", true}});
        continue;
      }
      if (op == "delete") {
        entities_.erase(id);
        results.push_back({{"version", std::to_string(++version_)}});
      } else {
        entities_[id] = Stored{target, ++version_};
        results.push_back({{"version", std::to_string(version_)}});
      }
    }
  }
  return Reply{200, Json{{"mutationResults", results}, {"indexUpdates", 0}}};
}

DatastoreDouble::Reply DatastoreDouble::rollback(const Json& body) {
  if (transactions_.erase(body.value("transaction", "")) == 0) {
    return error(400, "INVALID_ARGUMENT", "The referenced transaction has expired.");
  }
  return Reply{200, Json::object()};
}

DatastoreDouble::Reply DatastoreDouble::run_query(const Json& body) {
  const Json& q = body.at("query");
  const Json& p = body.value("partitionId", Json::object());
  refuse_default_database_name(p);
  const std::string kind = q.at("kind").at(0).at("name").get<std::string>();
  bool keys_only = false;
  if (q.contains("projection")) {
    for (const auto& pr : q["projection"]) {
      if (pr["property"]["name"] == "__key__") keys_only = true;
    }
  }
  std::optional<Json> filter;
  if (q.contains("filter")) filter = q["filter"].at("propertyFilter");
  const std::size_t limit =
      q.contains("limit") ? static_cast<std::size_t>(q["limit"].is_string()
                                                         ? std::stoll(q["limit"].get<std::string>())
                                                         : q["limit"].get<std::int64_t>())
                          : SIZE_MAX;
  const std::string start = q.value("startCursor", "");
  const std::string after = unhex(start);
  if (query_stalled_) {
    Json batch = {{"entityResultType", keys_only ? "KEY_ONLY" : "FULL"},
                  {"endCursor", start.empty() ? hex(std::string(1, '\0')) : start},
                  {"moreResults", "NOT_FINISHED"}};
    return Reply{200, Json{{"batch", batch}}};
  }
  Json results = Json::array();
  bool more = false;
  bool not_finished = false;
  std::size_t examined = 0;
  std::string last;  // the last entity examined and passed over: where the batch ends
  for (const auto& [id, stored] : entities_) {  // key order
    if (!after.empty() && id <= after) continue;
    if (query_scan_limit_ != 0 && examined++ == query_scan_limit_) {
      not_finished = true;
      break;
    }
    const std::string before = std::exchange(last, id);
    const Json& key = stored.entity["key"];
    const Json& kp = key["partitionId"];
    if (key["path"][0]["kind"] != kind || kp.value("projectId", "") != p.value("projectId", "") ||
        kp.value("databaseId", "") != p.value("databaseId", "") ||
        kp.value("namespaceId", "") != p.value("namespaceId", "")) {
      continue;
    }
    if (filter) {
      const std::string prop = (*filter)["property"]["name"];
      const Json& props = stored.entity.value("properties", Json::object());
      // Unindexed properties are invisible to queries, as in Datastore.
      if (!props.contains(prop) || props[prop].value("excludeFromIndexes", false)) continue;
      const auto c = compare(props[prop], (*filter)["value"]);
      if (!c || !matches((*filter)["op"], *c)) continue;
    }
    if (results.size() == limit) {
      more = true;
      last = before;
      break;
    }
    if (query_batch_cap_ != 0 && results.size() == query_batch_cap_) {
      not_finished = true;
      last = before;
      break;
    }
    Json entity = keys_only ? Json{{"key", key}} : stored.entity;
    results.push_back(
        {{"entity", entity}, {"version", std::to_string(stored.version)}, {"cursor", hex(id)}});
  }
  Json batch = {{"entityResultType", keys_only ? "KEY_ONLY" : "FULL"},
                {"entityResults", results},
                {"moreResults", not_finished ? "NOT_FINISHED"
                                : more       ? "MORE_RESULTS_AFTER_LIMIT"
                                             : "NO_MORE_RESULTS"}};
  if (!last.empty()) {
    batch["endCursor"] = hex(last);
  } else if (!start.empty()) {
    batch["endCursor"] = start;
  }
  return Reply{200, Json{{"batch", batch}}};
}

}  // namespace idempotency::testing
