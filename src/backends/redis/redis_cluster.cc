// ClusterRouter: the slot map, the per-node pools and the redirect / retry loop.
#include "redis_cluster.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>
#include <optional>
#include <thread>
#include <utility>

#include "idempotency/errors.h"
#include "redis_script_call.h"

namespace idempotency::redis_detail {
namespace {

// Attempts per call: redirects and retryable states together. A resharding moves one slot at
// a time, so a command meets at most a MOVED and an ASK in a row; the rest is for failover
// (CLUSTERDOWN / refused connections until a replica is promoted, node timeout + election).
constexpr int kAttempts = 12;
// Back-off before retry n (n ≥ 1) after TRYAGAIN, CLUSTERDOWN or a lost connection: 25 ms
// doubling, capped at 800 ms, so the retries span about 6 s — longer than a failover with the
// usual node timeouts of a few seconds, short enough that a dead cluster fails a call soon.
std::chrono::milliseconds backoff(int retry) {
  return std::chrono::milliseconds(std::min(800, 25 << std::min(retry, 6)));
}

// The host to reach a node at: the one it announces, or, when it announces none (nil in
// CLUSTER SLOTS with Redis 7's cluster-preferred-endpoint-type unknown-endpoint, "", "?", or
// "MOVED 3999 :6381"), the host we asked, as behind NAT.
std::string announced_or(std::string announced, const std::string& asked) {
  if (announced.empty() || announced == "?") return asked;
  return announced;
}

// The node named by a "MOVED 3999 127.0.0.1:6381" / "ASK …" error; nullopt when malformed.
std::optional<RedisNode> redirect_target(const redisReply* r, const RedisNode& asked) {
  const std::string_view s(r->str, r->len);
  const std::size_t space = s.rfind(' ');
  const std::size_t colon = s.rfind(':');
  if (space == std::string_view::npos || colon == std::string_view::npos || colon < space) {
    return std::nullopt;
  }
  RedisNode node;
  node.host = announced_or(std::string(s.substr(space + 1, colon - space - 1)), asked.host);
  const std::string_view port = s.substr(colon + 1);
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), node.port);
  if (ec != std::errc() || ptr != port.data() + port.size()) return std::nullopt;
  return node;
}

bool same(const RedisNode& a, const RedisNode& b) { return a.port == b.port && a.host == b.host; }

}  // namespace

ClusterRouter::ClusterRouter(std::vector<RedisNode> seeds, Connect connect, std::size_t pool_size,
                             std::chrono::milliseconds pool_wait, std::size_t pipelines)
    : seeds_(std::move(seeds)),
      connect_(std::move(connect)),
      pool_size_(pool_size),
      pool_wait_(pool_wait),
      pipelines_(pipelines) {
  slots_.fill(kNoNode);
}

std::size_t ClusterRouter::node_index(const RedisNode& address) {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (same(nodes_[i].address, address)) return i;
  }
  auto pool = std::make_unique<Pool>(
      "redis " + address.host + ":" + std::to_string(address.port), pool_size_, pool_wait_,
      [this, address] { return connect_(address); },
      [](const ConnectionPtr& c) { return c->failure() == IoFailure::kNone; });
  std::unique_ptr<Pipelines> pipelines;
  if (pipelines_ > 0) {
    pipelines =
        std::make_unique<Pipelines>(pipelines_, [this, address] { return connect_(address); });
  }
  nodes_.push_back(Node{address, std::move(pool), std::move(pipelines)});
  return nodes_.size() - 1;
}

ClusterRouter::Node& ClusterRouter::node_for(const RedisNode& address) {
  {
    std::shared_lock lock(mu_);
    for (Node& n : nodes_) {
      if (same(n.address, address)) return n;
    }
  }
  std::unique_lock lock(mu_);
  return nodes_[node_index(address)];
}

ClusterRouter::Node& ClusterRouter::node_for_slot(std::uint16_t slot) {
  for (int pass = 0; pass < 2; ++pass) {
    {
      std::shared_lock lock(mu_);
      if (loaded_ && slots_[slot] != kNoNode) return nodes_[slots_[slot]];
    }
    refresh();
  }
  throw StoreError("redis: cluster slot " + std::to_string(slot) + " has no master");
}

bool ClusterRouter::load_from(const RedisNode& address, std::string& why) {
  ConnectionPtr conn;
  try {
    conn = connect_(address);
  } catch (const StoreError& e) {
    why = e.what();
    return false;
  }
  ReplyPtr r = conn->command({"CLUSTER", "SLOTS"});
  if (!r) {
    why = conn->error();
    return false;
  }
  if (r->type == REDIS_REPLY_ERROR) {
    why = "redis: CLUSTER SLOTS failed: " + std::string(reply_view(r.get()));
    return false;
  }
  if (r->type != REDIS_REPLY_ARRAY) {
    why = "redis: unexpected reply to CLUSTER SLOTS";
    return false;
  }
  // Each entry: start, end, then the master [host, port, id, …] and its replicas.
  std::array<std::uint32_t, kClusterSlots> map{};
  map.fill(kNoNode);
  std::unique_lock lock(mu_);
  for (std::size_t i = 0; i < r->elements; ++i) {
    const redisReply* e = r->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
        e->element[0]->type != REDIS_REPLY_INTEGER || e->element[1]->type != REDIS_REPLY_INTEGER ||
        e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2 ||
        (e->element[2]->element[0]->type != REDIS_REPLY_STRING &&
         e->element[2]->element[0]->type != REDIS_REPLY_NIL) ||
        e->element[2]->element[1]->type != REDIS_REPLY_INTEGER) {
      why = "redis: unexpected entry in the reply to CLUSTER SLOTS";
      return false;
    }
    const long long first = e->element[0]->integer;
    const long long last = e->element[1]->integer;
    if (first < 0 || last >= kClusterSlots || first > last) {
      why = "redis: CLUSTER SLOTS names a slot out of range";
      return false;
    }
    const redisReply* host = e->element[2]->element[0];
    const RedisNode master{
        announced_or(host->type == REDIS_REPLY_NIL ? std::string() : std::string(reply_view(host)),
                     address.host),
        static_cast<int>(e->element[2]->element[1]->integer)};
    const auto index = static_cast<std::uint32_t>(node_index(master));
    std::fill(map.begin() + first, map.begin() + last + 1, index);
  }
  if (std::find(map.begin(), map.end(), kNoNode) != map.end()) {
    why = "redis: the cluster does not serve every slot (CLUSTERDOWN?)";
    return false;
  }
  slots_ = map;
  loaded_ = true;
  return true;
}

void ClusterRouter::refresh() {
  const std::uint64_t seen = refreshes_.load();
  std::lock_guard one(refresh_mu_);
  // A refresh begun after this call was (refreshes run one at a time, so it has ended): its
  // map, or its failure, is as new as this one's would be. Asking the same nodes again, one
  // caller after another, would cost each caller a connect timeout for every node gone.
  if (refreshes_.load() != seen) {
    if (!last_refresh_error_.empty()) throw StoreError(last_refresh_error_);
    return;
  }
  refreshes_.fetch_add(1);
  const std::vector<RedisNode> candidates = refresh_candidates();
  std::string why = "redis: no cluster node given";
  bool loaded = false;
  for (const RedisNode& node : candidates) {
    if (load_from(node, why)) {
      loaded = true;
      break;
    }
  }
  last_refresh_error_ = loaded ? std::string() : why;
  if (!loaded) throw StoreError(why);
}

// The masters of the current map first (they are current), then every other node ever seen
// (a replica promoted since may be among them), then the seeds; each once. A master gone from
// the map, which may drop connection attempts until their timeout, is thus asked last.
std::vector<RedisNode> ClusterRouter::refresh_candidates() const {
  std::vector<RedisNode> candidates;
  auto add = [&](const RedisNode& node) {
    if (std::none_of(candidates.begin(), candidates.end(),
                     [&](const RedisNode& c) { return same(c, node); })) {
      candidates.push_back(node);
    }
  };
  std::shared_lock lock(mu_);
  if (loaded_) {
    std::vector<bool> master(nodes_.size(), false);
    for (const std::uint32_t index : slots_) {
      if (index != kNoNode && !master[index]) {
        master[index] = true;
        add(nodes_[index].address);
      }
    }
  }
  for (const Node& n : nodes_) add(n.address);
  for (const RedisNode& seed : seeds_) add(seed);
  return candidates;
}

std::size_t ClusterRouter::masters() const {
  std::shared_lock lock(mu_);
  std::vector<std::uint32_t> seen(slots_.begin(), slots_.end());
  std::sort(seen.begin(), seen.end());
  return static_cast<std::size_t>(std::unique(seen.begin(), seen.end()) - seen.begin());
}

ConnectionPtr ClusterRouter::connect_for(std::string_view key) {
  const std::uint16_t slot = key_slot(key);
  return connect_(node_for_slot(slot).address);
}

ReplyPtr ClusterRouter::call(std::string_view key, const std::vector<std::string_view>& args,
                             const Script* script, const std::vector<std::string_view>& then,
                             ReplyPtr* then_reply) {
  const std::uint16_t slot = key_slot(key);
  std::optional<RedisNode> ask;  // set after an ASK: the next attempt goes there, once
  std::string last_error = "redis: cluster call failed";
  int retries = 0;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    Node* node = nullptr;
    try {
      node = ask ? &node_for(*ask) : &node_for_slot(slot);
    } catch (const StoreError& e) {  // no node answered CLUSTER SLOTS: the cluster is down
      last_error = e.what();
      std::this_thread::sleep_for(backoff(++retries));
      continue;
    }
    std::optional<Pool::Lease> lease;
    ReplyPtr r;
    IoFailure failure = IoFailure::kNone;  // how the connection failed, when r is null
    if (node->pipelines && !ask && then.empty()) {
      PipelinedCall call;
      r = call_pipelined(*node->pipelines, args, script, call);
      if (!r) {
        last_error = call.failed.error;
        failure = call.failed.failure;
      }
    } else {
      Pool* pool = node->pool.get();
      try {
        lease.emplace(pool->acquire());
      } catch (const StoreError& e) {  // refused: the node may be dead and its replica rising
        last_error = e.what();
        std::this_thread::sleep_for(backoff(++retries));
        refresh_quietly();
        continue;
      }
      Connection* conn = lease->get();
      if (ask) {
        ReplyPtr asking = conn->command({"ASKING"});
        ask.reset();
        if (!asking || asking->type == REDIS_REPLY_ERROR) {
          last_error = asking ? "redis: ASKING failed: " + std::string(reply_view(asking.get()))
                              : conn->error();
          if (!asking) lease->broken();
          continue;
        }
      }
      r = script != nullptr ? call_script(*lease, args, *script, then, then_reply)
                            : conn->command(args);
      if (!r) {
        last_error = conn->error();
        failure = conn->failure();
        lease->broken();
      }
    }
    if (!r) {
      // A timeout may have run the command: never repeat it as if it had not.
      if (failure == IoFailure::kTimedOut) throw StoreError(last_error);
      std::this_thread::sleep_for(backoff(++retries));
      refresh_quietly();
      continue;
    }
    if (is_error_reply(r.get(), "MOVED ")) {
      lease.reset();
      last_error = "redis: too many cluster redirects";
      const std::optional<RedisNode> moved = redirect_target(r.get(), node->address);
      if (!moved) throw StoreError("redis: malformed MOVED redirect");
      refresh_quietly();
      // The redirect is the owner's own word, newer than any map a replica may still serve.
      std::unique_lock lock(mu_);
      slots_[slot] = static_cast<std::uint32_t>(node_index(*moved));
      continue;
    }
    if (is_error_reply(r.get(), "ASK ")) {
      ask = redirect_target(r.get(), node->address);
      if (!ask) throw StoreError("redis: malformed ASK redirect");
      last_error = "redis: too many cluster redirects";
      continue;
    }
    if (is_error_reply(r.get(), "TRYAGAIN") || is_error_reply(r.get(), "CLUSTERDOWN")) {
      last_error = "redis: " + std::string(reply_view(r.get()));
      lease.reset();
      std::this_thread::sleep_for(backoff(++retries));
      if (is_error_reply(r.get(), "CLUSTERDOWN")) refresh_quietly();
      continue;
    }
    return r;
  }
  throw StoreError(last_error + " (gave up after " + std::to_string(kAttempts) + " attempts)");
}

void ClusterRouter::refresh_quietly() noexcept {
  try {
    refresh();
  } catch (const std::exception&) {
    // The next attempt finds the old map (or none) and fails or retries on its own.
  }
}

}  // namespace idempotency::redis_detail
