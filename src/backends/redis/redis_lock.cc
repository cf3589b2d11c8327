// RedisLock: a bounded pool of connections (plain or TLS) and one EVALSHA per operation.
#include "idempotency/redis_lock.h"

#include <hiredis/hiredis.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "common/connection_pool.h"
#include "common/notify_wait.h"
#include "idempotency/errors.h"
#include "idempotency/key.h"
#include "redis_connection.h"
#include "redis_internal.h"
#include "redis_tls.h"

namespace idempotency {

using redis_detail::Connection;
using redis_detail::ConnectionPtr;
using redis_detail::IoFailure;
using redis_detail::ReplyPtr;

namespace {

bool is_error(const redisReply* r) { return r->type == REDIS_REPLY_ERROR; }

std::string reply_text(const redisReply* r) { return std::string(r->str, r->len); }

// The server's message for an error reply, without any echo of our arguments.
[[noreturn]] void throw_reply_error(const redisReply* r, std::string_view context) {
  throw StoreError("redis: " + std::string(context) + ": " + reply_text(r));
}

std::string optional_arg(const std::optional<std::string>& v) {
  return v ? "+" + *v : std::string("-");
}

}  // namespace

struct RedisLock::Impl {
  Impl(std::string_view url, RedisOptions o)
      : options(validated(std::move(o))),
        endpoint(parse_redis_url(url)),
        tls(endpoint.tls ? std::make_unique<redis_detail::TlsContext>(*endpoint.tls) : nullptr),
        pool(
            "redis", options.pool_size, options.pool_wait, [this] { return connect(); },
            [](const ConnectionPtr& c) { return c->failure() == IoFailure::kNone; }) {}

  static RedisOptions validated(RedisOptions o) {
    if (o.pool_size == 0) throw std::invalid_argument("RedisOptions::pool_size must be >= 1");
    if (o.pool_wait < std::chrono::milliseconds::zero()) {
      throw std::invalid_argument("RedisOptions::pool_wait must be >= 0");
    }
    if (o.connect_timeout <= std::chrono::milliseconds::zero()) {
      throw std::invalid_argument("RedisOptions::connect_timeout must be positive");
    }
    if (o.command_timeout <= std::chrono::milliseconds::zero()) {
      throw std::invalid_argument("RedisOptions::command_timeout must be positive");
    }
    return o;
  }

  RedisOptions options;
  RedisEndpoint endpoint;
  std::unique_ptr<const redis_detail::TlsContext> tls;  // for rediss://, shared by connections
  std::string sha;  // of kScript, as the server reported it; set once in the constructor
  // How waits ended.
  store_detail::WaitTally waits;
  store_detail::ConnectionPool<ConnectionPtr> pool;  // last: its connections are closed first
  using Lease = store_detail::ConnectionPool<ConnectionPtr>::Lease;

  Lease acquire() { return pool.acquire(); }
  void drop_idle() noexcept { pool.drop_idle(); }
  void count(store_detail::WaitEnd end) noexcept { waits.count(end); }

  ConnectionPtr connect() const {
    ConnectionPtr c = Connection::open(endpoint.host, endpoint.port,
                                       {.connect_timeout = options.connect_timeout,
                                        .command_timeout = options.command_timeout,
                                        .tls = tls.get()});
    if (!endpoint.password.empty()) {
      std::vector<std::string_view> auth = {"AUTH"};
      if (!endpoint.user.empty()) auth.push_back(endpoint.user);
      auth.push_back(endpoint.password);
      ReplyPtr r = c->command(auth);
      if (!r) throw StoreError(c->error());
      if (is_error(r.get())) throw_reply_error(r.get(), "AUTH failed");
    }
    if (endpoint.db != 0) {
      const std::string db = std::to_string(endpoint.db);
      ReplyPtr r = c->command({"SELECT", db});
      if (!r) throw StoreError(c->error());
      if (is_error(r.get())) throw_reply_error(r.get(), "SELECT failed");
    }
    return c;
  }

  std::string load_script(Connection* c) {
    ReplyPtr r = c->command({"SCRIPT", "LOAD", redis_detail::kScript});
    if (!r) throw StoreError(c->error());
    if (is_error(r.get())) throw_reply_error(r.get(), "SCRIPT LOAD failed");
    if (r->type != REDIS_REPLY_STRING || r->len != 40) {
      throw StoreError("redis: unexpected reply to SCRIPT LOAD");
    }
    return reply_text(r.get());
  }

  // One round trip: EVALSHA (plus SCRIPT LOAD and a second EVALSHA after NOSCRIPT, when the
  // server lost its script cache). Every operation is safe to repeat (a retried claim carries
  // its claim token, complete and release their fence), so a call that finds its pooled
  // connection closed by the server retries once on a fresh one. A timeout is not retried.
  ReplyPtr eval(const std::string& redis_key, const std::vector<std::string>& argv) {
    std::vector<std::string_view> args = {"EVALSHA", sha, "1", redis_key};
    for (const std::string& a : argv) args.emplace_back(a);
    for (int attempt = 0;; ++attempt) {
      Lease conn = acquire();
      ReplyPtr r = conn.get()->command(args);
      if (r && is_error(r.get()) && reply_text(r.get()).rfind("NOSCRIPT", 0) == 0) {
        if (load_script(conn.get()) != sha) {
          throw StoreError("redis: the server reports another digest for the script");
        }
        r = conn.get()->command(args);
      }
      if (!r) {
        const bool closed = conn.get()->failure() == IoFailure::kClosed;
        std::string message = conn.get()->error();
        drop_idle();
        if (closed && conn.reused() && attempt == 0) continue;
        throw StoreError(message);
      }
      if (is_error(r.get())) throw_reply_error(r.get(), "script failed");
      return r;
    }
  }

  std::string now_arg() const {
    if (!options.backend.clock) return "";  // the script asks the server's TIME
    return std::to_string(to_millis(options.backend.clock->now()));
  }

  // now() is the instant a record read outside the script is judged by: the injected clock's,
  // else the server's TIME; nullopt when the server's reply cannot be read.
  std::optional<Millis> now() {
    if (options.backend.clock) return to_millis(options.backend.clock->now());
    Lease conn = acquire();
    ReplyPtr t = conn.get()->command({"TIME"});
    if (!t || t->type != REDIS_REPLY_ARRAY || t->elements != 2) return std::nullopt;
    return std::stoll(reply_text(t->element[0])) * 1000 +
           std::stoll(reply_text(t->element[1])) / 1000;
  }

  std::string redis_key(std::string_view key) const {
    std::string k;
    k.reserve(options.key_prefix.size() + key.size());
    k.append(options.key_prefix);
    k.append(key);
    return k;
  }
};

RedisLock::RedisLock(std::string_view url, RedisOptions options)
    : LockBackend(options.backend), impl_(std::make_unique<Impl>(url, std::move(options))) {
  // Connect now, so a wrong address or password fails at start-up rather than mid-traffic.
  Impl::Lease conn = impl_->acquire();
  impl_->sha = impl_->load_script(conn.get());
}

RedisLock::~RedisLock() = default;

const std::string& RedisLock::key_prefix() const noexcept { return impl_->options.key_prefix; }

WaitCounts RedisLock::wait_counts() const noexcept { return impl_->waits.counts(); }

std::optional<Record> RedisLock::do_inspect(std::string_view key) {
  const std::string k = impl_->redis_key(key);
  Impl::Lease conn = impl_->acquire();
  ReplyPtr r = conn.get()->command({"HGETALL", k});
  if (!r) {
    std::string message = conn.get()->error();
    impl_->drop_idle();
    throw StoreError(message);
  }
  if (is_error(r.get())) throw_reply_error(r.get(), "HGETALL failed");
  return redis_detail::decode_record(r.get());
}

ClaimResult RedisLock::do_claim(std::string_view key, std::chrono::milliseconds lease,
                                const ClaimRequest& request) {
  ReplyPtr r =
      impl_->eval(impl_->redis_key(key),
                  {"claim", impl_->now_arg(), request.claim_token, std::to_string(lease.count()),
                   std::to_string(ttl().count()), optional_arg(request.fingerprint)});
  return redis_detail::decode_claim_reply(r.get(), key, request.claim_token);
}

bool RedisLock::do_complete(const Claim& claim, std::optional<std::string> result) {
  ReplyPtr r = impl_->eval(impl_->redis_key(claim.key),
                           {"complete", impl_->now_arg(), std::to_string(claim.fence),
                            std::to_string(ttl().count()), optional_arg(result)});
  return redis_detail::decode_flag_reply(r.get(), "complete");
}

void RedisLock::do_release(const Claim& claim) {
  ReplyPtr r = impl_->eval(
      impl_->redis_key(claim.key),
      {"release", impl_->now_arg(), std::to_string(claim.fence), std::to_string(ttl().count())});
  (void)redis_detail::decode_flag_reply(r.get(), "release");
}

std::optional<TimePoint> RedisLock::do_extend(const Claim& claim, std::chrono::milliseconds lease) {
  ReplyPtr r =
      impl_->eval(impl_->redis_key(claim.key),
                  {"extend", impl_->now_arg(), std::to_string(claim.fence), claim.claim_token,
                   std::to_string(lease.count()), std::to_string(ttl().count())});
  return redis_detail::decode_extend_reply(r.get());
}

std::size_t RedisLock::do_purge_expired() { return 0; }

void RedisLock::do_wait_for_change(std::string_view key, std::chrono::milliseconds timeout,
                                   const std::stop_token& stop) {
  ConnectionPtr sub;  // subscribed, it can run no other command, so it is not a pooled one
  bool woken_early = false;
  const store_detail::WaitEnd end = store_detail::wait_for_notification(
      timeout, stop,
      [&]() -> std::optional<int> {
        sub = impl_->connect();
        ReplyPtr r = sub->command({"SUBSCRIBE", impl_->redis_key(key)});
        if (!r || r->type != REDIS_REPLY_ARRAY) throw StoreError("redis: SUBSCRIBE failed");
        // A message that arrived with the confirmation is already read (by the reply parser or
        // OpenSSL), where poll() cannot see it: wake now.
        if (sub->has_unread_input()) {
          woken_early = true;
          return std::nullopt;
        }
        const std::optional<Record> rec = do_inspect(key);
        if (!rec || rec->state == RecordState::kDone) return std::nullopt;
        const std::optional<Millis> now = impl_->now();
        if (!now || !store_detail::worth_waiting(rec, now)) return std::nullopt;
        return sub->fd();
      },
      [] { return true; },  // a message, EOF or an error (or a TLS record of no data): wake
      [&](std::chrono::milliseconds left) { LockBackend::do_wait_for_change(key, left, stop); });
  impl_->count(woken_early ? store_detail::WaitEnd::kWoken : end);
}

}  // namespace idempotency
