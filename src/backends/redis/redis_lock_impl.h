// RedisLock::Impl: what RedisLock's operations share, blocking and asynchronous: the options
// and endpoint, the connections (a pool, shared pipelined connections, a cluster router, the
// I/O thread's pipeline), the script and how it is called. Private to the Redis backend:
// redis_lock.cc holds the blocking operations and the wait, redis_lock_async.cc the
// asynchronous ones.
#pragma once

#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/connection_pool.h"
#include "common/notify_wait.h"
#include "idempotency/detail/async_outcome.h"
#include "idempotency/errors.h"
#include "idempotency/key.h"
#include "idempotency/redis_lock.h"
#include "redis_async_pipeline.h"
#include "redis_cluster.h"
#include "redis_connection.h"
#include "redis_fresh_claim.h"
#include "redis_internal.h"
#include "redis_open.h"
#include "redis_pipeline.h"
#include "redis_script_call.h"
#include "redis_tls.h"

namespace idempotency {

using redis_detail::Connection;
using redis_detail::ConnectionPtr;
using redis_detail::IoFailure;
using redis_detail::is_error_reply;
using redis_detail::ReplyPtr;
using redis_detail::throw_reply_error;

namespace redis_detail {

/// optional_arg() is an optional value as the script takes it: "-" for none, "+" and its bytes.
inline std::string optional_arg(const std::optional<std::string>& v) {
  return v ? "+" + *v : std::string("-");
}

// What an asynchronous script call delivers: the connection's failure (`error`) without a
// reply, the server's for an error reply, else `decode()` of the reply.
template <class T, class Decode>
std::variant<T, StoreFailure> async_outcome(const ReplyPtr& r, std::string error, Decode&& decode) {
  if (!r) return StoreFailure{std::move(error)};
  return detail::outcome_of<T>([&] {
    if (is_error_reply(r.get())) throw_reply_error(r.get(), "script failed");
    return decode();
  });
}

}  // namespace redis_detail

using redis_detail::async_outcome;
using redis_detail::optional_arg;

struct RedisLock::Impl {
  Impl(std::string_view url, RedisOptions o)
      : options(redis_detail::validated(std::move(o))),
        endpoint(parse_redis_url(url)),
        wait_replicas(std::to_string(endpoint.replicas)),
        wait_ms(std::to_string(options.command_timeout.count() / 2)),
        tls(endpoint.tls ? std::make_unique<redis_detail::TlsContext>(*endpoint.tls) : nullptr),
        // `?replicas=N` waits (WAIT) on the connection that wrote: pooled connections only.
        shared(endpoint.replicas == 0 ? endpoint.pipelines.value_or(options.pipelines) : 0),
        pool(
            "redis", options.pool_size, options.pool_wait, [this] { return connect(); },
            [](const ConnectionPtr& c) { return c->failure() == IoFailure::kNone; }) {
    if (endpoint.cluster) {
      // Wake-ups go by sharded pub/sub: SPUBLISH reaches only the nodes of the key's shard,
      // where the waiter SSUBSCRIBEs, instead of every node of the cluster.
      std::string s(redis_detail::kScript);
      constexpr std::string_view kPublish = "('PUBLISH',";
      constexpr std::string_view kShardPublish = "('SPUBLISH',";
      for (std::size_t at = s.find(kPublish); at != std::string::npos;
           at = s.find(kPublish, at + kShardPublish.size())) {
        s.replace(at, kPublish.size(), kShardPublish);
      }
      script = std::move(s);
      cluster = std::make_unique<redis_detail::ClusterRouter>(
          endpoint.seeds, [this](const RedisNode& node) { return connect_to(node); },
          options.pool_size, options.pool_wait, shared);
    } else {
      script = std::string(redis_detail::kScript);
    }
    if (endpoint.replicas > 0) wait_command = {"WAIT", wait_replicas, wait_ms};
    if (!endpoint.cluster && shared > 0) {
      pipelines = std::make_unique<redis_detail::Pipelines>(shared, [this] { return connect(); });
    }
  }

  RedisOptions options;
  RedisEndpoint endpoint;
  // `?replicas=N`'s WAIT N <command_timeout / 2>, built once; empty without it.
  std::string wait_replicas;
  std::string wait_ms;
  std::vector<std::string_view> wait_command;
  std::unique_ptr<const redis_detail::TlsContext> tls;  // for rediss://, shared by connections
  std::size_t shared;    // pipelined connections (per master on a cluster); 0: the pool
  std::string script;    // kScript, with SPUBLISH for PUBLISH in cluster mode
  std::string sha;       // of `script`, as the server reported it; set once in the constructor
  std::string ttl_text;  // the backend's ttl in ms, as the script takes it; set there too
  std::unique_ptr<redis_detail::ClusterRouter> cluster;  // for the cluster schemes only
  // How waits ended.
  store_detail::WaitTally waits;
  // The shared connections of a single node without `?replicas=N`; null otherwise.
  std::unique_ptr<redis_detail::Pipelines> pipelines;
  store_detail::ConnectionPool<ConnectionPtr> pool;  // its connections are closed early
  // Whether a claim tries redis_fresh_claim.h first, without the script: on the server's clock
  // only (the record expires with the key), on a single node's shared connections (pipelined,
  // or claim_async's), which send its commands back to back. A server that refuses them (before
  // Redis 7) turns this off for good at its first refusal (FreshAnswer::refused).
  std::atomic<bool> fresh_claims{true};
  // Whether the last such claim met a claimed record: then the next sends TIME along, so a hot
  // key's live holder is answered without the script, and a fresh key or a replay never pays it.
  std::atomic<bool> meets_claimed{false};
  // claim_async's and complete_async's connection and I/O thread, made by the first such call.
  // Last: destroyed first, it ends the calls in flight while what their callbacks use exists.
  std::once_flag async_made;
  std::unique_ptr<redis_detail::AsyncPipeline> async;
  using Lease = store_detail::ConnectionPool<ConnectionPtr>::Lease;

  // Asynchronous calls go over their own connection where blocking ones are pipelined too: a
  // single node, without WAIT (which would hold the connection every call shares).
  [[nodiscard]] bool async_capable() const {
    return !cluster && endpoint.replicas == 0 && shared > 0;
  }

  redis_detail::AsyncPipeline& async_pipeline() {
    std::call_once(async_made, [this] {
      async = std::make_unique<redis_detail::AsyncPipeline>(
          [this] { return connect(); },
          [this](std::span<const redis_detail::AsyncPipeline::Part> parts, std::string& command) {
            return join_completes(parts, command);
          });
    });
    return *async;
  }

  // The completes queued for one write, joined into one call of the script (complete_many):
  // its ~20k instructions of a complete's ~65k paid once for them all, on the server whose
  // one core bounds a single node (BENCHMARKS.md, "Completes joined into one script call").
  bool join_completes(std::span<const redis_detail::AsyncPipeline::Part> parts,
                      std::string& command) const {
    const std::string count = std::to_string(parts.size());
    std::vector<std::string_view> args = {"EVALSHA", sha, count};
    args.reserve(5 + 2 * parts.size());
    for (const auto& p : parts) args.emplace_back(p.key);
    args.emplace_back("complete_many");
    args.emplace_back(ttl_text);
    for (const auto& p : parts) args.emplace_back(p.arg);
    return Connection::format(args, command);
  }

  // complete_joined() is complete_async of a fresh claim (fence 1, the server's clock): joined
  // with the others queued for the same write; a key it did not complete (another form, a
  // record at its expiry, NOSCRIPT, a failure safe to retry) is sent alone, to the script's
  // general path, which decides.
  void complete_joined(const Claim& claim, const std::optional<std::string>& result,
                       CompleteDone done) {
    std::string key = redis_key(claim.key);
    std::string arg = optional_arg(result);
    redis_detail::AsyncPipeline::Part part{key, arg};  // copies: the callback keeps its own
    async_pipeline().call_joined(
        std::move(part), [this, key = std::move(key), arg = std::move(arg), done = std::move(done)](
                             const redis_detail::AsyncOutcome& joined, std::size_t index) mutable {
          const redis_detail::PipelineOutcome& o = joined.outcome;
          if (o.reply && redis_detail::decode_joined_complete(o.reply.get(), index)) {
            done(true);
            return;
          }
          if (!o.reply && !redis_detail::retry_is_safe(o, joined.fresh, joined.unreachable, true)) {
            done(StoreFailure{o.error});
            return;
          }
          complete_alone(key, "1", std::move(arg), std::move(done));
        });
  }

  // complete_alone() is complete_async as one script call of its own (the fence as text).
  void complete_alone(const std::string& redis_key, std::string fence, std::string result_arg,
                      CompleteDone done) {
    eval_async(redis_key,
               {"complete", now_arg(), std::move(fence), ttl_text, std::move(result_arg)},
               [done = std::move(done)](ReplyPtr r, std::string error) {
                 done(async_outcome<bool>(r, std::move(error), [&] {
                   return redis_detail::decode_flag_reply(r.get(), "complete");
                 }));
               });
  }

  [[nodiscard]] bool claims_fresh() const {
    return pipelines && !options.backend.clock && fresh_claims.load(std::memory_order_relaxed);
  }

  // note() keeps what a fresh claim found: whether the next sends TIME, and whether the server
  // refused their commands as such (before Redis 7), which turns fresh claims off for good
  // (the script reads a fresh record left there by PTTL).
  void note(const redis_detail::FreshAnswer& a) {
    meets_claimed.store(a.met_claimed, std::memory_order_relaxed);
    if (a.refused) fresh_claims.store(false, std::memory_order_relaxed);
  }

  // claim_fresh() is redis_detail::claim_fresh on the shared connections: what it answered, or
  // nullopt for the script to decide. Throws `StoreError` as redis_detail::claim_fresh does.
  std::optional<ClaimResult> claim_fresh(std::string_view key, const ClaimRequest& request,
                                         std::chrono::milliseconds lease,
                                         std::chrono::milliseconds ttl) {
    redis_detail::FreshAnswer a =
        redis_detail::claim_fresh(*pipelines, redis_key(key), key, request, lease, ttl,
                                  meets_claimed.load(std::memory_order_relaxed));
    note(a);
    return std::move(a.answered);
  }

  // claim_script_async() is a claim by the script on `pipeline` (claim_async's).
  void claim_script_async(redis_detail::AsyncPipeline& pipeline, std::string key,
                          std::chrono::milliseconds lease, const ClaimRequest& request,
                          ClaimDone done) {
    std::string command;
    if (!Connection::format(evalsha_args(redis_key(key), {"claim", now_arg(), request.claim_token,
                                                          std::to_string(lease.count()), ttl_text,
                                                          optional_arg(request.fingerprint)}),
                            command)) {
      done(StoreFailure{"redis: out of memory"});
      return;
    }
    redis_detail::evalsha_async(pipeline, std::move(command), script_call(),
                                [key = std::move(key), token = request.claim_token,
                                 done = std::move(done)](ReplyPtr r, std::string error) {
                                  done(async_outcome<ClaimResult>(r, std::move(error), [&] {
                                    return redis_detail::decode_claim_reply(r.get(), key, token);
                                  }));
                                });
  }

  // claim_fresh_async() is redis_detail::claim_fresh_async on `pipeline`, then the script
  // when it did not answer.
  void claim_fresh_async(redis_detail::AsyncPipeline& pipeline, std::string key,
                         std::chrono::milliseconds lease, const ClaimRequest& request,
                         std::chrono::milliseconds ttl, ClaimDone done) {
    std::string stored = redis_key(key);
    redis_detail::claim_fresh_async(
        pipeline, std::move(stored), key, request, lease, ttl,
        meets_claimed.load(std::memory_order_relaxed),
        [this, &pipeline, key, lease, request,
         done](std::variant<redis_detail::FreshAnswer, StoreFailure> r) mutable {
          if (auto* failed = std::get_if<StoreFailure>(&r)) {
            done(std::move(*failed));
            return;
          }
          auto& a = std::get<redis_detail::FreshAnswer>(r);
          note(a);
          if (a.answered) {
            done(std::move(*a.answered));
            return;
          }
          claim_script_async(pipeline, std::move(key), lease, request, std::move(done));
        });
  }

  // eval_async() is eval() for the I/O thread's connection (evalsha_async): `done` gets the
  // script's reply (an error reply as it is), or nullptr and the failure's message; on the I/O
  // thread, or here when the command cannot be formatted.
  void eval_async(const std::string& redis_key, const std::vector<std::string>& argv,
                  redis_detail::EvalDone done) {
    std::string command;
    if (!Connection::format(evalsha_args(redis_key, argv), command)) {
      done(nullptr, "redis: out of memory");
      return;
    }
    redis_detail::evalsha_async(async_pipeline(), std::move(command), script_call(),
                                std::move(done));
  }

  // The script to call: views of `script` and `sha`, which never change after the constructor.
  [[nodiscard]] redis_detail::Script script_call() const { return {script, sha}; }

  // EVALSHA of the script on `redis_key` with `argv`, as views of them.
  std::vector<std::string_view> evalsha_args(const std::string& redis_key,
                                             const std::vector<std::string>& argv) const {
    std::vector<std::string_view> args = {"EVALSHA", sha, "1", redis_key};
    for (const std::string& a : argv) args.emplace_back(a);
    return args;
  }

  Lease acquire() { return pool.acquire(); }
  void count(store_detail::WaitEnd end) noexcept { waits.count(end); }

  ConnectionPtr connect() const { return connect_to({endpoint.host, endpoint.port}); }

  ConnectionPtr connect_to(const RedisNode& node) const {
    return redis_detail::open_session(node, endpoint, options, tls.get());
  }

  // One round trip: EVALSHA (plus SCRIPT LOAD and a second EVALSHA after NOSCRIPT, when the
  // server lost its script cache). Every operation is safe to repeat (a retried claim carries
  // its claim token, complete and release their fence), so a call that finds its pooled
  // connection closed by the server retries once on a fresh one. A timeout is not retried.
  // With `waited` (and `?replicas=N`), WAIT N follows on the same connection and its reply
  // is stored there, for the caller to judge once it knows whether the script wrote.
  ReplyPtr eval(const std::string& redis_key, const std::vector<std::string>& argv,
                ReplyPtr* waited = nullptr) {
    const std::vector<std::string_view> args = evalsha_args(redis_key, argv);
    static const std::vector<std::string_view> kNoWait;
    const std::vector<std::string_view>& wait = waited != nullptr ? wait_command : kNoWait;
    const redis_detail::Script call = script_call();
    if (cluster) {
      ReplyPtr r = cluster->call(redis_key, args, &call, wait, waited);
      if (is_error_reply(r.get())) throw_reply_error(r.get(), "script failed");
      return r;
    }
    if (pipelines) return eval_pipelined(args, call);
    for (int attempt = 0;; ++attempt) {
      Lease conn = acquire();
      ReplyPtr r = redis_detail::call_script(conn, args, call, wait, waited);
      if (!r) {
        const bool closed = conn.get()->failure() == IoFailure::kClosed;
        std::string message = conn.get()->error();
        const bool reused = conn.reused();
        conn.broken();
        if (closed && reused && attempt == 0) continue;
        throw StoreError(message);
      }
      if (is_error_reply(r.get())) throw_reply_error(r.get(), "script failed");
      return r;
    }
  }

  // The shared connections' calls (a script's with `script`): retried once when the call
  // provably never left, or found a connection the server had closed (as the pool's path does).
  // A command outside the script (TIME, SCRIPT LOAD) is retried only when it never left: nullptr
  // then, with `error` saying how.
  ReplyPtr pipelined(const std::vector<std::string_view>& args, const redis_detail::Script* script,
                     std::string& error) {
    redis_detail::PipelinedCall call;
    for (int attempt = 0;; ++attempt) {
      ReplyPtr r = redis_detail::call_pipelined(*pipelines, args, script, call);
      if (r) return r;
      if (attempt == 0 && redis_detail::retry_is_safe(call.failed, call.fresh, call.unreachable,
                                                      script != nullptr)) {
        continue;
      }
      error = std::move(call.failed.error);
      return nullptr;
    }
  }

  ReplyPtr eval_pipelined(const std::vector<std::string_view>& args,
                          const redis_detail::Script& call) {
    std::string error;
    ReplyPtr r = pipelined(args, &call, error);
    if (!r) throw StoreError(error);
    if (is_error_reply(r.get())) throw_reply_error(r.get(), "script failed");
    return r;
  }

  // command() sends one command outside the script (TIME, SCRIPT LOAD) on a single node: nullptr
  // when the connection failed, with `error` saying how.
  ReplyPtr command(const std::vector<std::string_view>& args, std::string& error) {
    if (pipelines) return pipelined(args, nullptr, error);
    Lease conn = acquire();
    ReplyPtr r = conn.get()->command(args);
    if (!r) {
      error = conn.get()->error();
      conn.broken();
    }
    return r;
  }

  // require_replicas() throws unless WAIT's reply says `?replicas=N` replicas have the write:
  // a shortfall is an error (the message is nacked and redelivered), never a silent success.
  void require_replicas(const ReplyPtr& waited, std::string_view op) const {
    if (endpoint.replicas == 0) return;
    if (!waited || waited->type != REDIS_REPLY_INTEGER) {
      throw StoreError("redis: unexpected reply to WAIT after " + std::string(op));
    }
    if (waited->integer < endpoint.replicas) {
      throw StoreError("redis: the " + std::string(op) + " reached " +
                       std::to_string(waited->integer) + " of " + wait_replicas +
                       " replicas within " + wait_ms + " ms (replicas=" + wait_replicas + ")");
    }
  }

  std::string now_arg() const {
    if (!options.backend.clock) return "";  // the script asks the server's TIME
    return std::to_string(to_millis(options.backend.clock->now()));
  }

  // now() is the instant a record read outside the script is judged by: the injected clock's,
  // else the server's TIME; nullopt when the server's reply cannot be read.
  std::optional<Millis> now(std::string_view redis_key) {
    if (options.backend.clock) return to_millis(options.backend.clock->now());
    ReplyPtr t;
    if (cluster) {
      t = cluster->call(redis_key, {"TIME"});  // the clock of the node the script runs on
    } else {
      std::string ignored;  // a failure reads as "no time": the caller judges without one
      t = command({"TIME"}, ignored);
    }
    return t ? redis_detail::server_millis(t.get()) : std::nullopt;
  }

  std::string redis_key(std::string_view key) const {
    std::string k;
    k.reserve(options.key_prefix.size() + key.size());
    k.append(options.key_prefix);
    k.append(key);
    return k;
  }
};

}  // namespace idempotency
