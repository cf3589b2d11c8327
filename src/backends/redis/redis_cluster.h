// ClusterRouter: sends each command of a Redis Cluster client to the master that serves its
// key's slot. It learns the slot map with CLUSTER SLOTS (from any node it knows, the URL's
// seeds first), keeps pipelined connections or a bounded pool per master, and follows the cluster's
// answers: MOVED → reload the map and retry on the named node; ASK → ASKING and the command
// once on the named node (the slot is migrating; the map stays); TRYAGAIN, CLUSTERDOWN and a
// lost or refused connection → a few retries with back-off, then `StoreError`. A command is
// only ever repeated when repeating it is safe (the lock's scripts are: a claim carries its
// claim token, complete / release / extend their fence), and a timeout is never retried: the
// command may have run.
//
// Thread safety: every member is safe from any number of threads.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/connection_pool.h"
#include "idempotency/redis_lock.h"
#include "redis_cluster_slot.h"
#include "redis_connection.h"
#include "redis_pipeline.h"

namespace idempotency::redis_detail {

struct Script;  // redis_script_call.h

/// ClusterRouter routes commands by key slot over per-node connection pools.
class ClusterRouter {
 public:
  /// Opens a connection to a node, authenticated; throws `StoreError` when it cannot.
  using Connect = std::function<ConnectionPtr(const RedisNode&)>;
  using Pool = store_detail::ConnectionPool<ConnectionPtr>;

  /// ClusterRouter() keeps `seeds` and opens nothing; each node's pool holds at most
  /// `pool_size` connections, waited for up to `pool_wait`. With `pipelines` > 0, calls to a
  /// node go over that many pipelined connections of its own (redis_pipeline.h) instead, but
  /// for the pool's two uses: `ASKING` and the command after it on one connection, and `then`.
  ClusterRouter(std::vector<RedisNode> seeds, Connect connect, std::size_t pool_size,
                std::chrono::milliseconds pool_wait, std::size_t pipelines = 0);

  /// refresh() reloads the slot map from the first known node that answers CLUSTER SLOTS.
  /// Throws `StoreError` when none does or the map does not cover every slot.
  void refresh();

  /// call() runs `args` on the master serving `key`'s slot and returns its reply (an error
  /// reply other than a redirect or a retryable state is returned as it is). With `script`,
  /// `args` is its EVALSHA, sent by call_script() (redis_script_call.h): after NOSCRIPT the
  /// script is loaded on that node and the command sent once more, and `then` (e.g. WAIT)
  /// follows on the same connection once `args` succeeded, its reply going to `*then_reply`.
  /// Throws `StoreError` when the retries run out, or when `then` fails (it is never retried:
  /// `args` already ran).
  [[nodiscard]] ReplyPtr call(std::string_view key, const std::vector<std::string_view>& args,
                              const Script* script = nullptr,
                              const std::vector<std::string_view>& then = {},
                              ReplyPtr* then_reply = nullptr);

  /// connect_for() opens a connection of its own (outside the pools) to the master serving
  /// `key`'s slot, for a subscriber. Throws `StoreError` when it cannot.
  [[nodiscard]] ConnectionPtr connect_for(std::string_view key);

  /// masters() counts the masters in the current slot map (for tests).
  [[nodiscard]] std::size_t masters() const;

 private:
  struct Node {
    RedisNode address;
    std::unique_ptr<Pool> pool;
    std::unique_ptr<Pipelines> pipelines;  // null without pipelining
  };

  // node_index() finds or adds the node at `address`. Under mu_ (exclusive).
  std::size_t node_index(const RedisNode& address);
  // node_for_slot() is the slot's master, loading the map first when it is empty.
  Node& node_for_slot(std::uint16_t slot);
  Node& node_for(const RedisNode& address);
  // refresh_quietly() is refresh() for a retry loop: a failure is left to the next attempt.
  void refresh_quietly() noexcept;
  // load_from() reads CLUSTER SLOTS from `address`; false when that node cannot answer.
  bool load_from(const RedisNode& address, std::string& why);
  // refresh_candidates() is the nodes a refresh asks, in the order it asks them.
  [[nodiscard]] std::vector<RedisNode> refresh_candidates() const;

  const std::vector<RedisNode> seeds_;
  const Connect connect_;
  const std::size_t pool_size_;
  const std::chrono::milliseconds pool_wait_;
  const std::size_t pipelines_;

  mutable std::shared_mutex mu_;
  // Only appended to, and a deque: indices and references to a Node stay valid.
  std::deque<Node> nodes_;
  static constexpr std::uint32_t kNoNode = 0xFFFFFFFF;
  std::array<std::uint32_t, kClusterSlots> slots_{};  // index into nodes_, or kNoNode
  bool loaded_ = false;
  std::mutex refresh_mu_;                    // one CLUSTER SLOTS at a time
  std::atomic<std::uint64_t> refreshes_{0};  // refreshes begun
  std::string last_refresh_error_;           // the last one's failure, or empty; refresh_mu_
};

}  // namespace idempotency::redis_detail
