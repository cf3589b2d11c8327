#include "idempotency/memory_lock.h"

#include <array>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace idempotency {

struct InMemoryLock::State {
  // Enough shards that threads on different keys rarely meet, few enough to stay small.
  static constexpr std::size_t kShards = 32;
  // Buckets inspected for expired records on each write to a shard. A write adds at most one
  // record and the map keeps at least one bucket per record, so sweeping two per write goes
  // round the whole shard faster than it can grow: the shard stays within about twice its
  // live records with no thread of its own.
  static constexpr std::size_t kSweepBuckets = 2;
  // Looks records up by string_view, so a lookup builds no std::string.
  struct KeyHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view key) const noexcept {
      return std::hash<std::string_view>{}(key);
    }
  };
  struct Shard {
    mutable std::mutex mutex;
    std::unordered_map<std::string, Record, KeyHash, std::equal_to<>> records;
    std::size_t sweep_cursor = 0;  // the next bucket to inspect
  };
  std::array<Shard, kShards> shards;
  std::shared_ptr<const Clock> clock;

  Shard& shard_for(std::string_view key) {
    return shards[std::hash<std::string_view>{}(key) % kShards];
  }
  const Shard& shard_for(std::string_view key) const {
    return shards[std::hash<std::string_view>{}(key) % kShards];
  }
  Millis now() const { return to_millis(clock->now()); }

  // Applies `op` to `key` under its shard's lock and stores the outcome.
  Transition apply(std::string_view key, const Operation& op) {
    Shard& shard = shard_for(key);
    std::lock_guard lock(shard.mutex);
    auto it = shard.records.find(key);
    const Millis at = now();
    // An expired record is absent, exactly as if the sweep below had reached it already (and
    // as on Redis, which deletes at expires_at): so when the sweep runs changes no answer.
    std::optional<Record> current;
    if (it != shard.records.end() && at < it->second.expires_at) current = it->second;
    Transition t = transition(current, op, at);
    if (t.changed) {
      if (t.record && it != shard.records.end()) {
        it->second = *t.record;
      } else if (t.record) {
        shard.records.emplace(std::string(key), *t.record);
      } else if (it != shard.records.end()) {
        shard.records.erase(it);
      }
    }
    sweep(shard, at);
    return t;
  }

  // Deletes the expired records of the next kSweepBuckets buckets. Expired records answer as
  // absent already, so this changes no answer.
  static void sweep(Shard& shard, Millis at) {
    auto& records = shard.records;
    for (std::size_t i = 0; i < kSweepBuckets; ++i) {
      const std::size_t bucket = shard.sweep_cursor++ % records.bucket_count();
      for (auto it = records.begin(bucket); it != records.end(bucket);) {
        const auto current = it++;  // advance first: erasing invalidates `current` only
        if (at >= current->second.expires_at) {
          const std::string victim = current->first;  // not a reference into the dying node
          records.erase(victim);
        }
      }
    }
  }
};

InMemoryLock::InMemoryLock(BackendOptions options)
    : LockBackend(options), state_(std::make_unique<State>()) {
  state_->clock = options.clock ? std::move(options.clock) : system_clock();
}

InMemoryLock::~InMemoryLock() = default;

ClaimResult InMemoryLock::do_claim(std::string_view key, std::chrono::milliseconds lease,
                                   const ClaimRequest& request) {
  Transition t = state_->apply(
      key, ClaimOp{request.claim_token, lease.count(), ttl().count(), request.fingerprint});
  return claim_result(key, *t.record, *t.answer.claim);
}

bool InMemoryLock::do_complete(const Claim& claim, std::optional<std::string> result) {
  return state_->apply(claim.key, CompleteOp{claim.fence, std::move(result), ttl().count()})
      .answer.ok;
}

void InMemoryLock::do_release(const Claim& claim) {
  (void)state_->apply(claim.key, ReleaseOp{claim.fence, ttl().count()});
}

std::optional<TimePoint> InMemoryLock::do_extend(const Claim& claim,
                                                 std::chrono::milliseconds lease) {
  return extend_result(state_->apply(
      claim.key, ExtendOp{claim.fence, claim.claim_token, lease.count(), ttl().count()}));
}

std::size_t InMemoryLock::do_purge_expired() {
  const Millis now = state_->now();
  std::size_t purged = 0;
  for (auto& shard : state_->shards) {
    std::lock_guard lock(shard.mutex);
    purged += std::erase_if(shard.records,
                            [now](const auto& entry) { return now >= entry.second.expires_at; });
  }
  return purged;
}

std::size_t InMemoryLock::stored_count() const {
  std::size_t count = 0;
  for (const auto& shard : state_->shards) {
    std::lock_guard lock(shard.mutex);
    count += shard.records.size();
  }
  return count;
}

std::size_t InMemoryLock::entry_count() {
  (void)purge_expired();
  std::size_t count = 0;
  for (auto& shard : state_->shards) {
    std::lock_guard lock(shard.mutex);
    count += shard.records.size();
  }
  return count;
}

std::optional<Record> InMemoryLock::do_inspect(std::string_view key) {
  const auto& shard = state_->shard_for(key);
  std::lock_guard lock(shard.mutex);
  auto it = shard.records.find(key);
  if (it == shard.records.end()) return std::nullopt;
  return it->second;
}

}  // namespace idempotency
