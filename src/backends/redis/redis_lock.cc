// RedisLock: a bounded pool of connections (plain or TLS) and one EVALSHA per operation; the
// blocking operations and the wait for a change (the asynchronous ones: redis_lock_async.cc).
#include "idempotency/redis_lock.h"

#include <chrono>
#include <cstddef>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>

#include "common/notify_wait.h"
#include "redis_lock_impl.h"

namespace idempotency {

RedisLock::RedisLock(std::string_view url, RedisOptions options)
    : LockBackend(options.backend), impl_(std::make_unique<Impl>(url, std::move(options))) {
  impl_->ttl_text = std::to_string(ttl().count());
  // Connect now, so a wrong address or password fails at start-up rather than mid-traffic.
  if (impl_->cluster) {
    impl_->cluster->refresh();
    // The digest is the script's, the same on every node; each node loads it on its first
    // NOSCRIPT. Loaded here on slot 0's master, through the router's retries.
    ReplyPtr r = impl_->cluster->call("", {"SCRIPT", "LOAD", impl_->script});
    impl_->sha = redis_detail::loaded_digest(r.get());
    try {  // a check that only warns: the backend opens whatever INFO does
      redis_detail::warn_if_evicting(impl_->cluster->call("", {"INFO", "memory"}).get());
    } catch (const StoreError&) {  // NOLINT(bugprone-empty-catch): nothing to warn of
    }
    return;
  }
  std::string error;
  ReplyPtr r = impl_->command({"SCRIPT", "LOAD", impl_->script}, error);
  if (!r) throw StoreError(error);
  impl_->sha = redis_detail::loaded_digest(r.get());
  redis_detail::warn_if_evicting(impl_->command({"INFO", "memory"}, error).get());
}

RedisLock::~RedisLock() = default;

const std::string& RedisLock::key_prefix() const noexcept { return impl_->options.key_prefix; }

WaitCounts RedisLock::wait_counts() const noexcept { return impl_->waits.counts(); }

std::optional<Record> RedisLock::do_inspect(std::string_view key) {
  // Through the script, which reads every form a record takes (RedisLock::Impl::fresh_claims).
  ReplyPtr r = impl_->eval(impl_->redis_key(key), {"inspect", impl_->now_arg()});
  return redis_detail::decode_record(r.get());
}

ClaimResult RedisLock::do_claim(std::string_view key, std::chrono::milliseconds lease,
                                const ClaimRequest& request) {
  if (impl_->claims_fresh()) {
    if (std::optional<ClaimResult> answered = impl_->claim_fresh(key, request, lease, ttl())) {
      return std::move(*answered);
    }
  }
  ReplyPtr waited;
  ReplyPtr r =
      impl_->eval(impl_->redis_key(key),
                  {"claim", impl_->now_arg(), request.claim_token, std::to_string(lease.count()),
                   impl_->ttl_text, optional_arg(request.fingerprint)},
                  &waited);
  ClaimResult result = redis_detail::decode_claim_reply(r.get(), key, request.claim_token);
  // Only a win wrote something a failover could lose; a replay or a held key did not.
  if (std::holds_alternative<Won>(result)) impl_->require_replicas(waited, "claim");
  return result;
}

bool RedisLock::do_complete(const Claim& claim, std::optional<std::string> result) {
  ReplyPtr waited;
  ReplyPtr r = impl_->eval(impl_->redis_key(claim.key),
                           {"complete", impl_->now_arg(), std::to_string(claim.fence),
                            impl_->ttl_text, optional_arg(result)},
                           &waited);
  const bool completed = redis_detail::decode_flag_reply(r.get(), "complete");
  if (completed) impl_->require_replicas(waited, "complete");
  return completed;
}

void RedisLock::do_release(const Claim& claim) {
  ReplyPtr r =
      impl_->eval(impl_->redis_key(claim.key),
                  {"release", impl_->now_arg(), std::to_string(claim.fence), impl_->ttl_text});
  (void)redis_detail::decode_flag_reply(r.get(), "release");
}

std::optional<TimePoint> RedisLock::do_extend(const Claim& claim, std::chrono::milliseconds lease) {
  ReplyPtr r = impl_->eval(impl_->redis_key(claim.key),
                           {"extend", impl_->now_arg(), std::to_string(claim.fence),
                            claim.claim_token, std::to_string(lease.count()), impl_->ttl_text});
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
        const std::string k = impl_->redis_key(key);
        // On a cluster, the shard channel of the key's slot on the master that serves it.
        sub = impl_->cluster ? impl_->cluster->connect_for(k) : impl_->connect();
        ReplyPtr r = sub->command({impl_->cluster ? "SSUBSCRIBE" : "SUBSCRIBE", k});
        if (!r || r->type != REDIS_REPLY_ARRAY) throw StoreError("redis: SUBSCRIBE failed");
        // A message that arrived with the confirmation is already read (by the reply parser or
        // OpenSSL), where poll() cannot see it: wake now.
        if (sub->has_unread_input()) {
          woken_early = true;
          return std::nullopt;
        }
        const std::optional<Record> rec = do_inspect(key);
        if (!rec || rec->state == RecordState::kDone) return std::nullopt;
        const std::optional<Millis> now = impl_->now(k);
        if (!now || !store_detail::worth_waiting(rec, now)) return std::nullopt;
        return sub->fd();
      },
      [] { return true; },  // a message, EOF or an error (or a TLS record of no data): wake
      [&](std::chrono::milliseconds left) { LockBackend::do_wait_for_change(key, left, stop); });
  impl_->count(woken_early ? store_detail::WaitEnd::kWoken : end);
}

}  // namespace idempotency
