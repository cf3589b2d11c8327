#include "idempotency/memory_lock.h"

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

#include "block_arena.h"
#include "idempotency/detail/sip_hash.h"
#include "record_table.h"

namespace idempotency {

struct InMemoryLock::State {
  // Enough shards that threads on different keys rarely meet, few enough to stay small. A
  // power of two: the top bits of a key's hash pick its shard, the low bits its slot.
  static constexpr std::size_t kShardBits = 5;
  static constexpr std::size_t kShards = std::size_t{1} << kShardBits;
  // Slots inspected for expired records each time a record is added to a shard. Only
  // additions make a table grow, and at four slots each a sweep goes round a table of C slots
  // in C/4 additions, fewer than the 3C/8 that fill it from half to its 3/4 limit: the shard
  // stays within about twice its live records with no thread of its own.
  static constexpr std::size_t kSweepSlots = 4;
  // One cache line each, so that threads working in two shards do not share a line.
  struct alignas(64) Shard {
    explicit Shard(detail::SlabSource& slabs) : table(slabs) {}
    std::mutex mutex;
    detail::RecordTable table;
  };
  template <std::size_t... I>
  static std::array<Shard, kShards> make_shards(detail::SlabSource& slabs,
                                                std::index_sequence<I...> /*unused*/) {
    return {{((void)I, Shard(slabs))...}};
  }
  std::shared_ptr<const Clock> clock;
  // Random per store: callers cannot aim keys at one run of slots.
  detail::SipKey hash_key = detail::random_sip_key();
  // The shards' records live in its runs: declared before them, destroyed after them.
  detail::SlabSource slabs;
  std::array<Shard, kShards> shards = make_shards(slabs, std::make_index_sequence<kShards>());

  static std::uint64_t shard_of(std::uint64_t hash) { return hash >> (64 - kShardBits); }
  std::uint64_t hash(std::string_view key) const { return detail::sip_hash13(hash_key, key); }
  Millis now() const { return to_millis(clock->now()); }

  // Applies `op` to `key` under its shard's lock and stores the outcome.
  Transition apply(std::string_view key, Operation op) {
    const std::uint64_t h = hash(key);
    Shard& shard = shards[shard_of(h)];
    std::lock_guard lock(shard.mutex);
    detail::RecordTable& table = shard.table;
    table.prefetch(h);  // the misses load while the clock is read
    const Millis at = now();
    const std::size_t slot = table.find(key, h);
    // An expired record is absent, exactly as if the sweep below had reached it already (and
    // as on Redis, which deletes at expires_at): so when the sweep runs changes no answer.
    std::optional<Record> current;
    if (slot != detail::RecordTable::kNone && at < table.expires_at(slot)) {
      current = table.record(slot);
    }
    Transition t = transition(std::move(current), std::move(op), at);
    if (t.changed) {
      if (t.record && slot != detail::RecordTable::kNone) {
        table.assign(slot, *t.record);
      } else if (t.record) {
        table.insert(key, h, *t.record);
        table.sweep(at, kSweepSlots);
      } else if (slot != detail::RecordTable::kNone) {
        table.erase(slot);
      }
    }
    return t;
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
  // The record is stored already: its strings move into the answer.
  return claim_result(key, std::move(*t.record), *t.answer.claim);
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
    purged += shard.table.purge_expired(now);
  }
  return purged;
}

std::size_t InMemoryLock::stored_count() const {
  std::size_t count = 0;
  for (auto& shard : state_->shards) {
    std::lock_guard lock(shard.mutex);
    count += shard.table.size();
  }
  return count;
}

std::size_t InMemoryLock::entry_count() {
  (void)purge_expired();
  return stored_count();
}

std::optional<Record> InMemoryLock::do_inspect(std::string_view key) {
  const std::uint64_t h = state_->hash(key);
  auto& shard = state_->shards[State::shard_of(h)];
  std::lock_guard lock(shard.mutex);
  const std::size_t slot = shard.table.find(key, h);
  if (slot == detail::RecordTable::kNone) return std::nullopt;
  return shard.table.record(slot);
}

}  // namespace idempotency
